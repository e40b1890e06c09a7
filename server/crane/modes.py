"""Prediction modes shared by `crane check` and `crane bench`.

- static: the offline rules over static and runtime facts (instant, a guess).
- auto:   the rules, then a speculative run of the cell in a confined fork of the kernel confirms a crash
          (the real exception and line) or clears it; when the sandbox cannot decide (timeout, blocked side
          effects, unavailable) the rules' answer stands, and, if a model is configured, the LLM is asked.
- llm:    the model, given the history, the runtime facts and the rules' findings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crane.engine import CellResult, ReplayedNotebook
from crane.rules.finding import Finding

if TYPE_CHECKING:
    from crane.llm.settings import LLMSettings
    from crane.sandbox.verdict import SandboxVerdict

MODES = ("static", "auto", "llm")
DEFAULT_BUDGET_S = 30.0


def sandbox_finding(v: SandboxVerdict, static: list[Finding]) -> Finding:
    """A certain crash seen in the sandbox, with the rules' root cause when they agree on the exception."""
    agree = next((f for f in static if f.ename == v.ename), None)
    evalue = (v.evalue or "").strip().splitlines()
    evidence = ["ran in a confined copy-on-write fork of the kernel: the crash is certain"]
    evidence += _key_frames(v.traceback)
    if agree:
        evidence += [f"the rules predicted it too ({agree.rule}): {agree.message}"]
    return Finding(
        rule="sandbox", ename=v.ename or "Exception", message=evalue[0][:300] if evalue else "",
        line=v.line or (agree.line if agree else 1), root_cause=agree.root_cause if agree else None,
        confidence=1.0, evidence=evidence, related=agree.related if agree else [], source="sandbox",
    )


def _key_frames(traceback: list[str]) -> list[str]:
    """The cell's own frame and the innermost library frame (the last line repeats the message)."""
    frames = [t for t in traceback[:-1] if t.strip()]
    cell = [t for t in frames if t.startswith("cell")]
    library = [t for t in frames if not t.startswith("cell")]
    return [f"at {t}" for t in cell[-1:] + library[-1:]]


def apply_sandbox(result: CellResult, v: SandboxVerdict) -> CellResult:
    """Confirm or clear the rules' findings with a sandbox verdict (inconclusive verdicts change nothing)."""
    result.sandbox = v.verdict
    result.sandbox_reason = v.reason
    if v.verdict == "crash":
        result.findings = [sandbox_finding(v, result.findings)]
        result.prediction = "crash"
    elif v.verdict == "no-crash":
        result.cleared = result.findings
        result.findings = []
        result.prediction = "no-crash"
    return result


def apply_llm(replayed: ReplayedNotebook, target: int, result: CellResult, settings: LLMSettings) -> CellResult:
    """Ask the model about the cell; its crash verdict becomes the cell's finding (source "llm")."""
    from crane.llm.bench_mode import replayed_prompt
    from crane.llm.client import LLMError
    from crane.llm.predictor import predict_with_llm, verdict_to_finding

    try:
        prompt = replayed_prompt(replayed, target)
        verdict = predict_with_llm(prompt, settings)
    except LLMError as exc:
        result.error = f"LLM: {exc}"
        return result
    result.usage = verdict.usage
    finding = verdict_to_finding(verdict, replayed.nb.cell(target))
    result.llm = "crash" if verdict.answer.crash else "no-crash"
    result.findings = [finding] if finding else []
    result.prediction = "crash" if finding else "no-crash"
    return result


def predict_in_mode(
    replayed: ReplayedNotebook, target: int, mode: str, settings: LLMSettings | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
) -> CellResult:
    result, _ = replayed.predict(target)
    if mode == "static":
        return result
    if mode == "llm":
        return apply_llm(replayed, target, result, settings) if settings is not None else result
    from crane.sandbox import speculate

    apply_sandbox(result, speculate(replayed.kernel.connection, replayed.nb.cell(target).source, budget_s))
    undecided = result.sandbox not in ("crash", "no-crash") and not result.findings
    if undecided and settings is not None and settings.enabled:
        apply_llm(replayed, target, result, settings)
    return result
