"""How a replayed history cell appears in the CLI's JSON reports (`crane check`, `crane diagnose`).

Kept free of heavy imports: every subcommand module is imported when the CLI builds its parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from crane.kernel.replay import HistoryRun


class HistoryEntry(msgspec.Struct, omit_defaults=True, rename="camel"):
    cell: int
    execution_count: int
    status: str
    ename: str | None = None
    evalue: str | None = None


def history_entries(runs: list[HistoryRun]) -> list[HistoryEntry]:
    return [
        HistoryEntry(cell=r.number, execution_count=r.execution_count, status=r.status, ename=r.ename, evalue=r.evalue)
        for r in runs
    ]
