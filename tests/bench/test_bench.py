"""`crane bench`: the case format, the scores, and the accuracy floor on junobench-lite."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from crane.bench.metrics import VariantResult, score

REPO = Path(__file__).resolve().parents[2]
JUNOBENCH = REPO.parent / "shared" / "bench" / "junobench-lite"

FLOORS = REPO / "benchmarks" / "junobench_floors.py"  # the floors and their checks, on the whole set


def _vr(expect: bool, predicted: bool, ename=None, pename=None) -> VariantResult:
    return VariantResult(case="c", variant="v", library="l", root_cause="r", expect_crash=expect,
                         predicted_crash=predicted, seconds=1.0, expect_ename=ename, predicted_ename=pename)


def test_scores():
    s = score([_vr(True, True, "KeyError", "KeyError"), _vr(True, True, "ValueError", "TypeError"),
               _vr(True, False, "NameError"), _vr(False, False), _vr(False, True)])
    assert (s.tp, s.fp, s.tn, s.fn) == (2, 1, 1, 1)
    assert s.accuracy == 0.6 and s.precision == round(2 / 3, 4) and s.recall == round(2 / 3, 4)
    assert s.false_alarm_rate == 0.5
    assert s.ename_match == 0.5 and s.ename_match_all == round(1 / 3, 4)


def _write_case(root: Path, cid: str, buggy_target: str, fixed_target: str, ename: str) -> None:
    d = root / cid
    d.mkdir()

    def nb(target: str) -> dict:
        cells = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], "source": "a = [1, 2]\nd = {'k': 1}"},
                 {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": target}]
        return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

    (d / "buggy.ipynb").write_text(json.dumps(nb(buggy_target)))
    (d / "fixed.ipynb").write_text(json.dumps(nb(fixed_target)))
    (d / "case.json").write_text(json.dumps({
        "id": cid, "library": "python", "root_cause": "NB specific", "crash_type": "x",
        "variants": {
            "buggy": {"notebook": "buggy.ipynb", "target_cell": 2, "expect": {"crash": True, "ename": ename}},
            "fixed": {"notebook": "fixed.ipynb", "target_cell": 2, "expect": {"crash": False}},
        },
    }))


def _bench(*args: str, timeout: float = 1500) -> dict:
    res = subprocess.run([sys.executable, "-m", "crane", "bench", *args, "--json", "--quiet"],
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_bench_runs_any_directory_in_the_format(tmp_path):
    _write_case(tmp_path, "names_1", "print(b)", "print(a)", "NameError")
    _write_case(tmp_path, "keys_1", "d['z']", "d['k']", "KeyError")
    rep = _bench(str(tmp_path), "--jobs", "2")
    assert rep["schema"] == "crane.bench/2" and rep["mode"] == "static"
    assert rep["overall"]["n"] == 4
    assert rep["overall"]["accuracy"] == 1.0
    assert set(rep["byLibrary"]) == {"python"}
    assert rep["timing"]["medianS"] > 0


def test_bench_rejects_a_directory_without_cases(tmp_path):
    res = subprocess.run([sys.executable, "-m", "crane", "bench", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2 and "no bench case" in res.stderr


def _sample(root: Path) -> list[str]:
    """A fixed sample of junobench-lite: the first case of each library (sorted names), so every library's
    notebooks, both sandbox modes and a static miss (numpy_15) are in it; links, the set is read-only."""
    first: dict[str, str] = {}
    for case in sorted(p.name for p in JUNOBENCH.iterdir() if (p / "case.json").is_file()):
        first.setdefault(case.rsplit("_", 1)[0], case)
    for case in first.values():
        (root / case).symlink_to(JUNOBENCH / case, target_is_directory=True)
    return sorted(first.values())


@pytest.mark.slow
@pytest.mark.skipif(not JUNOBENCH.is_dir(), reason="../shared/bench/junobench-lite is not beside the checkout")
def test_auto_mode_on_a_junobench_lite_sample_meets_the_floors_and_leaves_every_kernel_untouched(tmp_path):
    """The floors' own command (benchmarks/junobench_floors.py, which runs them on all 70 variants) on a sample
    of one case per library: one auto run scores the rules' predictions against the static floors and the final
    verdicts against the auto floors (every sandbox verdict the labelled outcome, with the labelled exception);
    the replayed kernel of every variant comes out of its sandbox run unchanged."""
    cases = _sample(tmp_path)
    assert len(cases) >= 7, cases
    res = subprocess.run([sys.executable, str(FLOORS), str(tmp_path), "--jobs", "2"], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"variants {2 * len(cases)}:" in res.stdout and "floors met" in res.stdout, res.stdout
    assert f"kernel unchanged {2 * len(cases)}/{2 * len(cases)}" in res.stdout, res.stdout


def test_the_floors_command_names_every_miss():
    """The floors' checks miss nothing on a report that fails them (and pass one that meets them)."""
    spec = importlib.util.spec_from_file_location("junobench_floors", FLOORS)
    assert spec is not None and spec.loader is not None
    floors = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floors)

    def result(case: str, crash: bool, verdict: str, ename=None, unchanged=True) -> dict:
        return {"case": case, "variant": "buggy" if crash else "fixed", "expectCrash": crash, "verdict": verdict,
                "expectEname": ename, "predictedEname": ename if verdict == "crash" else None, "decidedBy": "sandbox",
                "kernelUnchanged": unchanged}

    good = {"overall": {"n": 2, "accuracy": 1.0, "enameMatch": 1.0, "fp": 0},
            "rulesOverall": {"n": 2, "accuracy": 1.0, "f1": 1.0, "falseAlarmRate": 0.0},
            "verdicts": {"crash": 1, "no-crash": 1}, "sandboxDecided": 1.0, "decidedBy": {"sandbox": 2},
            "sandboxModes": {"layered": 2}, "kernelUnchanged": 2,
            "results": [result("a", True, "crash", "KeyError"), result("a", False, "no-crash")]}
    assert floors.misses(good) == []
    bad = {**good, "overall": {"n": 2, "accuracy": 0.5, "enameMatch": 1.0, "fp": 1},
           "rulesOverall": {"n": 2, "accuracy": 0.5, "f1": 0.0, "falseAlarmRate": 0.5}, "kernelUnchanged": 1,
           "sandboxDecided": 0.5,
           "results": [result("a", True, "crash", "KeyError"), result("a", False, "crash", unchanged=False)]}
    missed = "\n".join(floors.misses(bad))
    for words in ("static accuracy 0.5", "static f1 0.0", "static false alarms", "auto accuracy 0.5",
                  "auto false alarms: 1", "the sandbox decided 0.5", "('a', 'fixed', 'crash', None)", "kernel changed by the sandbox run: [('a', 'fixed')]"):
        assert words in missed, missed
