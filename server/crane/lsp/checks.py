"""Checking cells in the daemon: analyse → facts → rules off the event loop, publish, then hand the cells on.

`refresh_cells` is the batch every `CellScheduler` runs; `publish_checked` is shared with the commands that
check cells on demand (`crane.checkNotebook`, `crane.diagnoseCell`). After publishing, each still-current
cell is offered to the sandbox (auto/llm modes), which hands undecided cells to the model (llm mode); the
kernel status is re-sent when diagnostics start or stop relying on stale facts, and cells left stale are
handed to the kernel supervisor, which checks them again once the kernel can answer (`stale_published`).
Cells whose facts the probe left partial (`resumable`) are checked again at once, and offered on once their
facts settle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crane.lsp.diagnostics import clear, publish_outcomes
from crane.lsp.notebook_map import NotebookSnapshot, snapshot
from crane.probe.facts import RESUME_ROUNDS

if TYPE_CHECKING:
    from crane.lsp.crane_server import CraneServer
    from crane.lsp.notebook_session import CellOutcome, NotebookSession


async def refresh_cells(ls: CraneServer, session: NotebookSession, uris: list[str]) -> list[CellOutcome]:
    """Check `uris` of `session`'s notebook against the current text and kernel, then publish."""
    snap = snapshot(ls.workspace, session.uri)
    if snap is None or session.closed:
        return []
    wanted = set(uris)
    targets = [c for c in snap.cells if c.uri in wanted]
    for c in targets:
        if not c.is_code:  # markdown, or a cell whose language is not Python
            clear(ls, session, [c.uri])
    code = [c for c in targets if c.is_code]
    if not code:
        return []
    outcomes = await ls.run_blocking(ls.analysis.check_cells, snap, code, session, ls.tuning.probe_timeout_ms / 1000)
    publish_checked(ls, session, snap, outcomes)
    return outcomes


def _unfinished(session: NotebookSession, outcomes: list[CellOutcome]) -> list[str]:
    """Cells whose live facts the probe left partial (`resumable`: exact passes over large values it goes on
    with in the next request while nothing runs): checked again at once, RESUME_ROUNDS times at most in a row,
    so their diagnostics settle on exact facts a few short requests later, never blocking the kernel long."""
    again = []
    for out in outcomes:
        uri = out.cell.uri
        if out.mode == "live" and out.probe is not None and out.probe.resumable:
            key = (out.cell.source, session.kernel_gen)  # a new text or kernel state starts a new count
            rec = session.cell(uri)
            rounds = rec.resume[1] + 1 if rec.resume is not None and rec.resume[0] == key else 1
            rec.resume = (key, rounds)
            if rounds <= RESUME_ROUNDS:
                again.append(uri)
        elif uri in session.cells:
            session.cells[uri].resume = None
    return again


def publish_checked(ls: CraneServer, session: NotebookSession, snap: NotebookSnapshot, outcomes: list[CellOutcome]) -> None:
    again = _unfinished(session, outcomes)
    for cell in publish_outcomes(ls, session, snap, outcomes):
        if cell.uri not in again:  # the sandbox and the model see settled facts
            ls.speculation.consider(session, cell)
    if again and session.scheduler is not None:
        session.scheduler.request(again, 0.0)
    any_stale = bool(session.stale_cells)
    if any_stale != session.used_stale:
        session.used_stale = any_stale
        ls.kernels.notify_status(session)
    ls.kernels.stale_published(session)
