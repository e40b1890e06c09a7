"""The JSON documents the CLI prints with `--json` (schema in docs/cli.md), as msgspec Structs."""

from __future__ import annotations

import msgspec

from crane.commands.history_json import HistoryEntry
from crane.engine import CellResult


class CheckReport(msgspec.Struct, omit_defaults=True, rename="camel"):
    schema: str  # "crane.check/1"
    notebook: str
    mode: str
    cells: list[CellResult]
    history: list[HistoryEntry] = []
    predicted_crashes: int = 0
    elapsed_s: float = 0.0
    error: str | None = None


def encode(obj) -> str:
    return msgspec.json.format(msgspec.json.encode(obj).decode(), indent=2)
