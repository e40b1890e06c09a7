"""The repair agent in the daemon: `crane.fixCell`, `crane.stopAgent`, `crane.continueAgent`.

`crane.fixCell(cellUri, {goal?, stepMode?})` builds a `crane.notebook.model.Notebook` from the synced notebook
(every cell, 1-based numbers, execution counts from the client's execution summaries) and runs
`crane.agent.loop.start_fix` in a worker thread. Executions go to a fork-sandbox session of the attached
kernel (its own connection, ignored by the kernel watcher), or to a replay kernel CRANE owns when there is
none: nothing runs in the user's kernel. Every step is sent as `crane/agentStep` (from the event loop).
A stop event per run id: `crane.stopAgent`, cancelling the request or its work-done progress set it. Step
mode (`crane.agent.stepMode` or the option): each proposed action waits for `crane.continueAgent(runId)`.
The verified quick fixes already found for the cell (crane.lsp.quick_fixes) are given to the agent as candidates.
The result carries the proposal and a WorkspaceEdit (change annotations needing confirmation) on the
synced cell URIs and versions.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from typing import Any

import msgspec

from crane.lsp.agent_runs import AgentRunHandle
from crane.lsp.crane_server import CraneServer
from crane.lsp.llm_bridge import notebook_cells
from crane.lsp.messages import (
    ContinueAgentResult,
    FixOptions,
    FixResult,
    RequestFailed,
    StopAgentResult,
    command_arg,
    to_wire,
)
from crane.lsp.notebook_map import snapshot
from crane.lsp.progress import WorkProgress

log = logging.getLogger(__name__)

FIX_CELL = "crane.fixCell"
STOP_AGENT = "crane.stopAgent"
CONTINUE_AGENT = "crane.continueAgent"
AGENT_STEP = "crane/agentStep"
NO_MODEL = "the repair agent needs a model: set crane.llm.model"


def _request_future(ls: CraneServer) -> Any:
    """The future of the `workspace/executeCommand` request being handled. pygls runs command handlers from a
    generator, so `$/cancelRequest` cancels this future, not the handler's task: the handler polls it."""
    try:
        msg_id = ls.protocol.msg_id
        return ls.protocol._request_futures.get(msg_id) if msg_id is not None else None
    except Exception:  # pygls internals changed: cancellation then works through stopAgent / progress only
        return None


def _options(args: list[Any]) -> FixOptions:
    from pygls.exceptions import JsonRpcInvalidParams

    raw: Any = None
    if len(args) == 1 and isinstance(args[0], dict):
        raw = args[0].get("options", {k: v for k, v in args[0].items() if k != "cellUri"})
    elif len(args) > 1:
        raw = args[1]
    if raw is None:
        return FixOptions()
    try:
        return msgspec.convert(raw, FixOptions)
    except msgspec.ValidationError as exc:
        raise JsonRpcInvalidParams(f"{FIX_CELL}: invalid options: {exc}") from None


def render(proposal: Any, offered: list | None = None) -> str:
    """The run's markdown; `offered`: the verified quick fixes (crane.fixes.model.VerifiedFix), listed when the
    model did not fix the cell (its failure never hides a fix CRANE already verified)."""
    from crane.agent.proposal import unified_diff

    head = {
        "fixed": f"### CRANE agent: cell {proposal.target} fixed",
        "not-fixed": f"### CRANE agent: no verified fix for cell {proposal.target}",
        "stopped": f"### CRANE agent: stopped (cell {proposal.target})",
        "error": f"### CRANE agent: the run failed (cell {proposal.target})",
        "clean": f"### CRANE agent: cell {proposal.target} already runs clean",
    }[proposal.status]
    out = [head, proposal.summary() if proposal.status != "clean" else proposal.stop_reason]
    if proposal.crash_certain is False:  # (issue 42, h5) the crash was seen only on a copy of the kernel's state
        out.append(f"**Verified against a likely crash**: {proposal.crash_doubt or 'the crash is only likely'}. It "
                   "was seen in a sandbox copy of the kernel's state, which may have missed what it rests on: the "
                   "kernel itself may not raise it.")
    if proposal.explanation:
        out.append(proposal.explanation)
    diff = unified_diff(proposal, "notebook")
    if diff.strip():
        out.append(f"```diff\n{diff.rstrip()}\n```")
    if proposal.additions:
        out.append("New cells: " + ", ".join(f"after cell {a.after}" for a in proposal.additions))
    if proposal.run_first:
        out.append("Run first: " + ", ".join(f"cell {c}" for c in proposal.run_first))
    if proposal.evidence is not None:
        ev = proposal.evidence
        what = "ran clean" if ev.status == "ok" else f"{ev.ename or ev.status}: {ev.evalue or ''}".strip()
        if not ev.certain and ev.status in ("ok", "error"):
            what += f" ({ev.doubt or 'only likely'})"
        out.append(f"Verified in a {ev.sandbox} sandbox: cell {ev.target} {what}.")
    if proposal.guard:
        out.append("Refused by the guard: " + "; ".join(proposal.guard))
    if offered and proposal.status in ("not-fixed", "stopped", "error"):
        out.append("The model did not fix the cell, but CRANE verified these quick fixes in a sandbox (Quick Fix "
                   "menu on the cell's diagnostic):\n" + "\n".join(f"{i}. {f.label}" for i, f in enumerate(offered, 1)))
    u = proposal.usage
    cost = f"${u.cost_usd:.5f}" if u.cost_usd is not None else "cost unknown (model not priced)"
    out.append(f"<sub>{proposal.model} · {proposal.steps} step(s) · {u.requests} request(s) · "
               f"{u.prompt_tokens:,} prompt + {u.completion_tokens:,} completion tokens · {cost} · "
               f"{proposal.elapsed_s:.1f} s · stop: {proposal.stop_reason}</sub>")
    return "\n\n".join(out)


async def fix_cell(ls: CraneServer, *args: Any) -> Any:
    cell_uri = command_arg(args[:1], 0, "cellUri", FIX_CELL)
    options = _options(list(args))
    session = ls.session_of_cell(cell_uri)
    snap = snapshot(ls.workspace, session.uri) if session else None
    cell = snap.cell(cell_uri) if snap else None
    if session is None or snap is None or cell is None:
        raise RequestFailed(f"{FIX_CELL}: {cell_uri} is not a cell of an open notebook")
    if not cell.is_code:
        raise RequestFailed(f"{FIX_CELL}: cell {cell.number} is not a Python code cell")
    from crane.llm.settings import SettingsError

    try:
        settings = ls.settings.llm_settings()
    except SettingsError as exc:
        raise RequestFailed(f"{FIX_CELL}: invalid LLM settings: {exc}") from None
    if not settings.enabled:
        raise RequestFailed(NO_MODEL)

    from crane.agent.loop import AgentBudget, GoAhead, start_fix
    from crane.notebook.model import Notebook

    nb = Notebook(path=snap.path, cells=notebook_cells(snap))
    run_id = uuid.uuid4().hex[:12]
    stop = threading.Event()
    step_mode = options.step_mode if options.step_mode is not None else ls.settings.agent.step_mode
    handle = AgentRunHandle(run_id, cell.uri, stop, GoAhead(stop) if step_mode else None)
    ls.agent_runs[run_id] = handle
    budget = AgentBudget(max_steps=ls.settings.agent.max_steps, max_cost_usd=ls.settings.agent.budget_usd)
    att = session.attachment if session.attachment is not None and session.attachment.alive else None
    # the verified quick fixes of this text against this kernel state, if any: the agent starts from them
    entry = session.quick_fixes.get(cell.source, session.kernel_gen) if not options.goal else None
    candidates = list(entry.fixes) if entry is not None else []
    attach_timeout = ls.tuning.attach_timeout_ms / 1000
    progress_box: dict[str, WorkProgress] = {}
    request = _request_future(ls)

    def send_step(step: Any) -> None:  # on the loop
        ls.notify(AGENT_STEP, msgspec.to_builtins(step))
        p = progress_box.get("p")
        if p is not None:
            waiting = " (waiting for crane.continueAgent)" if step.phase == "proposed" else ""
            where = f" cell {step.cell}" if step.cell is not None else ""
            p.report(f"step {step.step}: {step.action}{where}{waiting}")

    def on_step(step: Any) -> None:  # on the agent's thread
        ls.call_soon_threadsafe(send_step, step)

    def work() -> Any:
        from crane.agent.fork_sandbox import fork_or_replay_factory
        from crane.llm.cost import SESSION
        from crane.lsp.kernel_attach import connect, session_id

        conn = None
        if att is not None:
            try:
                conn = connect(att.target, attach_timeout)
                att.watch.ignore_sessions.add(session_id(conn))
            except Exception as exc:
                log.warning("agent: no connection to the kernel (%s): using a replay kernel", exc)
        try:
            return start_fix(nb, cell.number, settings, goal=options.goal, on_step=on_step, step_gate=handle.gate,
                             stop_event=stop, sandbox_factory=fork_or_replay_factory(conn), budget=budget,
                             ledger=SESSION, run_id=run_id, candidates=candidates)
        finally:
            if conn is not None:
                conn.close()

    from crane.kernel.errors import KernelError
    from crane.llm.client import LLMNotConfigured
    from crane.notebook.model import NotebookError

    try:
        async with WorkProgress(ls, f"CRANE agent: fixing cell {cell.number}") as progress:
            progress_box["p"] = progress
            fut = asyncio.get_running_loop().run_in_executor(None, work)
            try:
                while not fut.done():
                    await asyncio.wait({fut}, timeout=0.1)
                    if progress.cancelled or (request is not None and request.cancelled()):
                        handle.halt()
            except asyncio.CancelledError:  # $/cancelRequest: stop the run
                handle.halt()
                raise
            proposal = fut.result()
    except LLMNotConfigured:
        raise RequestFailed(NO_MODEL) from None
    except NotebookError as exc:
        raise RequestFailed(f"{FIX_CELL}: {exc}") from None
    except KernelError as exc:
        raise RequestFailed(f"{FIX_CELL}: no sandbox could start: {exc}") from None
    finally:
        ls.agent_runs.pop(run_id, None)

    from crane.agent.proposal import to_workspace_edit

    edit = None
    if proposal.fixed and proposal.changes_code:
        code = [c for c in snap.cells if c.is_code]
        edit = to_workspace_edit(
            proposal,
            cell_uris={c.number: c.uri for c in code},
            cell_versions={c.number: c.version for c in code if c.version is not None},
            cell_sources={c.number: c.source for c in code},
        )
    result = FixResult(run_id=run_id, status=proposal.status, proposal=proposal, edit=edit,
                       markdown=render(proposal, candidates))
    return to_wire(result)


async def stop_agent(ls: CraneServer, *args: Any) -> Any:
    run_id = command_arg(args, 0, "runId", STOP_AGENT, required=False)
    handles = [ls.agent_runs[run_id]] if run_id in ls.agent_runs else [] if run_id else list(ls.agent_runs.values())
    for h in handles:
        h.halt()
    return to_wire(StopAgentResult(stopped=bool(handles)))


async def continue_agent(ls: CraneServer, *args: Any) -> Any:
    run_id = command_arg(args, 0, "runId", CONTINUE_AGENT)
    h = ls.agent_runs.get(run_id)
    if h is None or h.gate is None or h.stop.is_set():
        return to_wire(ContinueAgentResult(continued=False))
    h.gate.approve()
    return to_wire(ContinueAgentResult(continued=True))

