"""Portable workers end with their kernel: when the kernel's process dies, the daemon (crane.sandbox.process_watch,
psutil on every platform) ends the workers that serve it, the idle warm one and a session's running one alike. On
IPython 8 and 9 kernels (the worker is the kernel's own interpreter); the kernel is killed with SIGKILL and left
unreaped (a zombie) until the test ends, as when the process that started it does not wait for it at once."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.process_watch import ProcessRef
from crane.sandbox.session import open_session
from crane.sandbox.transplant import POOL
from crane.sandbox.transplant_session import TransplantSession

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="kills the kernel with SIGKILL")

END_S = 60.0  # generous: the watch looks every second


def _workers() -> set:
    with POOL.lock:
        return set(POOL.idle.values()) | set(POOL.busy)


def _ended(proc: subprocess.Popen) -> bool:
    try:
        proc.wait(END_S)
        return True
    except subprocess.TimeoutExpired:
        return False


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_portable_workers_end_when_their_kernel_dies(kernel_env, tmp_path, monkeypatch):
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    session = None
    try:
        conn = kernel.connection
        assert conn.run_cell("import numpy as np\na = np.arange(10)").status == "ok"
        pid = int(conn.evaluate("__import__('os').getpid()"))
        before = _workers()
        v = speculate(conn, "a.sum()", 60.0, sandbox=opts)
        assert (v.verdict, v.mode) == ("no-crash", "portable"), v
        (first,) = _workers() - before  # the warm worker the run left for this kernel
        session = open_session(conn, budget_s=30.0, sandbox=opts)
        assert session.run("b = a + 1").verdict == "no-crash"
        assert isinstance(session, TransplantSession)
        running = session.worker  # the session's worker (the warm one it took)
        assert running is not None
        (idle,) = _workers() - before - {running}  # the warm one made for the next run
        assert running is first and running.alive() and idle.alive()

        os.kill(pid, signal.SIGKILL)
        assert _ended(idle.proc), "an idle portable worker outlived its kernel"
        assert _ended(running.proc), "a session's portable worker outlived its kernel"
        assert isinstance(idle.kernel, ProcessRef) and idle.kernel.pid == pid
        assert idle.kernel_ended and running.kernel_ended
        session.close()  # the session lets go of its (ended) worker: none is left for the dead kernel
        assert not POOL.workers_of(idle.kernel)
    finally:
        if session is not None:
            session.close()
        kernel.shutdown()
