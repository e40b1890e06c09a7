"""`crane check`: exit codes, the JSON schema, bad notebooks, raising history cells and dying kernels."""

from __future__ import annotations

import json

import msgspec

from crane.commands.output import CheckReport

from .conftest import crane, make_notebook


def test_predicts_undefined_name_and_exits_1(nb_dir):
    nb = make_notebook(nb_dir / "a.ipynb", [("x = 1", 1), ("print(x + y)", None)])
    res = crane("check", str(nb))
    assert res.returncode == 1, res.stderr
    assert "cell 2, line 1: NameError" in res.stdout


def test_no_crash_exits_0_and_json_follows_schema(nb_dir):
    nb = make_notebook(nb_dir / "b.ipynb", [("x = 1", 1), ("# notes", "md"), ("print(x + 1)", None)])
    res = crane("check", str(nb), "--json")
    assert res.returncode == 0, res.stderr
    report = msgspec.json.decode(res.stdout, type=CheckReport)  # validates the documented schema
    assert report.schema == "crane.check/3" and report.mode == "auto" and report.errors == 0
    [nb_report] = report.notebooks
    assert nb_report.notebook == str(nb)
    assert [c.cell for c in nb_report.cells] == [3]
    assert nb_report.cells[0].prediction == "no-crash"
    assert nb_report.predicted_crashes == 0 and report.predicted_crashes == 0
    assert nb_report.history[0].cell == 1 and nb_report.history[0].status == "ok"


def test_json_crash_report_fields(nb_dir):
    nb = make_notebook(nb_dir / "c.ipynb", [("d = {'a': 1}", 1), ("d['b']", None)])
    res = crane("check", str(nb), "--json")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)["notebooks"][0]
    f = doc["cells"][0]["findings"][0]
    assert f["ename"] == "KeyError" and f["line"] == 1
    assert {"rule", "message", "line", "ename"} <= set(f)


def test_out_of_order_history_is_replayed_in_execution_order(nb_dir):
    # Cell 2 ran first, then cell 1 rebound x to a string: x.bit_length does not exist on str.
    nb = make_notebook(nb_dir / "o.ipynb", [("x = 'text'", 2), ("x = 5", 1), ("x.bit_length()", None)])
    res = crane("check", str(nb), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    assert json.loads(res.stdout)["notebooks"][0]["cells"][0]["findings"][0]["ename"] == "AttributeError"


def test_not_json(nb_dir):
    p = nb_dir / "bad.ipynb"
    p.write_text("{not json")
    res = crane("check", str(p))
    assert res.returncode == 2
    assert "not valid JSON" in res.stderr


def test_not_nbformat_4(nb_dir):
    nb = make_notebook(nb_dir / "v3.ipynb", [("x = 1", None)], nbformat=3)
    res = crane("check", str(nb))
    assert res.returncode == 2
    assert "nbformat 4" in res.stderr


def test_missing_target_cell(nb_dir):
    nb = make_notebook(nb_dir / "m.ipynb", [("x = 1", None)])
    res = crane("check", str(nb), "--cell", "7")
    assert res.returncode == 2
    assert "cell 7 does not exist" in res.stderr


def test_markdown_target_cell(nb_dir):
    nb = make_notebook(nb_dir / "md.ipynb", [("# title", "md"), ("x = 1", None)])
    res = crane("check", str(nb), "--cell", "1")
    assert res.returncode == 2
    assert "not a code cell" in res.stderr


def test_missing_file():
    res = crane("check", "/nonexistent/dir/n.ipynb")
    assert res.returncode == 2
    assert "cannot read" in res.stderr


def test_history_cell_that_raises_is_recorded_and_replay_goes_on(nb_dir):
    nb = make_notebook(nb_dir / "h.ipynb", [("1/0", 1), ("z = 3", 2), ("print(z)", None)])
    res = crane("check", str(nb), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)["notebooks"][0]
    assert doc["history"][0]["status"] == "error" and doc["history"][0]["ename"] == "ZeroDivisionError"
    assert doc["history"][1]["status"] == "ok"
    assert doc["cells"][0]["prediction"] == "no-crash"


def test_kernel_that_dies_is_a_clear_error(nb_dir):
    nb = make_notebook(nb_dir / "k.ipynb", [("import os; os._exit(3)", 1), ("print(1)", None)])
    res = crane("check", str(nb))
    assert res.returncode == 2
    assert "kernel" in res.stderr.lower() and "died" in res.stderr.lower()
    assert "Traceback" not in res.stderr


def test_never_writes_the_notebook(nb_dir):
    nb = make_notebook(nb_dir / "w.ipynb", [("x = 1", 1), ("x + q", None)])
    before = nb.read_bytes()
    crane("check", str(nb), "--json")
    assert nb.read_bytes() == before


def test_usage_error_exit_2():
    res = crane("check")
    assert res.returncode == 2
