"""`workspace/executeCommand` commands and the `crane/attachKernel` request.

Handlers leave `ls` unannotated: pygls resolves command handlers' type hints at call time.
Arguments are positional as documented in docs/protocol.md (an object with the same camelCase names is
accepted too) and validated here, so a bad call gets an "invalid params" error naming what is wrong.

Features built by other layers plug into `FEATURES` (`handler(ls, args: list) -> awaitable JSON-ready
result`): the sandbox (`speculative_command`) and the repair agent (`agent_bridge`), registered by server.py.
A command whose handler is None answers with a "not available yet" error (JSON-RPC RequestFailed, -32803).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from crane.lsp import diagnosis
from crane.lsp.diagnostics import publish_outcomes
from crane.lsp.messages import (
    AttachKernelParams,
    CellCheck,
    CheckResult,
    InvalidParams,
    decode_params,
    to_wire,
)
from crane.lsp.notebook_map import snapshot
from crane.lsp.progress import WorkProgress

if TYPE_CHECKING:
    from crane.lsp.server import CraneServer

log = logging.getLogger(__name__)

DIAGNOSIS = "crane/diagnosis"

CHECK_NOTEBOOK = "crane.checkNotebook"
DIAGNOSE_CELL = "crane.diagnoseCell"
FIX_CELL = "crane.fixCell"
STOP_AGENT = "crane.stopAgent"
CONTINUE_AGENT = "crane.continueAgent"
RUN_SPECULATIVELY = "crane.runSpeculatively"
ATTACH_KERNEL = "crane.attachKernel"

Handler = Callable[["CraneServer", list[Any]], Awaitable[Any]]

# Commands whose feature lives in another layer: None until that layer registers a handler.
FEATURES: dict[str, Handler | None] = {
    FIX_CELL: None,  # the repair agent (returns a proposal: a WorkspaceEdit needing confirmation)
    STOP_AGENT: None,
    CONTINUE_AGENT: None,
    RUN_SPECULATIVELY: None,  # the sandbox (verdict, captured output, exception)
}

_WHAT = {
    FIX_CELL: "the CRANE repair agent",
    STOP_AGENT: "the CRANE repair agent",
    CONTINUE_AGENT: "the CRANE repair agent",
    RUN_SPECULATIVELY: "speculative runs in a sandbox",
}


class RequestFailed(JsonRpcException):
    CODE = -32803
    MESSAGE = "Request failed"


def _arg(args: tuple[Any, ...], index: int, name: str, command: str, required: bool = True) -> Any:
    if len(args) == 1 and isinstance(args[0], dict):
        value = args[0].get(name)
    else:
        value = args[index] if index < len(args) else None
    if value is None and required:
        raise JsonRpcInvalidParams(f"{command}: missing argument {name!r} (argument {index + 1})")
    if value is not None and not isinstance(value, str):
        raise JsonRpcInvalidParams(f"{command}: {name!r} must be a string, got {type(value).__name__}")
    return value


# -- crane.checkNotebook ---------------------------------------------------------------------------
async def check_notebook(ls, *args: Any) -> Any:
    notebook_uri = _arg(args, 0, "notebookUri", CHECK_NOTEBOOK)
    session = ls.session_of_notebook(notebook_uri)
    snap = snapshot(ls.workspace, session.uri) if session else None
    if session is None or snap is None:
        raise RequestFailed(f"{CHECK_NOTEBOOK}: the notebook {notebook_uri} is not open")
    cells = snap.code_cells
    results: list[CellCheck] = []
    timeout = ls.tuning.probe_timeout_ms / 1000
    cancelled = False
    async with WorkProgress(ls, "CRANE: checking the notebook") as progress:
        for i, cell in enumerate(cells):
            if progress.cancelled or session.closed:
                cancelled = True
                break
            progress.report(f"cell {cell.number} ({i + 1} of {len(cells)})", int(100 * i / max(len(cells), 1)))
            outcomes = await ls.run_blocking(ls.analysis.check_cells, snap, [cell], session, timeout)
            publish_outcomes(ls, session, snap, outcomes)
            for out in outcomes:
                results.append(
                    CellCheck(cell_uri=cell.uri, cell=cell.number, findings=diagnosis.rank(out.findings), mode=out.mode, error=out.error)
                )
    result = CheckResult(
        notebook_uri=snap.uri,
        cells=results,
        crashes=sum(1 for r in results if r.findings),
        cancelled=cancelled,
    )
    return to_wire(result)


# -- crane.diagnoseCell ----------------------------------------------------------------------------
async def diagnose_cell(ls, *args: Any) -> Any:
    cell_uri = _arg(args, 0, "cellUri", DIAGNOSE_CELL)
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
            ls.analysis.check_cells,
            snap,
            [cell],
            session,
            ls.tuning.probe_timeout_ms / 1000,
        )
        publish_outcomes(ls, session, snap, outcomes)
        model = ls.settings.llm.model
        progress.report(f"asking {model}" if model else "explaining", 60)
        result = await diagnosis.diagnose(snap, outcomes[0], ls.settings.llm_section())
    wire = to_wire(result)
    ls.protocol.notify(DIAGNOSIS, wire)
    return wire


# -- crane.attachKernel / crane/attachKernel -------------------------------------------------------
async def attach_kernel(ls, *args: Any) -> Any:
    """Arguments: (notebookUri, connectionFile), or one object as `crane/attachKernel`'s params (a kernel on a
    Jupyter Server: {notebookUri, serverUrl, kernelId})."""
    if len(args) == 1 and not isinstance(args[0], str):
        return await attach_kernel_request(ls, args[0])
    notebook_uri = _arg(args, 0, "notebookUri", ATTACH_KERNEL)
    connection_file = _arg(args, 1, "connectionFile", ATTACH_KERNEL)
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
                                                   kernel_id=p.kernel_id)
    return to_wire(result)


# -- features of other layers ----------------------------------------------------------------------
def _feature(name: str) -> Callable[..., Awaitable[Any]]:
    async def run(ls, *args: Any) -> Any:
        handler = FEATURES.get(name)
        if handler is None:
            raise RequestFailed(f"{name} is not available yet: {_WHAT[name]} is not part of this CRANE build")
        return await handler(ls, list(args))

    run.__name__ = name.replace(".", "_")
    return run


fix_cell = _feature(FIX_CELL)
stop_agent = _feature(STOP_AGENT)
continue_agent = _feature(CONTINUE_AGENT)
run_speculatively = _feature(RUN_SPECULATIVELY)

# command id -> handler: server.py registers every entry.
COMMANDS: dict[str, Callable[..., Awaitable[Any]]] = {
    CHECK_NOTEBOOK: check_notebook,
    DIAGNOSE_CELL: diagnose_cell,
    ATTACH_KERNEL: attach_kernel,
    FIX_CELL: fix_cell,
    STOP_AGENT: stop_agent,
    CONTINUE_AGENT: continue_agent,
    RUN_SPECULATIVELY: run_speculatively,
}
