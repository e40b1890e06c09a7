"""Checking cells in the daemon: analyse → facts → rules off the event loop, publish, then hand the cells on.

`refresh_cells` is the batch every `CellScheduler` runs; `publish_checked` is shared with the commands that
check cells on demand (`crane.checkNotebook`, `crane.diagnoseCell`). After publishing, each still-current
cell is offered to the sandbox (auto/llm modes), which hands undecided cells to the model (llm mode); the
kernel status is re-sent when diagnostics start or stop relying on stale facts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crane.lsp.diagnostics import clear, publish_outcomes
from crane.lsp.notebook_map import NotebookSnapshot, snapshot

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


def publish_checked(ls: CraneServer, session: NotebookSession, snap: NotebookSnapshot, outcomes: list[CellOutcome]) -> None:
    for cell in publish_outcomes(ls, session, snap, outcomes):
        ls.speculation.consider(session, cell)
    any_stale = bool(session.stale_cells)
    if any_stale != session.used_stale:
        session.used_stale = any_stale
        ls.kernels.notify_status(session)
