"""`crane fix NB --cell N --offline`: verified quick fixes without a model, end to end (a replay kernel and
its fork sandbox), with the exit codes: 0 a verified fix written (or found, or nothing to fix), 1 none
found, 2 errors. The written notebook is replayed for real in a fresh kernel."""

from __future__ import annotations

import json
from pathlib import Path

from crane.bench.fix_offline import replay_written
from crane.cli import main
from crane.notebook.model import load_notebook


def code(source: str, count: int | None = None) -> dict:
    return {"cell_type": "code", "execution_count": count, "id": f"c{abs(hash(source)) % 10**8:08d}",
            "metadata": {}, "outputs": [], "source": source.splitlines(keepends=True)}


def write(path: Path, cells: list[dict]) -> Path:
    nb = {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb, indent=1) + "\n")
    return path


SALES = [
    {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["# Sales"]},
    code("import pandas as pd\nsales = pd.DataFrame({'Total_Gross': [1.5, 2.5], 'title': ['a', 'b']})\n", 1),
    code('best = sales[sales["Total Gross"] > 2]\nprint(len(best))\n'),
]
RUN_FIRST = [
    code("import numpy as np\n", 3),
    code("weights = np.ones(3)\n"),
    code("x = np.arange(3)\n", 5),
    code("print(float(weights @ x))\n"),
]


def offline(*args) -> int:
    return main(["fix", *map(str, args), "--offline"])


def test_out_writes_the_verified_fix_and_only_that(tmp_path, capsys):
    path = write(tmp_path / "sales.ipynb", SALES)
    before = path.read_bytes()
    out = tmp_path / "fixed.ipynb"
    assert offline(path, "--cell", 3, "--out", out) == 0
    text, err = capsys.readouterr()
    assert "*[1] Use column 'Total_Gross' (tested)" in text and f"written to {out}" in text
    assert '+best = sales[sales["Total_Gross"] > 2]' in text and "verified after" in err
    assert path.read_bytes() == before
    assert load_notebook(out).cell(3).source == 'best = sales[sales["Total_Gross"] > 2]\nprint(len(best))\n'
    assert out.read_bytes().replace(b"Total_Gross\\\"]", b"Total Gross\\\"]") == before  # nothing else differs
    status, error = replay_written(out.read_bytes(), str(out), 3)
    assert (status, error) == ("ok", None)


def test_json_report(tmp_path, capsys):
    path = write(tmp_path / "sales.ipynb", SALES)
    assert offline(path, "--cell", 3, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "crane.fix.offline/1" and report["written"] is None and report["chosen"] == 1
    r = report["report"]
    assert r["status"] == "fixed" and r["crash"]["ename"] == "KeyError" and r["sandbox"] == "fork"
    assert r["fixes"][0]["kind"] == "nearest-column" and r["fixes"][0]["title"] == "Use column 'Total_Gross'"
    assert r["firstFixS"] <= r["elapsedS"] and r["attempts"][0]["status"] == "ok"


def test_apply_run_first_gets_execution_counts_after_the_history(tmp_path, capsys):
    path = write(tmp_path / "dot.ipynb", RUN_FIRST)
    assert offline(path, "--cell", 4, "--apply") == 0
    assert "*[1] Run cell 2 first (tested)" in capsys.readouterr().out
    nb = load_notebook(path)
    assert [c.execution_count for c in nb.cells] == [3, 6, 5, None]  # after the highest count, 5
    assert [c.source for c in nb.cells] == [c["source"] and "".join(c["source"]) for c in RUN_FIRST]
    assert replay_written(path.read_bytes(), str(path), 4) == ("ok", None)  # replaying reproduces the repair


def test_pick_writes_another_verified_fix(tmp_path, capsys):
    cells = [code("import pandas as pd\ndf = pd.DataFrame({'installs': ['10,000+', '500+']})\n", 1),
             code("df['installs'] = df['installs'].astype(float)\nprint(df['installs'].sum())\n")]
    path = write(tmp_path / "apps.ipynb", cells)
    out = tmp_path / "second.ipynb"
    assert offline(path, "--cell", 2, "--pick", 2, "--out", out) == 0
    text = capsys.readouterr().out
    assert "*[2]" in text and "fix [2]" in text
    second = load_notebook(out).cell(2).source
    assert second != "".join(cells[1]["source"]) and replay_written(out.read_bytes(), str(out), 2)[0] == "ok"


def test_no_verified_fix_exits_1_and_writes_nothing(tmp_path, capsys):
    path = write(tmp_path / "div.ipynb", [code("x = 1\n", 1), code("print(x / 0)\n")])
    before = path.read_bytes()
    out = tmp_path / "out.ipynb"
    assert offline(path, "--cell", 2, "--out", out) == 1
    text, err = capsys.readouterr()
    assert "no verified fix" in text and "nothing written" in err
    assert not out.exists() and path.read_bytes() == before


def test_a_clean_cell_has_nothing_to_fix(tmp_path, capsys):
    path = write(tmp_path / "ok.ipynb", [code("x = 1\n", 1), code("print(x)\n")])
    assert offline(path, "--cell", 2, "--apply") == 0
    assert "nothing to fix" in capsys.readouterr().out


def test_errors_exit_2(tmp_path, capsys):
    path = write(tmp_path / "sales.ipynb", SALES)
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    assert offline(tmp_path / "missing.ipynb", "--cell", 1) == 2
    assert offline(bad, "--cell", 1) == 2
    assert offline(path, "--cell", 9) == 2
    assert offline(path, "--cell", 1) == 2  # a markdown cell
    assert offline(path, "--cell", 3, "--pick", 0) == 2
    assert offline(path, "--cell", 3, "--pick", 5) == 2  # one verified fix only
    assert main(["fix", str(path), "--cell", "3", "--pick", "1"]) == 2  # --pick goes with --offline
    err = capsys.readouterr().err
    assert "does not exist" in err and "not valid JSON" in err and "markdown cell" in err and "--pick" in err


def test_sandbox_portable_verifies_fixes_in_the_portable_sandbox(tmp_path, capsys):
    """`--sandbox portable`: the candidate fixes are tried in a portable session (a worker confined by the call
    guard and the audit hook, no fork of the kernel); the verified fix is the same."""
    from crane.sandbox.options import SandboxOptions, configure

    path = write(tmp_path / "sales.ipynb", SALES)
    try:
        assert main(["fix", str(path), "--cell", "3", "--offline", "--json", "--sandbox", "portable"]) == 0
    finally:
        configure(SandboxOptions())
    r = json.loads(capsys.readouterr().out)["report"]
    assert r["status"] == "fixed" and r["crash"]["ename"] == "KeyError", r
    assert r["fixes"][0]["title"] == "Use column 'Total_Gross'", r
