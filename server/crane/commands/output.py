"""The JSON documents `crane check` prints (schema in docs/cli.md), as msgspec Structs.

`crane.check/3`: one report for every notebook checked; each cell's `sandbox` is the sandbox's record of its run
(`crane.sandbox.verdict.SandboxVerdict`: verdict, reason, mode, scale, kept, transplant, ...), nested as it is.
(`crane.check/2` copied parts of it into flat `sandbox`, `sandboxReason`, `sandboxMode`, ... fields;
`crane.check/1` was one notebook's entry, with `schema` and `mode` at its top.)
"""

from __future__ import annotations

import msgspec

from crane.commands.history_json import HistoryEntry
from crane.engine import CellResult
from crane.policy import Mode

CHECK_SCHEMA = "crane.check/3"


class NotebookReport(msgspec.Struct, omit_defaults=True, rename="camel"):
    """One notebook: its target cells' predictions and its replayed history, or why it could not be checked."""

    notebook: str  # the path as given on the command line or found under a folder given
    cells: list[CellResult] = []
    history: list[HistoryEntry] = []
    predicted_crashes: int = 0
    elapsed_s: float = 0.0
    error: str | None = None  # the notebook could not be checked (unreadable, not nbformat 4, kernel error, ...)


class CheckReport(msgspec.Struct, rename="camel"):
    schema: str  # CHECK_SCHEMA
    mode: Mode
    notebooks: list[NotebookReport]
    predicted_crashes: int  # cells predicted to crash, over every notebook
    errors: int  # notebooks that could not be checked
    elapsed_s: float


def encode(obj) -> str:
    return msgspec.json.format(msgspec.json.encode(obj).decode(), indent=2)
