"""What the daemon asks of the transplant's kernel-side export (`_crane_transplant.export`): one typed request.

`ExportRequest` declares every field, and has no default: each call site states them all (`transplant._export`).
The daemon sends it whole as a Python literal (`msgspec.to_builtins`); the kernel side, which has no msgspec, checks
it at its edge (`sandbox/kernel/export_request.py`: every declared key present with a value of its type, nothing
else) and reads the fields without defaults of its own. A test keeps the two declarations equal.
"""

from __future__ import annotations

from typing import Any

import msgspec


class ExportRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One export of the state a cell reads into a run's private directory."""

    dir: str  # the run's private directory (PrivateDir / PortableDir)
    token: str  # proves the kernel sees `dir` (the file `token` there holds it)
    names: list[str]  # the names the cell reads (found in the daemon: cell_names)
    strings: list[str]  # the identifiers in the cell's string constants (cell_names.cell_strings): copied where the
    # kernel holds them, when `by_string` or a notebook function the cell reaches reads the namespace by a name it
    # is given (kernel/dynamic_reads.py); a guess: one that cannot be copied is left out
    by_string: bool  # the cell reads the namespace by a name held in a string (cell_names.DYNAMIC_READ)
    attrs: list[str]  # the attribute names the cell reads (cell_names.cell_attrs): looked for on the library modules
    # and classes of its values, for what an earlier cell put there (kernel/library_attrs.py)
    rebinds: list[str]  # the names it binds without reading them (cell_names.cell_rebinds): copied when their value
    # has a finalizer (kernel/finalizers.rebound)
    skip: list[str]  # a session's names already copied
    tag: int  # a session's export number (state-N.pkl, buf-N-i); 0: a run's one export (state.pkl, buf-i)
    copy_mb: int  # values holding more are shrunk to row subsets first; 0: no limit (nothing shrunk for size)
    max_s: float  # the kernel CPU time the export may take (SandboxOptions.export_seconds)
    watched_max_s: float  # the same where the kernel's shell queue is watched (SandboxOptions.watched_export_seconds)
    miniature: dict[str, Any] | None  # shrink first by these rules (crane.sandbox.scale), or None


def export_args(request: ExportRequest) -> dict[str, Any]:
    """The request as the dict literal the kernel side checks (every field present)."""
    out: dict[str, Any] = msgspec.to_builtins(request)
    return out
