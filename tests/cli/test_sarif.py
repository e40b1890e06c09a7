"""`crane check --format sarif`: valid SARIF 2.1.0 (the schema of Microsoft's sarif-sdk, vendored with its MIT
license in tests/cli/sarif/), one result per predicted crash with its rule, level and a region on the cell's
line inside the .ipynb JSON text, the cell and line in the message and properties, errors as notifications."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from crane.commands.sarif import CONFIDENT, RULE_DESCRIPTIONS, level
from crane.finding import Finding
from crane.rulekit.registry import load_rules

from .conftest import crane, make_notebook

SCHEMA = json.loads((Path(__file__).parent / "sarif" / "sarif-schema-2.1.0.json").read_text())


def jupyter_notebook(path: Path, cells: list[tuple[str, int | None]]) -> Path:
    """Written as Jupyter writes it: indent=1, sorted keys, raw UTF-8, `source` as a list of lines."""
    out: list[dict] = [{"cell_type": "code", "execution_count": count, "id": f"c{i}", "metadata": {}, "outputs": [],
            "source": src.splitlines(keepends=True)} for i, (src, count) in enumerate(cells)]
    nb = {"cells": out, "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def validator():
    """The SARIF 2.1.0 schema's validator. jsonschema is imported here, not at the top: its import builds a URI
    grammar parser (2.5 CPU-s), which every xdist worker would pay at collection."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(SCHEMA)


def sarif(*args, cwd) -> tuple[dict, int, str]:
    res = crane("check", *args, "--format", "sarif", cwd=cwd)
    doc = json.loads(res.stdout)
    errors = sorted(validator().iter_errors(doc), key=str)
    assert not errors, [e.message for e in errors[:5]]
    return doc, res.returncode, res.stderr


def region_text(root: Path, location: dict) -> str:
    """The text of the file that a result's (or a related location's) region covers."""
    loc = (location["locations"][0] if "locations" in location else location)["physicalLocation"]
    reg = loc["region"]
    assert reg["startLine"] == reg["endLine"]
    line = (root / unquote(loc["artifactLocation"]["uri"])).read_text(encoding="utf-8").split("\n")[
        reg["startLine"] - 1]
    units = line.encode("utf-16-le")  # SARIF columns count UTF-16 code units
    return units[(reg["startColumn"] - 1) * 2 : (reg["endColumn"] - 1) * 2].decode("utf-16-le")


def test_static_results_point_at_the_cell_line_inside_the_notebook_json(nb_dir):
    nb = jupyter_notebook(nb_dir / "my nbs" / "prices é.ipynb", [
        ("import math\nd = {'price': 1}", 1),
        ("total = 1\nprint(d['prices'])\n", None),  # KeyError (confidence 0.92: error)
        ("math.tau2", None),  # AttributeError on a module (confidence 0.85: warning)
        ("print(d['price'])", None),
        ("s = 'é😀'; print(s, undefined_x)", None),  # NameError after non-ASCII text
    ])
    doc, rc, err = sarif("my nbs", "--mode", "static", cwd=nb_dir)
    assert rc == 1, err
    [run] = doc["runs"]
    assert doc["version"] == "2.1.0"
    driver = run["tool"]["driver"]
    assert driver["name"] == "CRANE" and driver["version"] and "informationUri" not in driver  # no public URL yet
    assert [r["id"] for r in driver["rules"]] == ["missing-attribute", "missing-key", "undefined-name"]
    assert all(r["shortDescription"]["text"] == RULE_DESCRIPTIONS[r["id"]] for r in driver["rules"])
    assert run["invocations"][0]["executionSuccessful"] is True
    key, attr, name = run["results"]
    for r in run["results"]:
        assert driver["rules"][r["ruleIndex"]]["id"] == r["ruleId"]
        art = r["locations"][0]["physicalLocation"]["artifactLocation"]
        assert art == {"uri": "my%20nbs/prices%20%C3%A9.ipynb", "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == nb_dir.resolve().as_uri() + "/"
    # the region is the cell's line in the stored JSON (what GitHub reads), the message names the cell and line
    assert key["ruleId"] == "missing-key" and key["level"] == "error"
    assert region_text(nb_dir, key) == "d['prices']"
    assert "cell 2, line 2" in key["message"]["text"] and key["message"]["text"].startswith("KeyError: ")
    assert key["properties"]["cell"] == 2 and key["properties"]["cellLine"] == 2
    assert key["properties"]["cellColumn"] == 7 and key["properties"]["source"] == "rules"
    assert attr["ruleId"] == "missing-attribute" and attr["level"] == "warning"
    assert region_text(nb_dir, attr) == "math.tau2"
    assert name["properties"]["cell"] == 5 and region_text(nb_dir, name) == "undefined_x"
    # UTF-16 columns (SARIF's default columnKind): the astral character before the name counts twice
    reg = name["locations"][0]["physicalLocation"]["region"]
    json_line = nb.read_text(encoding="utf-8").split("\n")[reg["startLine"] - 1]
    assert reg["startColumn"] - 1 == json_line.index("undefined_x") + 1
    assert nb.exists()


def test_auto_mode_sandbox_crash_is_an_error_on_the_cell_line(nb_dir):
    jupyter_notebook(nb_dir / "a.ipynb", [("import json\nd = {'a': 1}", 1), ("x = 2\ny = d['b'] + x\n", None)])
    doc, rc, _ = sarif("a.ipynb", cwd=nb_dir)
    assert rc == 1
    [result] = doc["runs"][0]["results"]
    assert result["ruleId"] == "sandbox" and result["level"] == "error"
    assert result["properties"]["sandbox"] == "crash" and result["properties"]["cellLine"] == 2
    assert region_text(nb_dir, result) == "y = d['b'] + x"
    assert "certain" in result["message"]["text"] and "cell 2, line 2" in result["message"]["text"]


def test_one_line_notebook_files_map_by_column(nb_dir):
    make_notebook(nb_dir / "one.ipynb", [("x = 1", 1), ('a = "q"\nprint(x + yy)', None)])  # json.dumps: one line
    assert len((nb_dir / "one.ipynb").read_text().splitlines()) == 1
    doc, rc, _ = sarif("one.ipynb", "--mode", "static", cwd=nb_dir)
    assert rc == 1
    [result] = doc["runs"][0]["results"]
    assert region_text(nb_dir, result) == "yy"


def test_errors_are_notifications_and_related_cells_are_locations(nb_dir):
    jupyter_notebook(nb_dir / "rel.ipynb", [("import pandas as pd\ndf = pd.DataFrame({'a': [1], 'b': [2]})", 1),
                                            ("df = df.drop(columns=['b'])", 2), ("df['b']", None)])
    (nb_dir / "broken.ipynb").write_text("{not json")
    doc, rc, _ = sarif("rel.ipynb", "broken.ipynb", "--mode", "static", cwd=nb_dir)
    assert rc == 2
    run = doc["runs"][0]
    inv = run["invocations"][0]
    assert inv["executionSuccessful"] is False
    [note] = inv["toolExecutionNotifications"]
    assert note["level"] == "error" and "broken.ipynb is not valid JSON" in note["message"]["text"]
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "broken.ipynb"
    [result] = run["results"]
    assert result["ruleId"] == "missing-key"
    [related] = result["relatedLocations"]
    assert "cell 2" in related["message"]["text"]
    assert region_text(nb_dir, related) == "df = df.drop(columns=['b'])"


def test_a_notebook_outside_the_current_folder_gets_an_absolute_file_uri(nb_dir):
    (nb_dir / "far").mkdir()
    nb = make_notebook(nb_dir / "far" / "a.ipynb", [("x = 1", 1), ("x + zz", None)])
    here = nb_dir / "here"
    here.mkdir()
    doc, rc, _ = sarif(str(nb), "--mode", "static", cwd=here)
    assert rc == 1
    art = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert art == {"uri": nb.resolve().as_uri()}


def test_no_crash_gives_an_empty_valid_run(nb_dir):
    make_notebook(nb_dir / "ok.ipynb", [("x = 1", 1), ("print(x)", None)])
    doc, rc, _ = sarif("ok.ipynb", "--mode", "static", cwd=nb_dir)
    assert rc == 0
    run = doc["runs"][0]
    assert run["results"] == [] and run["tool"]["driver"]["rules"] == []


def test_every_rule_has_a_description():
    assert set(load_rules()) <= set(RULE_DESCRIPTIONS)
    assert {"sandbox", "llm"} <= set(RULE_DESCRIPTIONS)


@pytest.mark.parametrize(("source", "confidence", "expected"), [
    ("sandbox", 1.0, "error"), ("rules", CONFIDENT, "error"), ("rules", 0.85, "warning"),
    ("llm", 0.99, "warning"),
])
def test_level_policy(source, confidence, expected):
    f = Finding(rule="r", ename="E", message="m", line=1, confidence=confidence, source=source)
    assert level(f) == expected


def test_sarif_log_unit_and_the_schema_is_strict(tmp_path):
    from crane.commands.output import CheckReport, NotebookReport, encode
    from crane.commands.sarif import sarif_log
    from crane.engine import CellResult

    nb = jupyter_notebook(tmp_path / "u.ipynb", [("a = 1", 1), ("a.nope", None)])
    finding = Finding(rule="future-rule", ename="AttributeError", message="'int' object has no attribute 'nope'",
                      line=1, col=0, end_line=1, end_col=6, confidence=0.5)
    report = CheckReport(schema="crane.check/3", mode="static", predicted_crashes=1, errors=0, elapsed_s=0.1,
                         notebooks=[NotebookReport(notebook=str(nb), predicted_crashes=1, cells=[
                             CellResult(cell=2, prediction="crash", findings=[finding], error="probe failed: x")])])
    doc = json.loads(encode(sarif_log(report, {str(nb): nb.read_text()}, root=tmp_path)))
    assert not list(validator().iter_errors(doc))
    [rule] = doc["runs"][0]["tool"]["driver"]["rules"]
    assert rule["id"] == "future-rule" and "future-rule" in rule["shortDescription"]["text"]
    assert rule["defaultConfiguration"]["level"] == "warning"
    [result] = doc["runs"][0]["results"]
    assert region_text(tmp_path, result) == "a.nope"
    [note] = doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["level"] == "warning" and "cell 2: probe failed" in note["message"]["text"]
    result["level"] = "fatal"
    del doc["runs"][0]["tool"]["driver"]["name"]
    assert len(list(validator().iter_errors(doc))) == 2
