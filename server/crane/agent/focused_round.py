"""A round of focused asks inside an agent run (crane.agent.loop.AgentRun calls `focused_round`): each ask's reply merged
into the target cell, run in the sandbox as a step (gated in step mode), accepted only through the run's `finish`
(a fresh sandbox, the guard on the whole diff); every change that fails is undone and told to the model.
The asks themselves: crane.agent.focused."""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

from crane.agent import focused
from crane.agent.context import FixContext
from crane.agent.guard import check_edit, parse_cell
from crane.agent.proposal import AgentStep, StepUsage
from crane.agent.runner import describe_run, same_code
from crane.agent.tools import Finish
from crane.llm.client import LLMError, call_model

# `run` below is the crane.agent.loop.AgentRun the round belongs to (typed Any: loop imports this module, and an
# import back, even for type checkers only, is a cycle: tests/architecture/test_imports.py)
AgentRun = Any

log = logging.getLogger(__name__)

RESERVED_STEPS = 1  # a round leaves the model at least this many steps of its own


def _variables(run: AgentRun, ctx: FixContext) -> list[str]:
    """The variables the focused asks show (focused.variable_lines); the other variables are probed in the
    sandbox from the user's state (it is reset first when the run executed something there)."""
    from crane.probe.facts import ProbeRequest

    r = run.runner
    names: list[str] = []
    probe = None
    try:
        used = set(ctx.probe.facts) | set(ctx.probe.undefined) if ctx.probe is not None else set()
        names = focused.other_names(run.nb, run.target, used)
        if names:
            if r.executed or getattr(r.sandbox, "needs_reset", False):  # (a reset may start a new kernel)
                r.sandbox.reset_to_history()
                r.executed = []
            client = r.sandbox.probe_client()
            if client is not None:
                probe = client.run(ProbeRequest(names=names, time_budget_ms=200, max_total_bytes=64 * 1024),
                                   timeout=10.0)
    except Exception as exc:  # the asks go without them
        log.info("agent: no facts on the other variables: %s", exc)
    return focused.variable_lines(ctx.probe, probe, names)


def _tell(run: AgentRun, text: str) -> None:
    """Add `text` to the last tool result (a user message right after tool messages breaks chat templates that
    require user and assistant turns to alternate, e.g. Mistral's)."""
    last = run.messages[-1] if run.messages else None
    if last is not None and last.get("role") == "tool":
        last["content"] = f"{last['content']}\n\n{text}"
    else:
        run.messages.append({"role": "user", "content": text})


def focused_round(run: AgentRun) -> bool:
    """Put the failing line (and the cell) to the model alone; run each new change its replies make in the
    sandbox, as a step. True when one ran clean and `finish` accepted it. The changes that failed are told to
    the model in the conversation."""
    ctx, r = run.ctx, run.runner
    if ctx is None or not ctx.error:
        return False
    cell = r.cells[run.target]
    base = cell.original if cell.original is not None else cell.source
    steps = focused.plan(run.focus_rounds, base, ctx.failing_line)
    run.focus_rounds += 1
    if not steps:
        return False
    if run.variables is None:
        run.variables = _variables(run, ctx)
    notes: list[str] = []
    for kind, temperature in steps:
        if run._limit_reached() or run.budget.max_steps - run.steps <= RESERVED_STEPS:
            break
        ask = focused.ask(ctx, base, kind, temperature, run.variables, run.focus_failed)
        settings = msgspec.structs.replace(run.settings, temperature=ask.temperature, max_tokens=ask.max_tokens)
        left_s = run.max_seconds - (run.clock() - run.start)
        try:
            text, usage = call_model(settings, ask.messages, run.ledger, fmt="none",
                                     deadline=time.monotonic() + left_s)
        except LLMError as exc:  # (a passed deadline too): the loop's own checks decide what comes next
            log.info("agent: focused ask failed: %s", exc)
            break
        run.calls.focused_requests += 1
        if run.session_ledger is not None:
            run.session_ledger.add(usage)
        new = focused.candidate(base, text, ctx.failing_line)
        if new is None or same_code(new, base) or same_code(new, cell.source):
            continue
        key = "\n".join(x.strip() for x in new.splitlines() if x.strip())
        if key in run.focus_tried:
            continue
        run.focus_tried.add(key)
        what = focused.changed_lines(base, new)
        if parse_cell(new) is None:
            continue  # (not told: nothing ran)
        reason = check_edit(base, new, cell.failing_line)
        if reason:
            r.refusals.append(f"cell {run.target}: {reason}")
            notes.append(f"{what} -> {reason}")
            run.focus_failed.append(f"{what} -> {reason.removeprefix('refused: ').split('. ')[0]}")
            continue
        outcome = _try_change(run, ask, new, what, usage)
        if outcome is None:
            return True
        if outcome == "stopped":
            return False
        notes.append(f"{what} -> {outcome}")
        run.focus_failed.append(notes[-1])
    if notes:
        _tell(run, f"CRANE put {focused.subject(ctx.failing_line, run.target)} to you alone; these changes did "
                   f"not fix it:\n- " + "\n- ".join(notes) + f"\nCell {run.target} is as it was. Try a "
                   f"different change.")
    return False


def _try_change(run: AgentRun, ask: focused.FocusedAsk, new: str, what: str, usage) -> str | None:
    """Run one focused change as a step: None when it was accepted (the run is finished), "stopped" when the
    user stopped the run, else what happened (the change is undone)."""
    ctx, r = run.ctx, run.runner
    assert ctx is not None  # (focused_round checked it)
    cell = r.cells[run.target]
    run.calls.focused_tried += 1
    run.steps += 1
    t0 = time.monotonic()
    su = StepUsage.of(usage)
    where = f"line {ctx.failing_line}" if ask.ask == "line" else f"cell {run.target}"
    step = AgentStep(run_id=run.run_id, step=run.steps, phase="proposed", action="edit_cell",
                     reflection=f"CRANE asked the model for {where} alone (temperature {ask.temperature:g})",
                     cell=run.target, code=new, tokens=su.prompt_tokens + su.completion_tokens, usage=su)
    if not run._gate(step):
        run._emit(msgspec.structs.replace(step, phase="done", result="not run: the user stopped the run",
                                           status="stopped"))
        return "stopped"
    before, evidence = cell.source, run.evidence
    cell.source = new  # (checked by the caller: parsed, changed, the guard holds)
    try:
        plan_results, res = r.execute(run.target)
        obs = describe_run(plan_results, run.target, res)
        finished, outcome = False, res.headline(200)
        if res.clean:
            obs2, _, finished = run._finish(Finish(
                explanation=f"{what} (the model's change to {where}, asked alone); cell {run.target} ran clean."))
            obs, outcome = obs + "\n" + obs2, obs2
    except Exception as exc:  # the sandbox failed (its kernel died, ...): undone, and the sandbox started afresh
        log.warning("agent: a focused change could not be run: %s", exc)
        obs = outcome = f"the sandbox failed: {exc}"
        finished = False
        r.executed = []
        try:
            r.sandbox.reset_to_history()
        except Exception as again:  # the next execution tries again (and reports it)
            log.warning("agent: the sandbox could not be reset: %s", again)
    run._emit(msgspec.structs.replace(step, phase="done", result=obs, status="ok" if finished else "error",
                                       elapsed_s=round(time.monotonic() - t0, 3)))
    if finished:
        return None
    cell.source, run.evidence = before, evidence
    return outcome
