"""Issue 42 (h5): how a repair says what it was verified against and by (pure: no kernel). A crash that is only
"likely" and a fix whose clean run is only likely (a miniature: row subsets; a copy's run that missed a finalizer)
are named in one wording (crane.fixes.model.verification_words) by the verified fix's label, the agent's proposal
and the agent's candidate list; `SandboxVerdict.doubt` is where the words come from. The kernel-backed paths are in
tests/cli/test_fix_offline_likely.py, tests/agent/test_agent_likely_crash.py, tests/lsp/test_quick_fixes_likely.py
and tests/mcp/test_mcp_fixes_likely.py."""

from __future__ import annotations

from crane.agent.context import candidates_text
from crane.agent.proposal import CellEdit, Evidence, Proposal
from crane.fixes.model import VerifiedFix, verification_words
from crane.sandbox.verdict import KeptObject, SandboxVerdict

LIKELY = "the crash is only likely: the notebook patched the library class DataFrame beyond what the copy carries"


def test_a_runs_doubt():
    assert SandboxVerdict(verdict="crash").doubt() is None
    assert SandboxVerdict(verdict="no-crash").doubt() is None
    assert SandboxVerdict(verdict="timeout", certain=False).doubt() is None  # decided nothing: nothing to doubt
    assert SandboxVerdict(verdict="crash", certain=False, reason=LIKELY).doubt() == LIKELY
    assert "only likely" in (SandboxVerdict(verdict="crash", certain=False).doubt() or "")
    mini = SandboxVerdict(verdict="no-crash", scale="miniature", kept=[KeptObject(name="df", kind="DataFrame",
                                                                                  rows=1000, of=5_000_000)])
    assert mini.doubt() == "the clean run is only likely: a miniature run (kept 1,000 of 5,000,000 rows of df)"
    # a miniature crash the kept rows do not explain is the sandbox's certain crash (crane.policy)
    assert SandboxVerdict(verdict="crash", scale="miniature").doubt() is None


def test_the_words_and_the_labels():
    assert verification_words(True) == verification_words(None) == "verified"
    assert verification_words(False) == "verified against a likely crash"
    assert verification_words(True, False) == "verified by a likely clean run"
    assert verification_words(False, False) == "verified against a likely crash, by a likely clean run"
    base = VerifiedFix(kind="nearest-column", title="Use column 'a'", target=2, old="df.b\n", new="df['a']\n")
    assert base.label == "Use column 'a' (tested)"
    likely = VerifiedFix(kind="nearest-column", title="Use column 'a'", target=2, old="df.b\n", new="df['a']\n",
                         crash_certain=False, crash_doubt=LIKELY, run_certain=False, run_doubt="a miniature")
    assert likely.label == "Use column 'a' (tested against a likely crash, by a likely clean run)"
    assert "1. Use column 'a' (verified against a likely crash, by a likely clean run)" in candidates_text([likely])


def test_a_proposal_says_it():
    edit = [CellEdit(cell=2, old="df.b\n", new="df['a']\n")]
    plain = Proposal(run_id="r", notebook=None, target=2, status="fixed", fixed=True, stop_reason="finished",
                     edits=edit, crash_certain=True)
    assert plain.summary() == "fixed: 1 cell edit(s), 0 new cell(s)"
    likely = Proposal(run_id="r", notebook=None, target=2, status="fixed", fixed=True, stop_reason="finished",
                      edits=edit, crash_certain=False, crash_doubt=LIKELY,
                      evidence=Evidence(sandbox="fork", ran=[], target=2, status="ok", certain=False, doubt="mini"))
    assert likely.summary() == "fixed (verified against a likely crash, by a likely clean run): 1 cell edit(s), 0 new cell(s)"


def test_the_offline_fix_bench_counts_likely_crashes():
    from crane.bench.fix_offline import FixBenchReport, FixCase, render_text, summarize

    results = [FixCase(case="a", variant="v", target=2, crash_certain=False, crash_doubt=LIKELY),
               FixCase(case="b", variant="v", target=2, crash_certain=True), FixCase(case="c", variant="v", target=2)]
    s = summarize(results)
    assert s.likely_crashes == 1
    assert render_text(FixBenchReport(schema="crane.bench.fix.offline/1", summary=s, results=results)).endswith(
        "crashes only likely in the search's sandbox (their fixes verified against a likely crash): 1")


def test_the_hover_says_a_likely_crash_is_likely():
    from crane.sandbox.verdict import verdict_markdown

    text = verdict_markdown(SandboxVerdict(verdict="crash", ename="AttributeError", line=1, certain=False, reason=LIKELY))
    assert text.startswith(f"**Speculative run**: this cell crashes with `AttributeError` on line 1 ({LIKELY}).")
    assert "only likely" not in verdict_markdown(SandboxVerdict(verdict="crash", ename="KeyError", line=1))
