"""The JSON documents the CLI prints with `--json` (schema in docs/cli.md), as msgspec Structs."""

from __future__ import annotations

import msgspec

from crane.engine import CellResult
from crane.kernel.replay import HistoryRun


class HistoryEntry(msgspec.Struct, omit_defaults=True, rename="camel"):
    cell: int
    execution_count: int
    status: str
    ename: str | None = None
    evalue: str | None = None


class CheckReport(msgspec.Struct, omit_defaults=True, rename="camel"):
    schema: str  # "crane.check/1"
    notebook: str
    mode: str
    cells: list[CellResult]
    history: list[HistoryEntry] = []
    predicted_crashes: int = 0
    elapsed_s: float = 0.0
    error: str | None = None


def history_entries(runs: list[HistoryRun]) -> list[HistoryEntry]:
    return [
        HistoryEntry(cell=r.number, execution_count=r.execution_count, status=r.status, ename=r.ename, evalue=r.evalue)
        for r in runs
    ]


def encode(obj) -> str:
    return msgspec.json.format(msgspec.json.encode(obj).decode(), indent=2)
