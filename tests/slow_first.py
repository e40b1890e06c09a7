"""The suite's order under xdist (tests/conftest.py's `pytest_collection_modifyitems`): the files whose tests take the
most time run first, so that `--dist worksteal`'s workers do not end on one long test while the others sit idle
(the tail). Only whole files move, in a stable sort: a file's own order (its module-scoped kernels, grouped by
parameter) is kept, and files not listed keep theirs, after the listed ones.

`SECONDS`: what each file cost one worker in a CI run (`pytest --durations=0 --durations-min=1.0`, calls and setups
summed; 3.13, the full suite at `-n 3`). Rough is enough: only the order matters. Re-measure when a file's time
changes much.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Item(Protocol):
    nodeid: str


SECONDS: dict[str, float] = {
    "tests/sandbox/test_transplant_sacred.py": 300.0,
    "tests/sandbox/test_export_reuse.py": 250.0,
    "tests/sandbox/test_portable_library_imports.py": 60.0,
    "tests/sandbox/test_portable.py": 120.0,
    "tests/sandbox/test_transplant.py": 100.0,
    "tests/sandbox/test_export_by_construction.py": 150.0,
    "tests/mcp/test_mcp_follow.py": 60.0,
    "tests/bench/test_bench.py": 45.0,
    "tests/agent/test_fix_cli_and_bench.py": 70.0,
    "tests/lsp/test_background.py": 50.0,
}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def slow_first(items: Sequence[_Item]) -> list[_Item]:
    """`items` with the listed files first, the costliest first; every file's items in their own order."""
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(file_of(item.nodeid), i)

    def key(item: _Item) -> tuple[float, int]:
        path = file_of(item.nodeid)
        return (-SECONDS.get(path, 0.0), first[path])

    return sorted(items, key=key)
