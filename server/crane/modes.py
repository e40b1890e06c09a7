"""Prediction modes of `crane check` and `crane bench`: which sources are asked, then `crane.policy.decide`.

- static: the offline rules over static and runtime facts (instant, a guess).
- auto:   the rules, then a speculative run of the cell in a confined fork of the kernel; when the sandbox
          cannot decide (timeout, blocked side effects, unavailable) and no rule spoke, a configured model is
          asked.
- llm:    the model, given the history, the runtime facts and the rules' findings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crane.engine import CellResult, ReplayedNotebook
from crane.policy import MODES, Mode, ModelAnswer, decide, model_wanted

if TYPE_CHECKING:
    from crane.llm.prompt import Prompt
    from crane.llm.settings import LLMSettings
    from crane.probe.facts import ProbeResult
    from crane.sandbox.verdict import SandboxVerdict

__all__ = ["MODES", "DEFAULT_BUDGET_S", "predict_in_mode"]

DEFAULT_BUDGET_S = 30.0


def replayed_prompt(replayed: ReplayedNotebook, target: int, include_findings: bool = True,
                    predicted: tuple | None = None) -> Prompt:
    """The prompt for `target` from a crane.engine.ReplayedNotebook (its history, probe and rule findings);
    `predicted`: `replayed.predict(target)` when the caller has it already."""
    cell_result, probe = predicted if predicted is not None else replayed.predict(target)
    errors = {h.number: f"{h.ename}: {h.evalue}" for h in replayed.history_runs if h.status == "error"}
    findings = cell_result.findings if include_findings else []
    from crane.llm.prompt import build_prompt

    return build_prompt(replayed.history, replayed.nb.cell(target), probe, findings, history_errors=errors)


def ask_model(replayed: ReplayedNotebook, target: int, result: CellResult, settings: LLMSettings,
              probe: ProbeResult | None = None) -> ModelAnswer | None:
    """The model's verdict on the cell (its usage recorded on `result`, whose findings are the rules' and go
    into the prompt with `probe`, the facts they used), its crash claim checked against those runtime facts
    (crane.llm.claims); None when it did not answer."""
    from crane.llm.claims import model_answer
    from crane.llm.client import LLMError
    from crane.llm.predictor import predict_with_llm

    try:
        verdict = predict_with_llm(replayed_prompt(replayed, target, predicted=(result, probe)), settings)
    except LLMError as exc:
        result.error = f"LLM: {exc}"
        return None
    result.usage = verdict.usage
    result.llm = "crash" if verdict.answer.crash else "no-crash"
    return model_answer(verdict, replayed.nb.cell(target), probe)


def predict_in_mode(
    replayed: ReplayedNotebook,
    target: int,
    mode: Mode,
    settings: LLMSettings | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
) -> CellResult:
    """Check one target cell of a replayed notebook in `mode`; the result says what decided it."""
    result, probe = replayed.predict(target)
    return decide_in_mode(replayed, target, result, mode, settings, budget_s, probe)


def decide_in_mode(
    replayed: ReplayedNotebook,
    target: int,
    result: CellResult,
    mode: Mode,
    settings: LLMSettings | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    probe: ProbeResult | None = None,
) -> CellResult:
    """`result` (the rules' check of the target cell, made on the facts `probe`) decided in `mode`: the sandbox
    and the model added. The check is passed forward: the model's prompt reuses it (no second probe request)."""
    if mode == "static":
        return result
    rules = result.findings
    sandbox: SandboxVerdict | None = None
    if mode == "auto":
        from crane.sandbox.scale import speculate_scaled

        assert replayed.kernel is not None
        cell = replayed.nb.cell(target)
        sandbox = speculate_scaled(replayed.kernel.connection, cell.source, budget_s, recorded_s=cell.recorded_s,
                                   places=[str(replayed.nb.directory)])
        result.sandbox = sandbox
    model = None
    if settings is not None and settings.enabled and model_wanted(mode, rules, sandbox):
        model = ask_model(replayed, target, result, settings, probe)
    decision = decide(mode, rules, sandbox, model)
    result.findings, result.cleared = decision.findings, decision.cleared
    result.suspicions = decision.suspicions
    result.prediction, result.decided_by = decision.prediction, decision.decided_by
    return result
