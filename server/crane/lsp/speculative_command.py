"""`crane.runSpeculatively(cellUri)`: run one cell now in a confined copy-on-write fork of the attached kernel
and show what it did: the verdict, the exception with its line, the captured stdout/stderr and displays.

Needs an attached kernel (otherwise a RequestFailed error saying so). The verdict is also cached and, in auto
and llm modes, published like the background runs' (see speculation.py).
"""

from __future__ import annotations

from typing import Any

from crane.lsp.crane_server import CraneServer
from crane.lsp.messages import RequestFailed, SpeculativeResult, command_arg, to_wire
from crane.lsp.notebook_map import CellSnapshot, snapshot
from crane.lsp.progress import WorkProgress

RUN_SPECULATIVELY = "crane.runSpeculatively"
COMMAND = RUN_SPECULATIVELY
MAX_TEXT = 4000

_HEAD = {
    "crash": "will crash",
    "no-crash": "runs without crashing",
    "timeout": "did not finish within the budget (inconclusive)",
    "blocked": "has side effects the sandbox refuses (inconclusive)",
    "unavailable": "could not be run in the sandbox",
}


def _block(text: str, lang: str = "text") -> str:
    text = text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\n… (truncated)"
    return f"```{lang}\n{text.rstrip()}\n```"


def render(cell: CellSnapshot, v: Any) -> str:
    out = [f"### Cell {cell.number} {_HEAD.get(v.verdict, v.verdict)}"]
    how = v.how()
    out.append(f"{how[:1].upper()}{how[1:]}, in {v.elapsed_ms:.0f} ms; "
               "the kernel, your files and the network were not touched.")
    if v.verdict == "crash":
        where = f" on line {v.line}" if v.line else ""
        out.append(f"**`{v.ename}`**{where}: {(v.evalue or '').strip()}")
        lines = cell.source.splitlines()
        if v.line and 1 <= v.line <= len(lines):
            out.append(_block(lines[v.line - 1], "python"))
        if v.traceback:
            out.append("**Traceback**\n\n" + _block("\n".join(v.traceback)))
    if v.reason and v.verdict != "crash":
        out.append(f"Reason: {v.reason}")
    if v.denied:
        out.append("Refused: " + ", ".join(f"`{d}`" for d in v.denied[:10]))
    if v.stdout:
        out.append("**stdout**\n\n" + _block(v.stdout))
    if v.stderr:
        out.append("**stderr**\n\n" + _block(v.stderr))
    for d in v.displays:
        label = "Out" if d.kind == "execute_result" else "Display"
        out.append(f"**{label}**\n\n" + _block(d.text or ", ".join(d.mimetypes)))
    return "\n\n".join(out)


async def run_speculatively(ls: CraneServer, *args: Any) -> Any:
    cell_uri = command_arg(args, 0, "cellUri", COMMAND)
    session = ls.session_of_cell(cell_uri)
    snap = snapshot(ls.workspace, session.uri) if session else None
    cell = snap.cell(cell_uri) if snap else None
    if session is None or snap is None or cell is None:
        raise RequestFailed(f"{COMMAND}: {cell_uri} is not a cell of an open notebook")
    if not cell.is_code:
        raise RequestFailed(f"{COMMAND}: cell {cell.number} is not a Python code cell")
    att = session.attachment
    if att is None or not att.alive:
        raise RequestFailed(f"{COMMAND} needs an attached kernel: {session.status_message or 'no kernel is attached'}")
    async with WorkProgress(ls, f"CRANE: running cell {cell.number} speculatively", cancellable=False):
        v = await ls.speculation.run_now(session, cell)
    return to_wire(SpeculativeResult(cell_uri=cell.uri, cell=cell.number, sandbox=v, markdown=render(cell, v)))
