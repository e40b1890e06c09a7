"""`crane/lmTool` (request): CRANE's agent tools for the editor's language-model tools (Copilot agent mode and any
chat participant, through `vscode.lm.registerTool` in the extension's `lmTools.ts`).

The same tools as `crane mcp` (`crane.mcp.tools`), on the kernel attached to the open notebook, with the
notebook's synced cells (unsaved edits included) for the cell tools. The work runs on a sandbox thread of its
own with its own kernel connection (`sandbox_thread`), one call at a time; nothing runs in the user's kernel.
Bad params (not an `LmToolParams`): invalid params; an unknown tool: invalid params; tool arguments that do not
match the tool's schema, a notebook that is not open, or no attached kernel: a result with `isError` saying so,
as for any failure of the tool's work (the model reads it and corrects the call). The check tools answer
`prediction: "unknown"` where neither the kernel's facts nor a sandbox run decided.

While the user's cell runs in the kernel, the kernel is asked nothing, as in `crane mcp` (`Attached.busy`): a check
answers at once from static facts, a run is `unavailable`, facts and fixes are an error saying so (a private request
would only queue behind the cell). A cell is what the kernel watch's `cell_running` says: another client's execute
request that is not silent, until its `idle`; not the watch's `busy`, which counts the Jupyter extension's silent
requests (its variable view) too, and would refuse tools whenever the editor refreshes a view.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcInvalidParams

from crane.lsp.messages import InvalidParams, LmToolParams, LmToolResult, decode_params, to_wire

if TYPE_CHECKING:
    from crane.lsp.crane_server import CraneServer
    from crane.lsp.sandbox_thread import SandboxThread

log = logging.getLogger(__name__)

LM_TOOL = "crane/lmTool"
_threads: dict[int, SandboxThread] = {}


def _thread(ls: CraneServer) -> SandboxThread:
    from crane.lsp.sandbox_thread import SandboxThread

    t = _threads.get(id(ls))
    if t is None:
        t = _threads[id(ls)] = SandboxThread("crane-lm-tools", ls)
    return t


def _error(tool: str, message: str) -> Any:
    return to_wire(LmToolResult(tool=tool, text=message, is_error=True))


async def lm_tool(ls: CraneServer, params: Any) -> Any:
    """`crane/lmTool`: run one agent tool on the notebook's attached kernel."""
    from crane.errors import CraneError
    from crane.lsp.llm_bridge import notebook_cells
    from crane.lsp.notebook_map import snapshot
    from crane.mcp.backend import Attached, KernelTools, ToolFailure
    from crane.mcp.tools import BY_NAME, ArgumentError, decode_args, encode_result
    from crane.notebook.model import Notebook

    try:
        p = decode_params(params, LmToolParams)
    except InvalidParams as exc:
        raise JsonRpcInvalidParams(f"{LM_TOOL}: {exc}") from None
    spec = BY_NAME.get(p.tool)
    if spec is None:
        raise JsonRpcInvalidParams(f"{LM_TOOL}: unknown tool {p.tool!r} (tools: {', '.join(BY_NAME)})")
    try:
        args = decode_args(spec, p.input)
    except ArgumentError as exc:
        return _error(p.tool, f"{exc}. Correct the arguments (see the tool's input schema) and call again.")
    session = ls.session_of_notebook(p.notebook_uri)
    snap = snapshot(ls.workspace, session.uri) if session else None
    if session is None or snap is None:
        return _error(p.tool, f"the notebook {p.notebook_uri} is not open in the editor")
    att = session.attachment
    if att is None or not att.alive:
        return _error(p.tool, f"no kernel is attached to this notebook: {session.status_message or 'start its kernel'}")
    nb = Notebook(path=snap.path, cells=notebook_cells(snap))
    describe = getattr(getattr(att, "info", None), "description", "") or "the notebook's kernel"

    def work(conn: Any) -> Any:
        tools = KernelTools(Attached(conn=conn, describe=describe, notebook=snap.path, open_notebook=nb,
                                     busy=lambda: att.watch.cell_running))
        return spec.call(tools, args)

    try:
        result = await _thread(ls).with_connection(att, work)
    except (ToolFailure, CraneError) as exc:
        return _error(p.tool, f"{p.tool}: {exc}")
    except Exception as exc:  # the daemon never dies from one request
        log.exception("%s %s raised", LM_TOOL, p.tool)
        return _error(p.tool, f"{p.tool}: internal error: {type(exc).__name__}: {exc}")
    return to_wire(LmToolResult(tool=p.tool, text=json.dumps(encode_result(result), ensure_ascii=False)))


def close(ls: CraneServer) -> None:
    t = _threads.pop(id(ls), None)
    if t is not None:
        t.close()
