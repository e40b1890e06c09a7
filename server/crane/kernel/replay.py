"""Replaying a notebook's history in a kernel CRANE owns, to rebuild the state before a target cell."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from crane.kernel.client import KernelConnection
from crane.notebook.model import Cell


class HistoryRun(msgspec.Struct):
    number: int  # cell number in the notebook
    execution_count: int  # the notebook's original execution count
    status: str
    ename: str | None = None
    evalue: str | None = None
    elapsed_s: float = 0.0


def replay(conn: KernelConnection, history: list[Cell], cell_timeout: float = 600.0,
           after: Callable[[Cell], None] | None = None) -> list[HistoryRun]:
    """Run `history` (already in execution order). A cell that raises is recorded and the replay goes on.
    `after(cell)` is called once each cell has run (the CLI prepares the copy path's worker there)."""
    runs = []
    for cell in history:
        res = conn.run_cell(cell.source, timeout=cell_timeout)
        runs.append(
            HistoryRun(
                number=cell.number,
                execution_count=cell.execution_count or 0,
                status=res.status,
                ename=res.ename,
                evalue=(res.evalue or "")[:300] if res.ename else None,
                elapsed_s=res.elapsed_s,
            )
        )
        if after is not None:
            after(cell)
    return runs
