"""Heads fork the next run's process ahead (worker/head.py, `_fork_ahead`): once a warm head has made ready for its
next run, the process that run will use is already forked and waits for its request, so the fork and the first walk
of CRANE's pages are off the verdict's way. The next verdict runs in that very process; where it is gone (killed
meanwhile), the head forks one as before and the verdict is the same. Real kernels (IPython 8 and 9), the real
daemon-side transplant, no mocks."""

from __future__ import annotations

import os
import signal

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.session import open_session
from crane.sandbox.transplant import POOL
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options
from .head_children import forked_ahead

pytestmark = pytest.mark.skipif(linux_layer_available() is not None, reason="heads serve runs under Landlock")


def _head_of(conn) -> int:
    exe = conn.evaluate("__import__('sys').executable")
    with POOL.lock:
        heads = [w for k, w in POOL.idle.items() if k[0] == exe]
    assert len(heads) == 1, heads
    return heads[0].proc.pid


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_next_run_goes_to_the_processforked_ahead(kernel_env, tmp_path, monkeypatch):
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell("import os\nbase = 41").status == "ok"
        before = conn.evaluate("(base, sorted(k for k in globals() if not k.startswith('_')))")
        first = speculate(conn, "leak = base + 1\nprint(os.getpid())\nleak", 60.0, sandbox=opts)
        assert (first.verdict, first.mode) == ("no-crash", "portable"), first
        head = _head_of(conn)
        ahead = forked_ahead(head, (int(first.stdout.split()[0]),))
        second = speculate(conn, "print(os.getpid(), 'leak' in globals())\nbase + 1", 60.0, sandbox=opts)
        assert (second.verdict, second.mode, second.pid) == ("no-crash", "portable", head), second
        assert second.transplant is not None and "landlock" in second.transplant.layers, second.transplant
        assert second.stdout.split("\n")[0] == f"{ahead} False", second.stdout  # that process ran it, state fresh
        gone = forked_ahead(head, (ahead,))  # the next one, killed before its request: the head forks another
        assert gone != ahead
        os.kill(gone, signal.SIGKILL)
        third = speculate(conn, "print(os.getpid())\nbase + 2", 60.0, sandbox=opts)
        assert (third.verdict, third.pid) == ("no-crash", head), third
        assert third.stdout.split("\n")[0] not in ("", str(gone)), third.stdout
        crash = speculate(conn, "undefined_name", 60.0, sandbox=opts)  # and the one after: forked ahead again
        assert (crash.verdict, crash.ename, crash.pid) == ("crash", "NameError", head), crash
        assert conn.evaluate("(base, sorted(k for k in globals() if not k.startswith('_')))") == before
    finally:
        kernel.shutdown()
        POOL.shutdown()


def _started(pid: int) -> str | None:
    """The process's start time (its identity with its pid: a pid may be reused), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_head_serving_a_session_itself_ends_the_processforked_ahead(kernel_env, tmp_path, monkeypatch):
    """A warm head that forked the next run's process ahead, then taken by a portable session (a request that is
    not a forked run): the process forked ahead (unconfined, waiting for a request) is ended before the head serves
    the session. Before, it stayed alive beside the session for the head's life."""
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell("base = 41").status == "ok"
        first = speculate(conn, "import os\nprint(os.getpid())\nbase + 1", 60.0, sandbox=opts)
        assert (first.verdict, first.mode) == ("no-crash", "portable"), first
        head = _head_of(conn)
        ahead = forked_ahead(head, (int(first.stdout.split()[0]),))
        born = _started(ahead)
        assert born is not None
        with open_session(conn, budget_s=30.0, sandbox=opts) as sb:
            v = sb.run("import os\npid = os.getpid()")
            assert v.verdict == "no-crash", v
            assert sb.inspect("pid") == repr(head)  # (the pooled head serves the session itself)
            # the session's first reply came after the head began serving it: the process forked ahead is gone
            assert _started(ahead) != born, f"the process forked ahead ({ahead}) outlived the head serving a session"
            v = sb.run("{}['k']")
            assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    finally:
        kernel.shutdown()
        POOL.shutdown()
