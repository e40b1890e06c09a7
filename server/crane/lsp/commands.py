"""The `workspace/executeCommand` commands of the checks, and the `crane/attachKernel` request.

`crane.checkNotebook`, `crane.diagnoseCell` (the rules' explanation, refined by a model when one is configured:
`llm_bridge.diagnose_with_llm`) and `crane.attachKernel`. The sandbox's `crane.runSpeculatively` lives in
`speculative_command.py`, the repair agent's commands in `agent_bridge.py`; `server.py` registers them all.
Arguments are positional as documented in docs/protocol.md (an object with the same camelCase names is
accepted too) and validated with `messages.command_arg`, so a bad call gets an "invalid params" error naming
what is wrong.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams

from crane.lsp import explain
from crane.lsp.checks import publish_checked
from crane.lsp.crane_server import CraneServer
from crane.lsp.llm_bridge import diagnose_with_llm
from crane.lsp.messages import (
    AttachKernelParams,
    CellCheck,
    CheckResult,
    InvalidParams,
    RequestFailed,
    command_arg,
    decode_params,
    to_wire,
)
from crane.lsp.notebook_map import snapshot
from crane.lsp.progress import WorkProgress

log = logging.getLogger(__name__)

DIAGNOSIS = "crane/diagnosis"

CHECK_NOTEBOOK = "crane.checkNotebook"
DIAGNOSE_CELL = "crane.diagnoseCell"
ATTACH_KERNEL = "crane.attachKernel"
ATTACH_KERNEL_REQUEST = "crane/attachKernel"


# -- crane.checkNotebook ---------------------------------------------------------------------------
async def check_notebook(ls: CraneServer, *args: Any) -> Any:
    notebook_uri = command_arg(args, 0, "notebookUri", CHECK_NOTEBOOK)
    session = ls.session_of_notebook(notebook_uri)
    snap = snapshot(ls.workspace, session.uri) if session else None
    if session is None or snap is None:
        raise RequestFailed(f"{CHECK_NOTEBOOK}: the notebook {notebook_uri} is not open")
    cells = snap.code_cells
    complete_check = functools.partial(ls.analysis.check_cells, complete=True)  # complete facts: answered once
    results: list[CellCheck] = []
    timeout = ls.tuning.probe_timeout_ms / 1000
    cancelled = False
    async with WorkProgress(ls, "CRANE: checking the notebook") as progress:
        for i, cell in enumerate(cells):
            if progress.cancelled or session.closed:
                cancelled = True
                break
            progress.report(f"cell {cell.number} ({i + 1} of {len(cells)})", int(100 * i / max(len(cells), 1)))
            outcomes = await ls.run_blocking(complete_check, snap, [cell], session, timeout)
            publish_checked(ls, session, snap, outcomes)
            for out in outcomes:
                results.append(
                    CellCheck(cell_uri=cell.uri, cell=cell.number, findings=explain.rank(out.findings), mode=out.mode, error=out.error)
                )
    result = CheckResult(
        notebook_uri=snap.uri,
        cells=results,
        crashes=sum(1 for r in results if r.findings),
        cancelled=cancelled,
    )
    return to_wire(result)


# -- crane.diagnoseCell ----------------------------------------------------------------------------
async def diagnose_cell(ls: CraneServer, *args: Any) -> Any:
    cell_uri = command_arg(args, 0, "cellUri", DIAGNOSE_CELL)
    session = ls.session_of_cell(cell_uri)
    snap = snapshot(ls.workspace, session.uri) if session else None
    cell = snap.cell(cell_uri) if snap else None
    if session is None or snap is None or cell is None:
        raise RequestFailed(f"{DIAGNOSE_CELL}: {cell_uri} is not a cell of an open notebook")
    if not cell.is_code:
        raise RequestFailed(f"{DIAGNOSE_CELL}: cell {cell.number} is not a Python code cell")
    async with WorkProgress(ls, f"CRANE: diagnosing cell {cell.number}") as progress:
        progress.report("reading the kernel's facts", 10)
        outcomes = await ls.run_blocking(
            functools.partial(ls.analysis.check_cells, complete=True),  # complete facts: answered once
            snap,
            [cell],
            session,
            ls.tuning.probe_timeout_ms / 1000,
        )
        publish_checked(ls, session, snap, outcomes)
        model = ls.settings.llm.model
        progress.report(f"asking {model}" if model else "explaining", 60)
        verdict = session.sandbox_verdicts.get(cell.source, session.kernel_gen) if ls.settings.speculative_on else None
        ctx = explain.diagnosis_context(snap, outcomes[0], ls.settings.llm, verdict)
        result = ctx.rules_result
        try:
            result = await diagnose_with_llm(ctx) or result
        except Exception:
            log.exception("the LLM diagnosis failed: using the rules' diagnosis")
    wire = to_wire(result)
    ls.notify(DIAGNOSIS, wire)
    return wire


# -- crane.attachKernel / crane/attachKernel -------------------------------------------------------
async def attach_kernel(ls: CraneServer, *args: Any) -> Any:
    """Arguments: (notebookUri, connectionFile), or one object as `crane/attachKernel`'s params (a kernel on a
    Jupyter Server: {notebookUri, serverUrl, kernelId})."""
    if len(args) == 1 and not isinstance(args[0], str):
        return await attach_kernel_request(ls, args[0])
    notebook_uri = command_arg(args, 0, "notebookUri", ATTACH_KERNEL)
    connection_file = command_arg(args, 1, "connectionFile", ATTACH_KERNEL)
    return await _attach(ls, AttachKernelParams(notebook_uri=notebook_uri, connection_file=connection_file))


async def attach_kernel_request(ls: CraneServer, params: Any) -> Any:
    try:
        p = decode_params(params, AttachKernelParams)
    except InvalidParams as exc:
        raise JsonRpcInvalidParams(f"crane/attachKernel: {exc}") from None
    return await _attach(ls, p)


async def _attach(ls: CraneServer, p: AttachKernelParams) -> Any:
    session = ls.session_of_notebook(p.notebook_uri)
    if session is None:
        raise RequestFailed(f"attach: the notebook {p.notebook_uri} is not open")
    async with WorkProgress(ls, "CRANE: attaching to the kernel", cancellable=False):
        result = await ls.kernels.attach_requested(session, p.connection_file, server_url=p.server_url,
                                                   kernel_id=p.kernel_id, source=p.source)
    return to_wire(result)
