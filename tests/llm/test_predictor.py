"""Verdicts to Findings, offline/LLM diagnosis, dry-run statistics and the bench predictor on a real case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crane.bench.cases import find_cases
from crane.bench.llm_predictor import LLMBenchPredictor
from crane.bench.runner import run_cases
from crane.finding import Finding
from crane.llm.cost import CostLedger
from crane.llm.model_finding import verdict_to_finding
from crane.llm.predictor import diagnose, dry_run_stats
from crane.llm.prompt import build_prompt
from crane.llm.schema import LLMAnswer, LLMVerdict, Usage
from crane.llm.settings import LLMSettings
from crane.notebook.model import Cell
from crane.probe.facts import KeyCheck, ProbeResult

from .fake_llm_server import Reply

TARGET = Cell(number=3, cell_type="code", source="x = 1\n    y = df['Age']\n", execution_count=None)
BENCH_CASE = Path("/work/shared/bench/junobench-lite/sklearn_9")


def verdict(**kw) -> LLMVerdict:
    fields: dict[str, Any] = {
        "explanation": "df has no column 'Age'.", "crash": True, "confidence": 0.8, "exception": "KeyError",
        "line": 2, "root_cause": "data confusion", "suggested_fix": "df['age']"}
    fields.update(kw)
    return LLMVerdict(answer=LLMAnswer(**fields), usage=Usage(prompt_tokens=5, model="openai/m"))


def test_verdict_to_finding():
    f = verdict_to_finding(verdict(), TARGET)
    assert f is not None
    assert f.source == "llm" and f.rule == "llm" and f.ename == "KeyError"
    assert f.message == "df has no column 'Age'."
    assert (f.line, f.col, f.end_line, f.end_col) == (2, 4, 2, 17)
    assert f.root_cause == "data confusion" and f.confidence == 0.8
    assert f.evidence == ["openai/m: df has no column 'Age'.", "suggested fix: df['age']"]
    assert verdict_to_finding(verdict(crash=False), TARGET) is None
    assert verdict_to_finding(verdict(), TARGET, min_confidence=0.9) is None
    out_of_range = verdict_to_finding(verdict(line=40, exception=None), TARGET)
    assert out_of_range is not None and out_of_range.line == 1 and out_of_range.ename == "Exception"


def test_offline_diagnosis_needs_no_model():
    rule = Finding(rule="missing-key", ename="KeyError", message="KeyError: 'Age'", line=2, confidence=0.9)
    d = diagnose([], TARGET, None, [rule], LLMSettings())
    assert d.mode == "offline" and d.prediction == "crash" and d.verdict == rule and d.usage is None
    assert "No model configured" in d.markdown and "**KeyError**: 'Age'" in d.markdown
    assert diagnose([], TARGET, None, [], LLMSettings()).prediction == "no-crash"


def test_llm_diagnosis_markdown_and_session_total(llm_server):
    s = LLMSettings(model="openai/gpt-4o-mini", api_base=llm_server.api_base, cache=False)
    ledger = CostLedger()
    # no runtime fact checks the claim: it is the model's suspicion, predicting nothing (issue 32)
    d = diagnose([], TARGET, None, [], s, ledger=ledger)
    assert d.mode == "llm" and d.prediction == "no-crash" and d.verdict is None
    assert d.suspicions[0].rule == "llm-suspicion" and d.suspicions[0].confidence == 0.3
    assert d.markdown.startswith("**CRANE: cell 3 no crash predicted**") and "suspicion, unchecked" in d.markdown
    # the probe verified the key is missing: the claim is checked and counts
    probe = ProbeResult(keys=[KeyCheck(expr="df", key="Age", axis="columns", present=False)])
    d2 = diagnose([], TARGET, probe, [], s, ledger=ledger)
    assert d2.prediction == "crash" and d2.verdict is not None and d2.verdict.source == "llm" and d2.checked
    assert d2.markdown.startswith("**CRANE: cell 3 will crash** — `KeyError` at line 2 (the model, checked")
    assert "**Suggested fix** (openai/gpt-4o-mini): use df['age']" in d2.markdown and "$0.00021" in d2.markdown
    assert d2.session is not None and d2.session.requests == 2 and d2.session.cost_usd == pytest.approx(0.00042)


def test_dry_run_stats_counts_tokens_offline():
    prompts = [build_prompt([], Cell(number=1, cell_type="code", source="x" * n), None, []) for n in (10, 100, 1000)]
    st = dry_run_stats(prompts, reference_chars=1000)
    assert st["prompts"] == 3 and st["user_chars"]["median"] == prompts[1].user_chars
    assert 0 < st["tokens"]["min"] < st["tokens"]["max"]
    assert st["ratio_user_median"] == round(prompts[1].user_chars / 1000, 3)
    assert st["system_prompt_chars"] == prompts[0].chars - prompts[0].user_chars


@pytest.mark.skipif(not BENCH_CASE.is_dir(), reason="bench set not present")
def test_bench_predictor_on_a_real_case(llm_server):
    llm_server.reset(Reply.answer(explanation="penalty='elasticnet' needs solver='saga': fit raises ValueError.",
                                  exception="ValueError", line=2, root_cause="API misuse"),
                     Reply.answer(crash=False, exception=None, line=None, root_cause=None,
                                  explanation="solver='saga' supports elasticnet: fit runs without error."))
    s = LLMSettings(model="openai/crane-local-test-model", api_base=llm_server.api_base, cache=False)
    predictor = LLMBenchPredictor(s, ledger=CostLedger())
    results = {r.variant: r for r in run_cases(find_cases([str(BENCH_CASE)]), predictor)}
    assert not any(r.error for r in results.values())
    assert results["buggy"].predicted_crash and results["buggy"].predicted_ename == "ValueError"
    # the model agrees with what sklearn-params verified from the kernel's facts: the verified finding is shown
    assert results["buggy"].rule == "sklearn-params" and not results["fixed"].predicted_crash
    assert len(llm_server.requests) == 2 and len(predictor.prompts) == 2
    buggy_prompt = llm_server.requests[0]["body"]["messages"][1]["content"]
    assert "X_train: DataFrame" in buggy_prompt and "penalty='elasticnet'" in buggy_prompt
    (case,) = find_cases([str(BENCH_CASE)])
    case.variants = {"buggy": case.variants["buggy"]}
    dry = LLMBenchPredictor(s, dry_run=True)
    (r,) = run_cases([case], dry)
    assert r.verdict == "dry-run" and not r.predicted_crash and not r.error
    assert dry.prompts[0].messages == predictor.prompts[predictor.labels.index("sklearn_9/buggy")].messages
    assert len(llm_server.requests) == 2  # the dry run called nothing
