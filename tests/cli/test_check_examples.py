"""`crane check` in its default (auto) mode with real kernels on the bundled example and on bench cases: the
sandbox confirms the rules' crashes with the real exception and clears the cells that run clean."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from crane.commands.output import CheckReport

from .conftest import crane

REPO = Path(__file__).resolve().parents[2]
JUNOBENCH = REPO.parent / "shared" / "bench" / "junobench-lite"


def test_auto_mode_on_the_bundled_titanic_example():
    res = crane("check", "examples/titanic/titanic.ipynb", "--format", "json", cwd=REPO)
    assert res.returncode == 1, res.stderr
    report = msgspec.json.decode(res.stdout, type=CheckReport)
    assert report.mode == "auto" and report.errors == 0
    [nb] = report.notebooks
    verdicts = {c.cell: (c.prediction, c.sandbox and c.sandbox.verdict, c.findings[0].ename if c.findings else None) for c in nb.cells}
    assert verdicts == {
        7: ("crash", "crash", "ValueError"),  # LogisticRegression.fit on a text column
        8: ("crash", "crash", "NameError"),  # clf is never defined
        9: ("crash", "crash", "KeyError"),  # the column was dropped
        10: ("no-crash", "no-crash", None),
        11: ("no-crash", "no-crash", None),
    }
    by_cell = {c.cell: c for c in nb.cells}
    assert any("rules predicted it too (missing-key)" in e for e in by_cell[9].findings[0].evidence)
    assert all(h.status == "ok" for h in nb.history)


@pytest.mark.skipif(not JUNOBENCH.is_dir(), reason="../shared/bench/junobench-lite is not beside the checkout")
def test_auto_mode_on_bench_case_folders_in_one_report():
    cases = ["pandas_3", "sklearn_9"]
    res = crane("check", *cases, "--format", "json", cwd=JUNOBENCH, timeout=600)
    assert res.returncode == 1, res.stderr
    report = msgspec.json.decode(res.stdout, type=CheckReport)
    by_path = {nb.notebook: nb for nb in report.notebooks}
    assert sorted(by_path) == [f"{c}/{v}.ipynb" for c in cases for v in ("buggy", "fixed")]
    for case in cases:
        spec = json.loads((JUNOBENCH / case / "case.json").read_text())
        for variant in spec["variants"].values():
            nb = by_path[f"{case}/{variant['notebook']}"]
            [target] = [c for c in nb.cells if c.cell == variant["target_cell"]]
            expect = variant["expect"]
            assert target.prediction == ("crash" if expect["crash"] else "no-crash"), (case, variant)
            assert target.sandbox is not None and target.sandbox.verdict == target.prediction
            if expect["crash"]:
                assert target.findings[0].ename == expect["ename"]
