"""Issue 45: a copy-path worker ready before it is needed (crane.sandbox.prewarm). Real kernels of both
environments; pandas and polars stand for TensorFlow (whose import takes ~15 s): after the kernel imports a
library, one idle worker of that kernel that imported it exists before any check, started at background
priority; a second call keeps it, a newly imported library refreshes it (still one); the next copied run takes it
warm; it ends with its kernel. The read of the kernel's modules leaves the kernel untouched (crane.kernel.untouched).
None when the machine has less memory available than the floor (an option), none where the runs need no worker
(the OS sandbox forks a kernel without TensorFlow/JAX/CuPy). The remote case: tests/remote/test_prewarm_remote.py.
"""

from __future__ import annotations

import os
import select
import time

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import background, speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.prewarm import prewarm_kernel
from crane.sandbox.transplant import POOL

from ..kernel_envs import KERNEL_ENVS, kernel_python, require_today_python
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")

PORTABLE = SandboxOptions(confinement="portable")
READY_S = 240.0  # a generous bound on a worker's imports on a loaded machine (its ready file ends the wait)


def _ready(worker, timeout: float = READY_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.ready():
            return True
        if not worker.alive():
            return False
        time.sleep(0.05)
    return False


def _workers_of_pid(pid: int) -> list:
    """The pool's workers (idle or running) serving the kernel whose process is `pid`."""
    with POOL.lock:
        return [w for (_, k), w in POOL.idle.items() if k is not None and k.pid == pid] + [
            w for w in POOL.busy if w.kernel is not None and w.kernel.pid == pid]


def _pid(conn) -> int:
    return int(conn.evaluate("__import__('os').getpid()"))


def _ended(pid: int, timeout: float) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return True  # already gone
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.fixture(params=KERNEL_ENVS)
def kernel(request, tmp_path):
    k = start_kernel(tmp_path, python=kernel_python(request.param))
    yield k
    k.shutdown()


def test_a_warm_worker_with_the_kernels_imports_exists_before_any_check(kernel):
    conn = kernel.connection
    assert conn.run_cell("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})").status == "ok"
    with Untouched(conn) as watch:
        first = prewarm_kernel(conn, PORTABLE)
    assert watch.unchanged, (watch.changes(), watch.outputs, watch.hits)
    assert first.started and "pandas" in first.preload and first.kernel is not None, first
    workers = POOL.workers_of(first.kernel)
    assert [w.proc.pid for w in workers] == [first.pid]  # one per kernel
    worker = workers[0]
    assert "pandas" in POOL.preloads[worker]
    assert background.priority(worker.proc.pid) == (background.LOW_NICE, 3 << 13)  # nice 19, idle I/O class
    assert _ready(worker), worker.log_tail()
    assert worker.alive()

    again = prewarm_kernel(conn, PORTABLE)  # nothing new imported: the worker is kept
    assert not again.started and POOL.workers_of(first.kernel) == [worker], again

    v = speculate(conn, "total = df.a.sum()\nassert total == 6", 60.0, sandbox=PORTABLE)
    assert v.verdict == "no-crash" and v.transplant is not None and v.transplant.warm, v
    assert v.pid == first.pid  # the prewarmed worker took the run
    assert "warm" in v.how()  # the verdict's text says so


def test_a_new_library_refreshes_the_worker_and_it_ends_with_its_kernel(kernel):
    conn = kernel.connection
    assert conn.run_cell("import numpy as np").status == "ok"
    first = prewarm_kernel(conn, PORTABLE)
    assert first.started and first.kernel is not None, first
    assert conn.run_cell("import pandas as pd").status == "ok"
    with Untouched(conn) as watch:
        second = prewarm_kernel(conn, PORTABLE)
    assert watch.unchanged, (watch.changes(), watch.outputs, watch.hits)
    assert second.started and "pandas" in second.preload and second.pid != first.pid, second
    assert first.pid is not None and second.pid is not None
    assert [w.proc.pid for w in POOL.workers_of(first.kernel)] == [second.pid]  # still one per kernel
    assert _ended(first.pid, 30), "the replaced worker still runs"
    kernel.shutdown()
    assert _ended(second.pid, 30), "the worker outlived its kernel"
    assert POOL.workers_of(first.kernel) == []


def test_no_worker_when_the_machine_is_short_of_memory(kernel):
    conn = kernel.connection
    assert conn.run_cell("import pandas as pd").status == "ok"
    floor = SandboxOptions(confinement="portable", prewarm_free_mb=1 << 22)  # 4 TiB kept free: never met
    out = prewarm_kernel(conn, floor)
    assert not out.started and "MiB available" in out.why, out
    assert _workers_of_pid(_pid(conn)) == []


def test_no_worker_where_the_os_sandbox_forks_the_kernel(kernel):
    conn = kernel.connection
    assert conn.run_cell("import pandas as pd").status == "ok"
    out = prewarm_kernel(conn, SandboxOptions(confinement="os"))
    assert not out.started and "forks" in out.why, out
    assert _workers_of_pid(_pid(conn)) == []


def test_the_os_sandbox_gets_a_worker_once_jax_is_loaded(tmp_path):
    """JAX (today's environment) makes the kernel unforkable: the OS sandbox's runs are copied, so its worker is
    prepared, keyed by the kernel's pid and start time as those runs take it."""
    k = start_kernel(tmp_path, python=require_today_python())
    try:
        conn = k.connection
        assert conn.run_cell("import jax.numpy as jnp\nx = jnp.arange(3)", timeout=180).status == "ok"
        out = prewarm_kernel(conn, SandboxOptions(confinement="os"))
        assert out.started and "jax" in out.preload, out
        worker = POOL.workers_of(out.kernel)[0]  # type: ignore[arg-type]
        assert _ready(worker), worker.log_tail()
        v = speculate(conn, "y = x + 1", 120.0, sandbox=SandboxOptions(confinement="os"))
        assert v.verdict == "no-crash" and v.mode == "transplant" and v.transplant and v.transplant.warm, v
        assert v.pid == out.pid
    finally:
        k.shutdown()


def test_no_refill_after_a_run_when_the_machine_is_short_of_memory(kernel, monkeypatch):
    """The pool's refill after a run is a background worker too: none below the same floor (with it met, the run
    leaves one: tests/sandbox/test_transplant_lifetime.py). The options installed as an entry point does."""
    conn = kernel.connection
    assert conn.run_cell("import pandas as pd\ndf = pd.DataFrame({'a': [1]})").status == "ok"
    floor = use_options(monkeypatch, confinement="portable", prewarm_free_mb=1 << 22)
    v = speculate(conn, "df.a.sum()", 60.0, sandbox=floor)
    assert v.verdict == "no-crash" and v.transplant is not None and not v.transplant.warm, v
    assert _workers_of_pid(_pid(conn)) == []
