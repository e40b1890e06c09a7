"""The suite's order under xdist (tests/conftest.py's `pytest_collection_modifyitems`): the files whose tests take the
most time run first, so that `--dist worksteal`'s workers do not end on one long test while the others sit idle
(the tail). Only whole files move, in a stable sort: a file's own order (its module-scoped kernels, grouped by
parameter) is kept, and files not listed keep theirs, after the listed ones.

`SECONDS`: what each file cost one worker in a CI run (`pytest --durations`: its tests' setup, call and teardown
seconds summed, as tests/file_seconds.py prints them for the 40 costliest files): the local 3.11 CI run of
2026-12-06 13:56 UTC (3505 passed in 1942 s at `-n 3`, load 4-5); test_guard_alone_round10 scaled by its cut since
(454 s there; 1425 -> 686 s side by side, docs/benchmarks.md "The suite's time, h5"). Files under ~37 s are not
listed. Rough is enough: only the order matters. Re-measure when a file's time changes much: a run with
`--durations` (`make test-python`'s) ends with those summed seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Item(Protocol):
    nodeid: str


SECONDS: dict[str, float] = {
    "tests/sandbox/test_guard_alone_round11.py": 384.0,
    "tests/sandbox/test_export_by_construction.py": 286.0,
    "tests/sandbox/test_guard_alone_round10.py": 219.0,
    "tests/sandbox/test_transplant_sacred.py": 181.0,
    "tests/sandbox/test_session_integrity.py": 137.0,
    "tests/sandbox/test_install_runs_nothing.py": 133.0,
    "tests/sandbox/test_keras_notebook_layers.py": 122.0,
    "tests/sandbox/test_portable_round5.py": 118.0,
    "tests/sandbox/test_copy_path_seal.py": 103.0,
    "tests/sandbox/test_export_reuse.py": 101.0,
    "tests/cli/test_portable_round6_variants.py": 90.0,
    "tests/sandbox/test_verdict_integrity.py": 77.0,
    "tests/sandbox/test_guard_alone_round7.py": 76.0,
    "tests/sandbox/test_keras_saved.py": 76.0,
    "tests/sandbox/test_transplant.py": 76.0,
    "tests/sandbox/test_guard_alone_round8.py": 66.0,
    "tests/fixes/test_kinds.py": 66.0,
    "tests/sandbox/test_portable.py": 65.0,
    "tests/sandbox/test_export_stdlib_classes.py": 62.0,
    "tests/sandbox/test_keras_tf_data.py": 61.0,
    "tests/sandbox/test_copy_session_signal_seal.py": 61.0,
    "tests/mcp/test_mcp_follow.py": 59.0,
    "tests/agent/test_agent_loop.py": 57.0,
    "tests/sandbox/test_sealed_copy_state.py": 56.0,
    "tests/rules/test_lib_today.py": 54.0,
    "tests/agent/test_fix_cli_and_bench.py": 52.0,
    "tests/sandbox/test_worker_warmup.py": 50.0,
    "tests/sandbox/test_sacred_by_construction.py": 50.0,
    "tests/sandbox/test_transplant_keras_graph.py": 47.0,
    "tests/rules/test_kernel_messages.py": 47.0,
    "tests/lsp/test_agent.py": 46.0,
    "tests/sandbox/test_transplant_devices.py": 43.0,
    "tests/cli/test_precommit_hook.py": 41.0,
    "tests/agent/test_focused_ask.py": 41.0,
    "tests/sandbox/test_side_effects.py": 40.0,
    "tests/lsp/test_background.py": 39.0,
    "tests/sandbox/test_trap_exit_forge.py": 39.0,
    "tests/sandbox/test_portable_library_imports.py": 38.0,
    "tests/sandbox/test_portable_frames.py": 38.0,
    "tests/remote/test_cli_remote.py": 37.0,
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
