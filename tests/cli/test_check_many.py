"""`crane check PATH...`: several notebooks and folders in one report, the exit-code policy, usage errors."""

from __future__ import annotations

import json
import os
import sys

import msgspec
import pytest

from crane.commands.output import CheckReport

from .conftest import crane, make_notebook

CRASH = [("x = 1", 1), ("print(x + y)", None)]
CLEAN = [("x = 1", 1), ("print(x + 1)", None)]


def _tree(root):
    """nbs/b.ipynb (clean), nbs/a.ipynb (crash), nbs/sub/c.ipynb (crash), and notebooks that must be skipped."""
    nbs = root / "nbs"
    (nbs / "sub").mkdir(parents=True)
    make_notebook(nbs / "b.ipynb", CLEAN)
    make_notebook(nbs / "a.ipynb", CRASH)
    make_notebook(nbs / "sub" / "c.ipynb", CRASH)
    for hidden in (nbs / ".ipynb_checkpoints", nbs / "sub" / ".ipynb_checkpoints", nbs / ".hidden"):
        hidden.mkdir()
        (hidden / "a-checkpoint.ipynb").write_text("{not json")  # would be an error if it were checked
    (nbs / ".autosave.ipynb").write_text("{not json")
    (nbs / "notes.txt").write_text("not a notebook")
    return nbs


def _report(res) -> CheckReport:
    return msgspec.json.decode(res.stdout, type=CheckReport)


def test_folder_is_searched_sorted_skipping_hidden_and_checkpoints(nb_dir):
    nbs = _tree(nb_dir)
    res = crane("check", "nbs", "--json", "--mode", "static", cwd=nb_dir)
    assert res.returncode == 1, res.stderr
    report = _report(res)
    assert [nb.notebook for nb in report.notebooks] == ["nbs/a.ipynb", "nbs/b.ipynb", "nbs/sub/c.ipynb"]
    assert report.predicted_crashes == 2 and report.errors == 0 and report.mode == "static"
    assert [nb.predicted_crashes for nb in report.notebooks] == [1, 0, 1]
    assert report.notebooks[0].cells[0].findings[0].rule == "undefined-name"
    assert (nbs / "a.ipynb").exists()


def test_one_text_report_over_files_and_folders_with_each_notebook_once(nb_dir):
    _tree(nb_dir)
    res = crane("check", "nbs/sub/c.ipynb", "nbs", "--mode", "static", cwd=nb_dir)
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("nbs/sub/c.ipynb: cell 2, line 1: NameError")
    assert sum("nbs/sub/c.ipynb: cell 2" in ln for ln in lines) == 1  # the folder does not check it again
    assert "nbs/a.ipynb: cell 2, line 1: NameError: name 'y' is not defined  [undefined-name]" in lines
    assert "nbs/b.ipynb: cell 2: no crash predicted" in lines
    assert lines[-1] == "3 notebooks: 2 cell(s) predicted to crash in 2 notebook(s)"


def test_an_error_in_one_notebook_exits_2_and_still_reports_the_others_crashes(nb_dir):
    make_notebook(nb_dir / "crash.ipynb", CRASH)
    (nb_dir / "broken.ipynb").write_text("{not json")
    make_notebook(nb_dir / "clean.ipynb", CLEAN)
    res = crane("check", "crash.ipynb", "broken.ipynb", "missing.ipynb", "clean.ipynb", "--json", cwd=nb_dir)
    assert res.returncode == 2, res.stdout + res.stderr
    report = _report(res)  # auto mode, the default
    assert report.mode == "auto" and report.errors == 2 and report.predicted_crashes == 1
    crash, broken, missing, clean = report.notebooks
    assert broken.error is not None and missing.error is not None
    ran = crash.cells[0].sandbox
    assert crash.cells[0].findings[0].ename == "NameError" and ran is not None and ran.verdict == "crash"
    assert "not valid JSON" in broken.error and not broken.cells
    assert "cannot read missing.ipynb" in missing.error
    assert clean.cells[0].prediction == "no-crash" and clean.error is None
    assert "broken.ipynb is not valid JSON" in res.stderr and "cannot read missing.ipynb" in res.stderr
    assert "Traceback" not in res.stderr


def test_text_report_names_the_notebooks_that_could_not_be_checked(nb_dir):
    make_notebook(nb_dir / "crash.ipynb", CRASH)
    make_notebook(nb_dir / "v3.ipynb", [("x = 1", None)], nbformat=3)
    res = crane("check", "crash.ipynb", "v3.ipynb", "--mode", "static", cwd=nb_dir)
    assert res.returncode == 2
    assert "error: v3.ipynb is not an nbformat 4 notebook (nbformat=3)" in res.stdout.splitlines()
    assert res.stdout.splitlines()[-1] == "2 notebooks: 1 cell(s) predicted to crash in 1 notebook(s); 1 could not be checked"


def test_a_kernel_that_dies_in_one_notebook_does_not_stop_the_next(nb_dir):
    make_notebook(nb_dir / "dies.ipynb", [("import os; os._exit(3)", 1), ("print(1)", None)])
    make_notebook(nb_dir / "crash.ipynb", CRASH)
    res = crane("check", "dies.ipynb", "crash.ipynb", "--json", "--mode", "static", cwd=nb_dir)
    assert res.returncode == 2
    dies, crash = _report(res).notebooks
    assert dies.error is not None
    assert "kernel error" in dies.error and "died" in dies.error
    assert crash.predicted_crashes == 1


def test_unreadable_notebooks_are_per_file_errors(nb_dir):
    nbs = nb_dir / "nbs"
    nbs.mkdir()
    make_notebook(nbs / "ok.ipynb", CLEAN)
    (nbs / "dangling.ipynb").symlink_to(nbs / "gone.ipynb")
    res = crane("check", "nbs", "--json", "--mode", "static", cwd=nb_dir)
    assert res.returncode == 2
    dangling, ok = _report(res).notebooks
    assert dangling.error is not None
    assert dangling.notebook == "nbs/dangling.ipynb" and "cannot read nbs/dangling.ipynb" in dangling.error
    assert ok.cells[0].prediction == "no-crash"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_a_file_without_read_permission_is_a_per_file_error(nb_dir):
    p = make_notebook(nb_dir / "secret.ipynb", CLEAN)
    p.chmod(0)
    try:
        res = crane("check", "secret.ipynb", "--json", cwd=nb_dir)
    finally:
        p.chmod(0o644)
    assert res.returncode == 2
    error = _report(res).notebooks[0].error
    assert error is not None and "Permission denied" in error


def test_a_folder_without_notebooks_is_an_error(nb_dir):
    (nb_dir / "empty" / ".ipynb_checkpoints").mkdir(parents=True)
    (nb_dir / "empty" / ".ipynb_checkpoints" / "x-checkpoint.ipynb").write_text("{}")
    res = crane("check", "empty", cwd=nb_dir)
    assert res.returncode == 2
    assert "no notebooks (*.ipynb) under empty" in res.stderr


def test_nothing_to_check_is_not_an_error(nb_dir):
    make_notebook(nb_dir / "done.ipynb", [("x = 1", 1)])
    res = crane("check", "done.ipynb", cwd=nb_dir)
    assert res.returncode == 0
    assert "done.ipynb: nothing to check: every code cell has run" in res.stdout


def test_cell_needs_exactly_one_notebook(nb_dir):
    make_notebook(nb_dir / "a.ipynb", CRASH)
    make_notebook(nb_dir / "b.ipynb", CRASH)
    res = crane("check", "a.ipynb", "b.ipynb", "--cell", "2", cwd=nb_dir)
    assert res.returncode == 2
    assert "--cell applies to one notebook, but 2 were given or found" in res.stderr
    assert res.stdout == ""


def test_json_alias_and_format_must_agree(nb_dir):
    make_notebook(nb_dir / "a.ipynb", CRASH)
    res = crane("check", "a.ipynb", "--json", "--format", "sarif", cwd=nb_dir)
    assert res.returncode == 2 and "--json and --format sarif disagree" in res.stderr
    same = crane("check", "a.ipynb", "--json", "--format", "json", "--mode", "static", cwd=nb_dir)
    assert same.returncode == 1 and json.loads(same.stdout)["schema"] == "crane.check/3"


def test_static_mode_stays_available(nb_dir):
    make_notebook(nb_dir / "a.ipynb", CRASH)
    res = crane("check", "a.ipynb", "--mode", "static", "--json", cwd=nb_dir)
    assert res.returncode == 1
    cell = _report(res).notebooks[0].cells[0]
    assert cell.sandbox is None and cell.findings[0].source == "rules"


def test_a_relative_python_is_relative_to_the_current_folder_not_the_notebooks(nb_dir):
    (nb_dir / "nbs" / "deep").mkdir(parents=True)
    make_notebook(nb_dir / "nbs" / "deep" / "a.ipynb", CRASH)
    rel = os.path.relpath(sys.executable, nb_dir)
    assert os.sep in rel and not os.path.isabs(rel)
    res = crane("check", "nbs", "--python", rel, "--mode", "static", cwd=nb_dir)
    assert res.returncode == 1, res.stderr
    assert "nbs/deep/a.ipynb: cell 2, line 1: NameError" in res.stdout
