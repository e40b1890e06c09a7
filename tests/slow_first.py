"""The suite's order under xdist (tests/conftest.py's `pytest_collection_modifyitems`): the files whose tests take the
most time run first, so that `--dist worksteal`'s workers do not end on one long test while the others sit idle
(the tail). Only whole files move, in a stable sort: a file's own order (its module-scoped kernels, grouped by
parameter) is kept, and files not listed keep theirs, after the listed ones.

`SECONDS`: what each file cost one worker in a CI run (`pytest --durations=0 --durations-min=1.0`, calls and setups
of 1 s or more summed: the 3.13 CI run of 2026-12-05 at `-n 3`, on a machine loaded about three times CI's usual, so
about three times the usual seconds; the files cut since, by what they saved). Files under 60 s are not listed.
Rough is enough: only the order matters. Re-measure when a file's time changes much: a run with `--durations`
(`make test-python`'s) ends with every file's summed seconds (tests/file_seconds.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Item(Protocol):
    nodeid: str


SECONDS: dict[str, float] = {
    "tests/sandbox/test_export_by_construction.py": 728.0,
    "tests/sandbox/test_transplant_sacred.py": 499.0,
    "tests/sandbox/test_portable_round5.py": 488.0,
    "tests/sandbox/test_session_integrity.py": 403.0,
    "tests/sandbox/test_export_reuse.py": 400.0,
    "tests/sandbox/test_transplant.py": 220.0,
    "tests/sandbox/test_portable.py": 220.0,
    "tests/sandbox/test_portable_library_imports.py": 214.0,
    "tests/agent/test_agent_loop.py": 193.0,
    "tests/rules/test_lib_today.py": 186.0,
    "tests/sandbox/test_transplant_devices.py": 185.0,
    "tests/agent/test_fix_cli_and_bench.py": 177.0,
    "tests/mcp/test_mcp_follow.py": 163.0,
    "tests/sandbox/test_verdict_integrity.py": 156.0,
    "tests/lsp/test_agent.py": 151.0,
    "tests/agent/test_focused_ask.py": 146.0,
    "tests/bench/test_bench.py": 132.0,
    "tests/sandbox/test_transplant_keras_graph.py": 125.0,
    "tests/rules/test_sklearn_input_versions.py": 115.0,
    "tests/sandbox/test_transplant_shrink.py": 114.0,
    "tests/remote/test_cli_remote.py": 113.0,
    "tests/cli/test_precommit_hook.py": 113.0,
    "tests/sandbox/test_portable_frames.py": 106.0,
    "tests/sandbox/test_prewarm.py": 104.0,
    "tests/kernel/test_kernel_pythons.py": 100.0,
    "tests/sandbox/test_portable_guard.py": 99.0,
    "tests/lsp/test_background.py": 91.0,
    "tests/mcp/test_mcp_stdio.py": 90.0,
    "tests/agent/test_fork_sandbox.py": 89.0,
    "tests/sandbox/test_sacred_by_construction.py": 87.0,
    "tests/sandbox/test_transplant_session.py": 79.0,
    "tests/remote/test_transport.py": 78.0,
    "tests/cli/test_fix_offline_forgery.py": 76.0,
    "tests/cli/test_fix_offline.py": 73.0,
    "tests/agent/test_local_model_turns.py": 73.0,
    "tests/cli/test_check_many.py": 67.0,
    "tests/cli/test_check_examples.py": 66.0,
    "tests/cli/test_check_sandbox.py": 60.0,
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
