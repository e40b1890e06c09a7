"""`crane.policy`: the one verdict policy, as a table of cases: what the rules, the sandbox and a model said, and
what the cell's diagnostics then are. Pure functions: no kernel, no model."""

from __future__ import annotations

import pytest

from crane.finding import Finding
from crane.policy import (
    LIKELY_CONFIDENCE,
    SUSPICION_CONFIDENCE,
    ModelAnswer,
    decide,
    model_wanted,
    outcome,
)
from crane.sandbox.verdict import SandboxVerdict

KEY = Finding(rule="missing-key", ename="KeyError", message="'b'", line=2, confidence=0.95)  # a checked fact
GUESS = Finding(rule="merge-suffix", ename="KeyError", message="'b' after a merge", line=2, confidence=0.6)
TYPE = Finding(rule="astype-text", ename="TypeError", message="text to int", line=3, confidence=0.7)
MODEL_VALUE = Finding(rule="llm", ename="ValueError", message="the model says so", line=1, confidence=0.9,
                      source="llm")
MODEL_KEY = Finding(rule="llm", ename="KeyError", message="the model agrees", line=2, confidence=0.9, source="llm")

CRASH = SandboxVerdict(verdict="crash", ename="KeyError", evalue="'b'", line=2)
CRASH_OTHER = SandboxVerdict(verdict="crash", ename="ValueError", evalue="bad", line=4)
LIKELY = SandboxVerdict(verdict="crash", ename="KeyError", evalue="'b'", line=2, certain=False)  # rebuilt state
CLEAN = SandboxVerdict(verdict="no-crash")
TIMEOUT = SandboxVerdict(verdict="timeout", reason="budget")
BLOCKED = SandboxVerdict(verdict="blocked", reason="a write")
UNAVAILABLE = SandboxVerdict(verdict="unavailable", reason="no fork")

CHECKED = ModelAnswer(crash=True, finding=MODEL_VALUE, checked=True)
UNCHECKED = ModelAnswer(crash=True, finding=MODEL_VALUE)
AGREES = ModelAnswer(crash=True, finding=MODEL_KEY)
NO_CRASH = ModelAnswer(crash=False)

# id, mode, rules, sandbox, model -> prediction, decided_by, the findings' (rule, ename), cleared, suspicions
CASES = [
    ("static: nothing found", "static", [], None, None, "no-crash", "none", [], 0, 0),
    ("static: the rules' finding", "static", [GUESS], None, None, "crash", "rules", [("merge-suffix", "KeyError")], 0, 0),
    ("a sandbox crash wins, with the rules' root cause", "auto", [GUESS], CRASH, None, "crash", "sandbox",
     [("sandbox", "KeyError")], 0, 0),
    ("a sandbox crash the rules did not see", "auto", [], CRASH_OTHER, None, "crash", "sandbox",
     [("sandbox", "ValueError")], 0, 0),
    ("a clean run clears the rules", "auto", [GUESS, TYPE], CLEAN, None, "no-crash", "sandbox", [], 2, 0),
    ("a clean run clears even a checked fact", "auto", [KEY], CLEAN, None, "no-crash", "sandbox", [], 1, 0),
    ("a timeout leaves the rules", "auto", [GUESS], TIMEOUT, None, "crash", "rules", [("merge-suffix", "KeyError")], 0, 0),
    ("blocked leaves the rules", "auto", [TYPE], BLOCKED, None, "crash", "rules", [("astype-text", "TypeError")], 0, 0),
    ("unavailable, nothing found", "auto", [], UNAVAILABLE, None, "no-crash", "none", [], 0, 0),
    ("auto: a checked model claim decides an undecided cell", "auto", [], TIMEOUT, CHECKED, "crash", "llm",
     [("llm", "ValueError")], 0, 0),
    ("auto: an unchecked claim is a suspicion only", "auto", [], TIMEOUT, UNCHECKED, "no-crash", "llm", [], 0, 1),
    ("auto: a model never overrides a conclusive run", "auto", [], CLEAN, CHECKED, "no-crash", "sandbox", [], 0, 0),
    ("llm: the model's no-crash clears no rule finding", "llm", [GUESS], None, NO_CRASH, "crash", "rules",
     [("merge-suffix", "KeyError")], 0, 0),
    ("llm: a checked claim adds to the rules", "llm", [GUESS], None, CHECKED, "crash", "rules",
     [("merge-suffix", "KeyError"), ("llm", "ValueError")], 0, 0),
    ("llm: an unchecked claim beside the rules is a suspicion", "llm", [TYPE], None, UNCHECKED, "crash", "rules",
     [("astype-text", "TypeError")], 0, 1),
    ("llm: agreeing with a rule shows the rule's finding", "llm", [KEY], None, AGREES, "crash", "rules",
     [("missing-key", "KeyError")], 0, 0),
    ("llm: a model's no-crash on nothing found", "llm", [], None, NO_CRASH, "no-crash", "llm", [], 0, 0),
    ("a likely crash the rules did not predict decides nothing, shown apart", "auto", [], LIKELY, None,
     "no-crash", "none", [], 0, 1),
    ("a likely crash the rules predicted decides", "auto", [GUESS], LIKELY, None, "crash", "sandbox",
     [("sandbox", "KeyError")], 0, 0),
    ("a likely crash beside another rule finding", "auto", [TYPE], LIKELY, None, "crash", "rules",
     [("astype-text", "TypeError")], 0, 1),
    ("llm: a conclusive run still wins", "llm", [GUESS], CRASH_OTHER, CHECKED, "crash", "sandbox",
     [("sandbox", "ValueError")], 0, 0),
]


@pytest.mark.parametrize(("mode", "rules", "sandbox", "model", "prediction", "decided_by", "shown", "cleared",
                          "suspicions"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(mode, rules, sandbox, model, prediction, decided_by, shown, cleared, suspicions):
    d = decide(mode, rules, sandbox, model)
    assert (d.prediction, d.decided_by) == (prediction, decided_by)
    assert [(f.rule, f.ename) for f in d.findings] == shown
    assert len(d.cleared) == cleared and len(d.suspicions) == suspicions
    for s in d.suspicions:
        if s.source == "sandbox":  # a likely crash of a copied run
            assert s.rule == "sandbox" and s.confidence == LIKELY_CONFIDENCE
        else:
            assert s.confidence <= SUSPICION_CONFIDENCE and s.rule == "llm-suspicion"


def test_a_sandbox_crash_carries_the_real_exception_and_the_rules_root_cause():
    rule = Finding(rule="merge-suffix", ename="KeyError", message="m", line=5, root_cause="NB specific")
    (f,) = decide("auto", [rule], CRASH).findings
    assert (f.ename, f.line, f.message, f.root_cause, f.confidence, f.source) == ("KeyError", 2, "'b'",
                                                                                 "NB specific", 1.0, "sandbox")
    assert any("the rules predicted it too" in e for e in f.evidence)


@pytest.mark.parametrize(("mode", "rules", "sandbox", "wanted"), [
    ("static", [], None, False),
    ("auto", [], None, True),
    ("auto", [], TIMEOUT, True),
    ("auto", [GUESS], TIMEOUT, False),
    ("auto", [], CLEAN, False),
    ("auto", [], CRASH, False),
    ("auto", [], LIKELY, True),  # a likely crash decides nothing alone
    ("llm", [GUESS], CLEAN, True),
])
def test_a_model_is_asked_only_where_it_can_change_the_outcome(mode, rules, sandbox, wanted):
    assert model_wanted(mode, rules, sandbox) is wanted


@pytest.mark.parametrize(("rules", "sandbox", "facts_read", "told"), [
    ([], CLEAN, True, "no-crash"),  # a clean run decided
    ([], None, True, "no-crash"),  # the rules judged live facts, no run asked for
    ([], TIMEOUT, True, "unknown"),  # an endless cell: nobody knows
    ([], BLOCKED, True, "unknown"),
    ([], UNAVAILABLE, True, "unknown"),
    ([], None, False, "unknown"),  # the facts could not be read (the kernel busy)
    ([GUESS], TIMEOUT, True, "crash"),  # the rules decided
    ([], CRASH, False, "crash"),
    ([], LIKELY, True, "unknown"),  # only likely: an agent is not told "no crash"
])
def test_what_an_agent_is_told(rules, sandbox, facts_read, told):
    d = decide("auto", rules, sandbox)
    assert outcome(d, sandbox_ran=sandbox is not None, facts_read=facts_read) == told
