"""Pools and executors an earlier cell made, used by the cell in a forked process (kernel/fork_pools.py).

The fork has none of the kernel's threads: a `ThreadPoolExecutor` counted the kernel's idle worker and started
none (`submit(...).result(timeout=...)`: a certain false TimeoutError), `multiprocessing`'s `Pool`/`ThreadPool` and
a `ProcessPoolExecutor` had no handler or manager thread (`pool.map`: a false timeout). Now each running pool the
cell names gets a working twin with its settings before the cell runs (layered mode: all four; the blocking
confinement, which refuses processes and a ThreadPool's semaphore: the thread executor, the others "blocked",
saying why). The kernel's pools are untouched and serve the same cells after. IPython 8 and 9 kernels."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxSession

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

HISTORY = """
from concurrent.futures import ThreadPoolExecutor, ProcessPoolExecutor
import multiprocessing as mp, multiprocessing.pool as mpp
ex = ThreadPoolExecutor(2)
assert ex.submit(abs, -1).result() == 1
tp = mpp.ThreadPool(2)
assert tp.apply(abs, (-1,)) == 1
pool = mp.Pool(2)
assert pool.map(abs, [-1]) == [1]
ppe = ProcessPoolExecutor(2)
assert ppe.submit(abs, -1).result() == 1
"""
CELLS = {
    "thread-executor": "assert ex.submit(abs, -2).result(timeout=20) == 2",
    "thread-pool": "assert tp.apply_async(abs, (-2,)).get(timeout=20) == 2",
    "process-pool": "assert pool.map(abs, [-1, -2]) == [1, 2]",
    "process-executor": "assert ppe.submit(abs, -2).result(timeout=20) == 2",
}
CRASH = "ex.submit(int, 'x').result(timeout=20)"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp(f"pools-{request.param}"), python=kernel_python(request.param))
    c = kernel.connection
    run = c.run_cell(HISTORY, timeout=120)
    assert run.status == "ok", run
    yield c
    c.run_cell("ex.shutdown(); tp.close(); pool.close(); ppe.shutdown()", timeout=60)
    kernel.shutdown()


def _speculate(conn, source: str, layer: str):
    with Untouched(conn) as watch:
        v = speculate(conn, source, 60.0, layer=layer)
    assert watch.unchanged, (watch.changes(), v)
    return v


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_a_pool_an_earlier_cell_made_works_in_the_fork(conn, cell):
    v = _speculate(conn, CELLS[cell], "layered")
    assert (v.mode, v.verdict, v.ename, v.certain) == ("layered", "no-crash", None, True), v


def test_a_crash_in_the_pools_task_is_the_kernels(conn):
    v = _speculate(conn, CRASH, "layered")
    assert (v.verdict, v.ename, v.certain) == ("crash", "ValueError", True), v


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_under_the_blocking_confinement_a_pool_it_cannot_make_is_blocked(conn, cell):
    v = _speculate(conn, CELLS[cell], "blocking")
    assert v.mode == "blocking", v
    if cell == "thread-executor":
        assert (v.verdict, v.certain) == ("no-crash", True), v
    else:  # (never a timeout or a certain TimeoutError: the sandbox says it could not run it)
        assert v.verdict == "blocked", v
        if cell != "process-executor":  # (its twin needs no process: the cell's own submit is refused)
            assert f"`{cell.replace('thread-pool', 'tp').replace('process-pool', 'pool')}`" in (v.reason or ""), v


def test_a_fork_sessions_command_uses_the_thread_executor(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=60.0) as sb:
            first = sb.run(CELLS["thread-executor"])
            second = sb.run("assert list(ex.map(abs, [-3, -4])) == [3, 4]")
    assert watch.unchanged, watch.changes()
    assert (first.verdict, first.certain) == ("no-crash", True), first
    assert (second.verdict, second.certain) == ("no-crash", True), second


def test_the_kernels_pools_serve_the_same_cells(conn):
    for source in CELLS.values():
        run = conn.run_cell(source, timeout=60)
        assert run.status == "ok", (source, run)
    assert conn.run_cell(CRASH, timeout=60).ename == "ValueError"
