"""The suite's order under xdist (tests/conftest.py's `pytest_collection_modifyitems`): the files whose tests take the
most time run first, so that `--dist worksteal`'s workers do not end on one long test while the others sit idle
(the tail). Only whole files move, in a stable sort: a file's own order (its module-scoped kernels, grouped by
parameter) is kept, and files not listed keep theirs, after the listed ones.

`SECONDS`: what each file cost one worker in a CI run (`pytest --durations`: its tests' setup, call and teardown
seconds summed, as tests/file_seconds.py prints them for the 40 costliest files): the lead's CI run of 2026-12-06
16:26 UTC (3777 passed in 3104 s at `-n 3`, at a high load: the numbers are ~1.6x the 13:56 run's); five files
scaled by their cut since, side by side (docs/benchmarks.md "The suite's time, h8": test_guard_alone_round12,
test_keras_notebook_layers, test_transplant_vm_floor, test_portable_library_imports, test_transplant_keras_graph);
files listed before that were not among that run's 40 kept at their earlier numbers, at most 62 s (under its 40th,
62.5 s). Rough is enough: only the order matters. Re-measure when a file's time changes much: a run with
`--durations` (`make test-python`'s) ends with those summed seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Item(Protocol):
    nodeid: str


SECONDS: dict[str, float] = {
    "tests/sandbox/test_guard_alone_round10.py": 488.2,
    "tests/sandbox/test_guard_alone_round11.py": 372.4,
    "tests/sandbox/test_export_by_construction.py": 365.1,
    "tests/sandbox/test_transplant_sacred.py": 364.3,
    "tests/sandbox/test_session_integrity.py": 304.8,
    "tests/sandbox/test_portable_round5.py": 300.3,
    "tests/sandbox/test_install_runs_nothing.py": 225.0,
    "tests/sandbox/test_guard_alone_round12.py": 192.1,
    "tests/sandbox/test_keras_notebook_layers.py": 147.0,
    "tests/sandbox/test_keras_saved.py": 138.0,
    "tests/sandbox/test_guard_alone_round7.py": 122.4,
    "tests/cli/test_fix_offline_likely.py": 120.0,  # (h5: 180 + 30 s here at load 18, one worker)
    "tests/agent/test_focused_ask.py": 114.0,
    "tests/sandbox/test_copy_path_seal.py": 108.1,
    "tests/sandbox/test_portable_exit.py": 103.9,
    "tests/sandbox/test_copy_session_worker_end.py": 103.1,
    "tests/sandbox/test_seal_call.py": 90.1,
    "tests/mcp/test_mcp_fixes_likely.py": 90.0,  # (h5: 114 s here at load 18)
    "tests/sandbox/test_export_reuse.py": 88.3,
    "tests/sandbox/test_guard_alone_round9.py": 79.7,
    "tests/sandbox/test_transplant.py": 79.3,
    "tests/sandbox/test_sacred_by_construction.py": 79.2,
    "tests/cli/test_fix_offline_forgery.py": 78.9,
    "tests/sandbox/test_sealed_copy_state.py": 77.7,
    "tests/cli/test_precommit_hook.py": 76.6,
    "tests/sandbox/test_portable_frames.py": 76.0,
    "tests/sandbox/test_guard_alone_round8.py": 75.3,
    "tests/bench/test_bench.py": 74.5,
    "tests/sandbox/test_verdict_integrity.py": 73.9,
    "tests/sandbox/test_side_effects.py": 71.2,
    "tests/sandbox/test_worker_warmup.py": 70.6,
    "tests/lsp/test_agent.py": 69.5,
    "tests/cli/test_portable_round6_variants.py": 68.7,
    "tests/rules/test_sklearn_input_versions.py": 66.9,
    "tests/sandbox/test_keras_seeds_trainable.py": 66.3,
    "tests/sandbox/test_session_answer_seal.py": 64.6,
    "tests/sandbox/test_transplant_devices.py": 64.2,
    "tests/mcp/test_mcp_stdio.py": 63.2,
    "tests/agent/test_fork_sandbox.py": 62.5,
    "tests/fixes/test_kinds.py": 62.0,
    "tests/sandbox/test_export_stdlib_classes.py": 62.0,
    "tests/sandbox/test_portable.py": 62.0,
    "tests/sandbox/test_copy_session_signal_seal.py": 61.0,
    "tests/sandbox/test_keras_tf_data.py": 61.0,
    "tests/mcp/test_mcp_follow.py": 59.0,
    "tests/agent/test_agent_loop.py": 57.0,
    "tests/rules/test_lib_today.py": 54.0,
    "tests/agent/test_fix_cli_and_bench.py": 52.0,
    "tests/rules/test_kernel_messages.py": 47.0,
    "tests/sandbox/test_transplant_keras_graph.py": 45.7,
    "tests/sandbox/test_transplant_vm_floor.py": 41.5,
    "tests/lsp/test_background.py": 39.0,
    "tests/sandbox/test_trap_exit_forge.py": 39.0,
    "tests/remote/test_cli_remote.py": 37.0,
    "tests/sandbox/test_portable_library_imports.py": 30.7,
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
