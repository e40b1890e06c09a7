"""Issue 32: a model only adds. Every recorded verdict of a real small model (../shared/llm-replies/replies.jsonl)
and the exchanges written for the issue's defects (replies/issue32-constructed.jsonl) go through litellm over
HTTP to the fake server, through CRANE's claim checks (crane.llm.claims) and the policy (crane.policy): on every
cell, mode "llm" is right wherever the rules are right, and never alarms where the rules do not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crane.finding import Finding
from crane.llm.claims import contradiction, facts_check, is_placeholder, model_answer, real_exception_class
from crane.llm.client import LLMBadAnswer, LLMError
from crane.llm.cost import CostLedger
from crane.llm.predictor import diagnose, predict_with_llm
from crane.llm.prompt import SYSTEM_PROMPT, Prompt
from crane.llm.schema import LLMAnswer, LLMVerdict, Usage
from crane.llm.settings import LLMSettings
from crane.notebook.model import Cell
from crane.policy import decide
from crane.probe.facts import ColumnFacts, EstimatorFacts, Facts, KeyCheck, ProbeResult

from .fake_llm_server import Reply

SHARED = Path(__file__).resolve().parents[3] / "shared" / "llm-replies" / "replies.jsonl"
WRITTEN = Path(__file__).resolve().parent / "replies" / "issue32-constructed.jsonl"


def rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        pytest.skip(f"the recorded replies are not here: {path}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def content(row: dict[str, Any]) -> str:
    return row["response"]["choices"][0]["message"]["content"]


def verdict_rows() -> list[tuple[str, str]]:
    """(label, reply text) of every verdict exchange: the CRANE verdict prompt, HTTP 200."""
    out = []
    for name, path in (("shared", SHARED), ("written", WRITTEN)):
        if not path.exists():
            continue
        for i, r in enumerate(rows(path)):
            system = (r["request"].get("messages") or [{}])[0].get("content", "")
            if r["status"] == 200 and system.startswith("You are CRANE, a crash detector"):
                out.append((f"{name}#{i}", content(r)))
    return out


def local(server) -> LLMSettings:
    return LLMSettings(model="openai/qwen2.5-coder-0.5b", api_base=server.api_base, retries=0, cache=False)


def prompt() -> Prompt:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "## Target cell\n1| x"}]
    return Prompt(messages=messages, chars=100, user_chars=30, sections={})



def verdict(**fields: Any) -> LLMVerdict:
    base: dict[str, Any] = {"explanation": "df has no column 'Age', so df['Age'] raises KeyError.", "crash": True,
                            "confidence": 0.9, "exception": "KeyError", "line": 1}
    base.update(fields)
    return LLMVerdict(answer=LLMAnswer(**base), usage=Usage(model="m"))


AGE_DF = Facts(name="df", type="pandas.core.frame.DataFrame", kind="dataframe",
               columns=[ColumnFacts(name="age", dtype="float64"), ColumnFacts(name="name", dtype="object")])


# -- the floor: with any model, mode "llm" >= the rules, and no more false alarms --------------------------------

CLEAN = Cell(number=3, cell_type="code", source="mean_age = df['age'].mean()\nprint(mean_age)")
CRASH = Cell(number=3, cell_type="code", source="mean_age = df['Age'].mean()\nprint(mean_age)")


def _rule(confidence: float) -> Finding:
    return Finding(rule="missing-key", ename="KeyError", message="KeyError: 'Age'", line=1, confidence=confidence)


# (name, target, rules' findings, probe, the truth: does it crash?)
SCENARIOS = [
    ("clean cell, rules silent", CLEAN, [], ProbeResult(facts={"df": AGE_DF}), False),
    ("clean cell, no facts at all", CLEAN, [], None, False),
    ("crash, verified rule finding", CRASH, [_rule(0.95)], ProbeResult(facts={"df": AGE_DF}), True),
    ("crash, a guess of the rules", CRASH, [_rule(0.6)], None, True),
    ("clean cell, a false alarm of the rules", CLEAN, [_rule(0.6)], None, False),
    ("crash the rules miss", CRASH, [], None, True),
]


def test_every_recorded_verdict_keeps_llm_mode_at_or_above_the_rules(llm_server):
    """Each reply is sent twice (the model repeats itself on the repair request): the worst case. The request is
    the same in every scenario, so each reply goes through litellm and the server once; the claim checks then
    judge that one verdict against each scenario's cell and facts."""
    replies = verdict_rows()
    assert len(replies) >= 40
    rules_right = llm_right = rules_alarms = llm_alarms = 0
    for label, text in replies:
        llm_server.reset(Reply(content=text), Reply(content=text))
        try:
            v: LLMVerdict | None = predict_with_llm(prompt(), local(llm_server), ledger=CostLedger())
        except LLMError:
            v = None
        for name, target, findings, probe, truth in SCENARIOS:
            model = model_answer(v, target, probe) if v is not None else None
            d = decide("llm", findings, None, model)
            rules = decide("static", findings)
            llm_crash, rules_crash = d.prediction == "crash", rules.prediction == "crash"
            # cell by cell: right wherever the rules are right, an alarm only where the rules alarm
            if rules_crash == truth:
                assert llm_crash == truth, f"{label} on {name}: llm mode wrong where the rules are right"
            if llm_crash and not truth:
                assert rules_crash, f"{label} on {name}: a false alarm the rules did not raise"
            rules_right += rules_crash == truth
            llm_right += llm_crash == truth
            rules_alarms += rules_crash and not truth
            llm_alarms += llm_crash and not truth
    assert llm_right >= rules_right and llm_alarms <= rules_alarms


# -- defect 1: an incoherent crash claim is no crash ------------------------------------------------------------

@pytest.mark.parametrize("index, why", [(0, '"exception" is null'), (1, "not an exception class"),
                                        (2, "repeats the answer description")])
def test_defect1_written_incoherent_claims_are_re_asked_then_no_answer(llm_server, index, why):
    text = content(rows(WRITTEN)[index])
    llm_server.reset(Reply(content=text), Reply(content=text))
    with pytest.raises(LLMBadAnswer, match=why):
        predict_with_llm(prompt(), local(llm_server), ledger=CostLedger())
    repair = llm_server.requests[1]["body"]["messages"][-1]["content"]
    assert why in repair  # the model is told what is wrong


def test_defect1_recorded_placeholder_and_free_text_exception_are_not_claims(llm_server):
    shared = rows(SHARED)
    # SmolLM2: "exception": "Catchable error: The target cell was not found." (turned into "Exception")
    llm_server.reset(Reply(content=content(shared[9])), Reply(content=content(shared[9])))
    with pytest.raises(LLMBadAnswer, match="not an exception class"):
        predict_with_llm(prompt(), local(llm_server), ledger=CostLedger())
    # Qwen: "explanation": "1-3 sentences grounded in the facts, ", a crash with a KeyError
    llm_server.reset(Reply(content=content(shared[74])), Reply(content=content(shared[74])))
    with pytest.raises(LLMBadAnswer, match="repeats the answer description"):
        predict_with_llm(prompt(), local(llm_server), ledger=CostLedger())


def test_defect1_a_line_outside_the_cell_drops_the_claim():
    m = model_answer(verdict(line=239748), CRASH)
    assert m.finding is None and "line 239748 is outside the cell (2 lines)" in m.dropped[0]


def test_defect1_exception_classes():
    assert real_exception_class("KeyError") and real_exception_class("NotFittedError")
    assert real_exception_class("StopIteration") and real_exception_class("ParserError")
    for bad in (None, "", "NoneType", "Exception", "NaN", "float64", "Samsung"):
        assert not real_exception_class(bad)


def test_defect1_placeholders():
    assert is_placeholder("<1-3 sentences of your own, grounded in the facts>")
    assert is_placeholder("1-3 sentences grounded in the facts, ")
    assert is_placeholder(", In[1] cell 2")
    assert not is_placeholder("df has no column 'Age' (its columns are 'age' and 'name'), so it raises KeyError.")


# -- defect 2: a contradiction is re-asked once ------------------------------------------------------------------

def test_defect2_a_contradiction_is_re_asked_and_the_coherent_answer_kept(llm_server):
    written = rows(WRITTEN)
    llm_server.reset(Reply(content=content(written[3])), Reply(content=content(written[4])))
    v = predict_with_llm(prompt(), local(llm_server), ledger=CostLedger())
    assert v.repaired and v.answer.crash is True and v.answer.exception == "NotFittedError"
    assert '"crash" is false but the explanation says the cell raises' in \
        llm_server.requests[1]["body"]["messages"][-1]["content"]
    # and the probe corroborates it: `pipe` is not fitted -> a checked crash, counted in mode llm
    pipe = Facts(name="pipe", type="sklearn.pipeline.Pipeline", kind="estimator",
                 estimator=EstimatorFacts(class_name="Pipeline", module="sklearn.pipeline", is_fitted=False))
    target = Cell(number=5, cell_type="code", source="y_pred = pipe.predict(X_test)\nprint(y_pred[:5])")
    m = model_answer(v, target, ProbeResult(facts={"pipe": pipe}))
    assert m.checked and decide("llm", [], None, m).prediction == "crash"
    # the probe shows it fitted: the claim is contradicted and dropped
    fitted = Facts(name="pipe", type="sklearn.pipeline.Pipeline", kind="estimator",
                   estimator=EstimatorFacts(class_name="Pipeline", module="sklearn.pipeline", is_fitted=True))
    m = model_answer(v, target, ProbeResult(facts={"pipe": fitted}))
    assert m.finding is None and "is fitted" in m.dropped[0]


def test_defect2_a_contradiction_repeated_is_no_answer(llm_server):
    text = content(rows(WRITTEN)[3])
    llm_server.reset(Reply(content=text), Reply(content=text))
    with pytest.raises(LLMBadAnswer, match="crash"):
        predict_with_llm(prompt(), local(llm_server), ledger=CostLedger())


def test_defect2_contradiction_reading():
    ans = verdict(crash=False, exception=None, explanation="The column exists, so df['age'] does not raise.").answer
    assert contradiction(ans) is None
    ans = verdict(crash=False, exception="ValueError", explanation="fit raises ValueError: solver mismatch.").answer
    assert contradiction(ans)
    ans = verdict(explanation="The cell runs without error.", exception="KeyError").answer
    assert contradiction(ans)
    assert contradiction(verdict().answer) is None


# -- facts: a claim the probe contradicts is dropped; one it verifies is checked ----------------------------------

def test_a_claimed_missing_column_the_probe_sees_is_dropped():
    v = LLMVerdict(answer=LLMAnswer(**json.loads(content(rows(WRITTEN)[5]))), usage=Usage(model="m"))
    m = model_answer(v, CLEAN, ProbeResult(facts={"df": AGE_DF}))
    assert m.finding is None and m.dropped == ["contradicted by the runtime facts: the probe sees column 'age' in df"]
    against, support = facts_check(verdict().answer, CRASH.source,
                                   ProbeResult(keys=[KeyCheck(expr="df", key="Age", axis="columns", present=False)]))
    assert against == [] and support == ["the probe verified key 'Age' is missing from df"]


def test_auto_mode_an_unchecked_claim_is_a_suspicion_not_a_crash():
    m = model_answer(verdict(), CRASH, None)
    d = decide("auto", [], None, m)
    assert d.prediction == "no-crash" and d.findings == []
    (s,) = d.suspicions
    assert s.rule == "llm-suspicion" and s.confidence == 0.3 and "suspicion" in s.evidence[0]


# -- diagnose: the rules' part always shown, the model's part marked ---------------------------------------------

def test_diagnose_shows_the_rules_verified_crash_over_a_model_no_crash(llm_server):
    llm_server.reset(Reply.answer(crash=False, exception=None, line=None, root_cause=None, confidence=0.8,
                                  explanation="df has the column, so the cell runs fine.",
                                  suggested_fix="nothing to change"))
    d = diagnose([], CRASH, None, [_rule(0.95)], local(llm_server), ledger=CostLedger())
    assert d.prediction == "crash"
    first = d.markdown.splitlines()[0]
    assert first.startswith("**CRANE: cell 3 will crash** — `KeyError` at line 1 (missing-key, confidence 0.95)")
    assert "runs fine" not in d.markdown and "nothing to change" not in d.markdown  # the model's "no crash" part
    assert "said \"no crash\" (confidence 0.80); that does not clear the rules' findings" in d.markdown
