"""Issue 22 end to end: `crane check --mode llm` and `crane diagnose` with a real replay kernel, answered by what
a real small model said (../shared/llm-replies/), and `crane bench`'s reporting of errored and dry-run variants."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crane.bench.metrics import VariantResult
from crane.cli import main
from crane.commands import bench as bench_cmd

from .fake_llm_server import Reply
from .test_real_replies import replay

QWEN = "openai/qwen2.5-coder-0.5b"
# NBspecific_13-like: the target uses X and y, which no executed cell defined (cell 2 never ran)
CELLS = [("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': [0, 1, 0]})", 1),
         ("X = df[['a']]\ny = df['b']", None),
         ("from sklearn.tree import DecisionTreeClassifier\nmodel = DecisionTreeClassifier()\nmodel.fit(X, y)", None)]


@pytest.fixture(autouse=True)
def fresh_session():
    """Each CLI run here is a process of its own for its totals (crane.llm.cost.SESSION is process-wide)."""
    from crane.llm.cost import SESSION

    SESSION.reset()
    yield
    SESSION.reset()


def write_notebook(path):
    cells: list[dict[str, Any]] = [
        {"cell_type": "code", "source": src, "execution_count": n, "metadata": {}, "outputs": []} for src, n in CELLS]
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5,
                                "metadata": {"language_info": {"name": "python"}}, "cells": cells}))
    return str(path)


def test_defect1_check_mode_llm_exits_1_on_a_verified_name_error_the_model_called_no_crash(tmp_path, llm_server,
                                                                                             capsys):
    nb = write_notebook(tmp_path / "nb.ipynb")
    llm_server.reset(replay(45))  # Qwen: "no crash (0.95)", explanation "1-3 sentences grounded in the facts,"
    code = main(["check", nb, "--cell", "3", "--mode", "llm", "--model", QWEN, "--api-base", llm_server.api_base,
                 "--no-cache"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "NameError" in out and len(llm_server.requests) == 2  # issue 32: a placeholder explanation is re-asked
    assert "LLM: 2 request(s)" in out and "unpriced" in out and "$0.00000" not in out


def test_defect1_diagnose_exits_1_and_says_the_model_did_not_clear_it(tmp_path, llm_server, capsys):
    nb = write_notebook(tmp_path / "nb.ipynb")
    llm_server.reset(replay(45), replay(45))  # the same placeholder reply twice: no answer (issue 32)
    code = main(["diagnose", nb, "--cell", "3", "--model", QWEN, "--api-base", llm_server.api_base, "--no-cache"])
    out = capsys.readouterr().out
    assert code == 1, out
    first = out.splitlines()[0]
    assert "cell 3: will crash: NameError at line 3 (undefined-name" in first and "(offline rules)" in first
    assert "rules: line 3: NameError" in out
    assert "note: the model failed" in out and "did not return a valid verdict" in out


def test_defect9_diagnose_json_prints_the_rules_diagnosis_on_a_model_error(tmp_path, llm_server, capsys):
    nb = write_notebook(tmp_path / "nb.ipynb")
    llm_server.reset(Reply.error(401, "bad key"))
    code = main(["diagnose", nb, "--cell", "3", "--json", "--model", QWEN, "--api-base", llm_server.api_base,
                 "--no-cache"])
    captured = capsys.readouterr()
    assert code == 1 and "crane: LLM error:" in captured.err  # issue 32: the rules' diagnosis is the result
    d = json.loads(captured.out)["diagnosis"]
    assert d["mode"] == "offline" and d["prediction"] == "crash" and "refused the credentials" in d["llmError"]
    assert [f["rule"] for f in d["findings"]] == ["undefined-name"]


def variant(i: int, *, error: str | None = None, expect_crash: bool = True, predicted_crash: bool = False,
            **kw) -> VariantResult:
    return VariantResult(case=f"case{i}", variant="buggy" if expect_crash else "fixed", library="pandas",
                         root_cause="NB specific", expect_crash=expect_crash, predicted_crash=predicted_crash,
                         seconds=1.0, error=error, **kw)


def test_defect3_errored_variants_are_not_scored_as_no_crash(capsys):
    results = [variant(i, error="LLM: the model server timed out", expect_crash=i % 2 == 0) for i in range(12)]
    report = bench_cmd.build_report("llm", results)
    assert report.errored == 12 and report.overall.n == 0 and report.overall.accuracy == 0.0
    text = bench_cmd.render_text(report)
    assert "12 of 12 variants errored: not in the scores" in text
    mixed = [*results[:2], variant(20, predicted_crash=True, predicted_ename="KeyError", expect_ename="KeyError")]
    report = bench_cmd.build_report("llm", mixed)
    assert (report.overall.n, report.overall.tp, report.errored) == (1, 1, 2) and report.overall.accuracy == 1.0


def test_defect9_dry_run_progress_prints_no_miss_or_prediction(capsys):
    bench_cmd._progress(variant(1, verdict="dry-run", message="prompt 4000 chars (+1500 system)"))
    err = capsys.readouterr().err
    assert "MISS" not in err and "predicted" not in err and "prompt 4000 chars" in err
