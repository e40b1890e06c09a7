"""Transplant workers end with their kernel: when the kernel a worker serves ends (shut down, killed) the worker,
idle or running, and its whole process tree (the layered child and what runs in its pid namespace) end too; a
stopped run leaves no process; an idle worker ends by itself after idling. On IPython 8 and 9 kernels (the
worker is the kernel's own interpreter)."""

from __future__ import annotations

import os
import select
import threading
import time
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox.channel import _starttime
from crane.sandbox.transplant import POOL, KernelRef, transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")

LOOP = "import time\nwhile True:\n    time.sleep(0.01)"


def _kernel(tmp_path, kernel_env):
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    conn = kernel.connection
    assert conn.run_cell("import numpy as np\na = np.arange(10)").status == "ok"
    pid = int(conn.evaluate("__import__('os').getpid()"))
    return kernel, KernelRef(pid, _starttime(pid))


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p.name))
        except (OSError, ValueError, IndexError):
            pass
    return out


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _pidfds(pids: list[int]) -> list[int]:
    fds = []
    for p in pids:
        try:
            fds.append(os.pidfd_open(p))
        except OSError:
            pass  # already gone
    return fds


def _all_end(fds: list[int], timeout: float) -> bool:
    """Wait (on the pidfds: readable once the process has ended) until every process has ended."""
    deadline = time.monotonic() + timeout
    left = list(fds)
    while left and time.monotonic() < deadline:
        ready, _, _ = select.select(left, [], [], max(0.0, deadline - time.monotonic()))
        left = [fd for fd in left if fd not in ready]
    for fd in fds:
        os.close(fd)
    return not left


def _busy_tree(kernel: KernelRef, timeout: float = 90.0) -> list[int]:
    """The process tree of the worker running a cell for `kernel`, once its layered child exists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with POOL.lock:
            busy = [w for w in POOL.busy if w.kernel == kernel]
        if busy and _children(busy[0].proc.pid):
            return _tree(busy[0].proc.pid)
        time.sleep(0.05)
    raise AssertionError("no running transplant worker with a layered child")


def _in_thread(fn):
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(v=fn()), daemon=True)
    t.start()
    return t, box


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_stopped_runs_and_a_dead_kernel_leave_no_worker_process(kernel_env, tmp_path):
    kernel, ref = _kernel(tmp_path, kernel_env)
    try:
        conn = kernel.connection
        v = transplant(conn, "a.sum()", 60.0)
        assert v.verdict == "no-crash" and v.mode == "transplant", v
        assert [w.kernel for w in POOL.workers_of(ref)] == [ref]  # the warm one, for this kernel
        # a stop (the user ran a cell, edited it): the run's whole tree ends
        cancel = threading.Event()
        t, box = _in_thread(lambda: transplant(conn, LOOP, 60.0, cancel=cancel))
        fds = _pidfds(_busy_tree(ref))
        cancel.set()
        t.join(30)
        assert box["v"].verdict == "unavailable", box
        assert _all_end(fds, 15), "a stopped run left a process"
        # the kernel ends during a run: the running worker's tree and the idle worker end with it
        t, box = _in_thread(lambda: transplant(conn, LOOP, 120.0))
        fds = _pidfds(_busy_tree(ref))
        kernel.shutdown()
        t.join(30)
        v = box["v"]
        assert v.verdict == "unavailable" and "kernel ended" in (v.reason or ""), v
        assert _all_end(fds, 15), "a worker outlived its kernel"
        assert not POOL.workers_of(ref)
    finally:
        kernel.shutdown()


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_an_idle_worker_ends_after_idling_and_with_its_kernel(kernel_env, tmp_path, monkeypatch):
    kernel, ref = _kernel(tmp_path, kernel_env)
    try:
        use_options(monkeypatch, worker_idle_seconds=3.0)
        assert transplant(kernel.connection, "a.sum()", 60.0).verdict == "no-crash"
        (idle,) = POOL.workers_of(ref)
        assert idle.proc.wait(60) == 0  # it ended by itself after 3 s without a run
        use_options(monkeypatch, worker_idle_seconds=600.0)
        assert transplant(kernel.connection, "a.sum()", 60.0).verdict == "no-crash"
        (idle,) = POOL.workers_of(ref)
        assert idle.alive()
        fds = _pidfds(_tree(idle.proc.pid))
        kernel.shutdown()
        assert _all_end(fds, 15), "an idle worker outlived its kernel"
        assert not POOL.workers_of(ref)
    finally:
        kernel.shutdown()
