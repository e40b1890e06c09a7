"""`crane bench --real-run`: each target cell run for real in its replay kernel after the prediction, and the share of
predicted crashes whose exception name and message are the kernel's (issue 44: static-mode messages equal the
kernel's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from crane.bench.metrics import VariantResult, normalise_message, same_message, score


def test_a_message_is_the_kernels_alone_or_followed_by_cranes_explanation():
    assert same_message("'Amount'", "'Amount'")
    assert same_message("'Amount' — df has no column 'Amount'", "'Amount'")
    assert same_message("name 'plt' is not defined: 'plt' is defined in cell 1 (above), which has not been run",
                        "name 'plt' is not defined")
    assert same_message("'x' object has no attribute 'fitt' (did you mean 'fit'?)", "'x' object has no attribute 'fitt'")
    # the kernel's text must be whole: 3.13's keyword suggestion is part of it, not an explanation
    real = "f() got an unexpected keyword argument 'fit_intercep'. Did you mean 'fit_intercept'?"
    assert not same_message("f() got an unexpected keyword argument 'fit_intercep'", real)
    assert same_message(real, real)
    assert not same_message(real, "f() got an unexpected keyword argument 'fit_intercep'")  # nor more than it
    assert not same_message("'ndarray' object has no attribute 'join'", "'numpy.ndarray' object has no attribute 'join'")
    assert not same_message('Unable to parse string "$3 "', 'Unable to parse string "$3 " at position 2')
    # whitespace and an array's printed values
    assert normalise_message("a\n  b ") == "a b"
    assert same_message("Expected 2D array, got 1D array instead: Reshape your data",
                        "Expected 2D array, got 1D array instead:\narray=[1. 2. 3.].\nReshape your data")


def _vr(predicted: bool, pename=None, message=None, real_ename=None, real_message=None) -> VariantResult:
    return VariantResult(case="c", variant="v", library="l", root_cause="r", expect_crash=True, expect_ename="KeyError",
                         predicted_crash=predicted, seconds=1.0, predicted_ename=pename, message=message,
                         real_ename=real_ename, real_message=real_message, real_ran=True)


def test_the_score_counts_only_predicted_crashes_that_really_raised():
    s = score([
        _vr(True, "KeyError", "'a' — df has no column 'a'", "KeyError", "'a'"),  # match
        _vr(True, "KeyError", "'a'", "NameError", "'a'"),  # another exception
        _vr(True, "KeyError", "['a'] not found in axis of df", "KeyError", "\"['a'] not found in axis\""),  # wording
        _vr(True, "KeyError", "'a'"),  # the real run raised nothing: not compared
        _vr(False, real_ename="KeyError", real_message="'a'"),  # not predicted: not compared
    ])
    assert (s.messages_compared, s.message_match) == (3, round(1 / 3, 4))
    assert score([_vr(True, "KeyError", "'a'")]).message_match is None  # no real run: no figure


def _case(root: Path, cid: str, history: str, buggy: str, fixed: str, ename: str) -> None:
    d = root / cid
    d.mkdir()

    def nb(target: str) -> dict:
        cells = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], "source": history},
                 {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": target}]
        return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

    (d / "buggy.ipynb").write_text(json.dumps(nb(buggy)))
    (d / "fixed.ipynb").write_text(json.dumps(nb(fixed)))
    (d / "case.json").write_text(json.dumps({
        "id": cid, "library": "python", "root_cause": "NB specific", "crash_type": "x",
        "variants": {
            "buggy": {"notebook": "buggy.ipynb", "target_cell": 2, "expect": {"crash": True, "ename": ename}},
            "fixed": {"notebook": "fixed.ipynb", "target_cell": 2, "expect": {"crash": False}},
        },
    }))


def test_the_bench_runs_each_target_for_real_and_scores_the_messages(tmp_path):
    _case(tmp_path, "keys", "d = {'price': 1}\ncount = 3", "d['prices'] + 1", "d['price'] + 1", "KeyError")
    _case(tmp_path, "names", "count = 3", "print(cuont)\nundefined_thing", "print(count)", "NameError")
    res = subprocess.run([sys.executable, "-m", "crane", "bench", str(tmp_path), "--real-run", "--json", "--quiet"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    by = {(r["case"], r["variant"]): r for r in report["results"]}
    keys, names = by["keys", "buggy"], by["names", "buggy"]
    assert (keys["realEname"], keys["realMessage"]) == ("KeyError", "'prices'"), keys
    assert (names["realEname"], names["realMessage"]) == ("NameError", "name 'cuont' is not defined"), names
    for fixed in (by["keys", "fixed"], by["names", "fixed"]):
        assert fixed["realRan"] is True and "realEname" not in fixed, fixed
    assert report["overall"]["messagesCompared"] == 2, report["overall"]
    assert report["overall"]["messageMatch"] == 1.0, [(r.get("message"), r.get("realMessage")) for r in by.values()]
    # the text report says it
    text = subprocess.run([sys.executable, "-m", "crane", "bench", str(tmp_path / "keys"), "--real-run", "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert "message match (exception and message as the kernel raised them): 1/1" in text.stdout, text.stdout
