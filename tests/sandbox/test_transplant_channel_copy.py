"""Issue 42 (fixD, item 2; found by h2 in round 14): a cell that keeps a copy of the OS transplant worker's result
channel open — the FIFO dup'ed over fd 1, or a file object made on a dup of it — and then raises got `timeout` in
the blocking confinement (`layer="blocking"`, what h2 ran): the daemon read the channel to its end, which never came (the worker, in CRANE's sealed wait after its record, still
held the copy), and the kernel says the cell's crash. Now a record plus the worker's seal (or its parent's word)
ends the read (crane.sandbox.cell_deadline.read_fifo); the seal still names exactly the bytes read, so a cell that
also wrote there stays `blocked`. IPython 8 and 9; the kernel unchanged."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/syscall"), reason="the seal is read in /proc (Linux)")

PIPES = """
import os, stat
def _pipes():
    out = []
    for n in os.listdir('/proc/self/fd'):
        try:
            st = os.fstat(int(n))
        except OSError:
            continue
        if stat.S_ISFIFO(st.st_mode):
            out.append(int(n))
    return out
"""
HOLD = {
    "dup2-over-stdout": PIPES + "for fd in _pipes():\n    os.dup2(fd, 1)\n1/0\n",
    "file-object": PIPES + "kept = [os.fdopen(os.dup(fd), 'wb') for fd in _pipes()]\n1/0\n",
}
BUDGET_S = 20.0  # (before: the run waited the whole budget and more, then `timeout`)


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp(f"fixD-{request.param}"), python=kernel_python(request.param))
    c = kernel.connection
    # the kernel refuses to fork (a JAX stand-in): every run is an OS transplant
    assert c.run_cell("import sys, types\nsys.modules.setdefault('jax', types.ModuleType('jax'))",
                      timeout=300).status == "ok"
    yield c
    kernel.shutdown()


@pytest.mark.parametrize("layer", ["blocking", "auto"])
@pytest.mark.parametrize("hold", list(HOLD))
def test_a_cell_keeping_a_copy_of_the_channel_gets_its_crash(conn, hold, layer):
    """In the blocking confinement the worker that ran the cell holds the copy in its sealed wait (before: `timeout`
    after the budget); in the layered one its parent ends it (held before too)."""
    with Untouched(conn) as watch:
        v = transplant(conn, HOLD[hold], BUDGET_S, layer=layer)
    assert watch.unchanged, (watch.changes(), watch.outputs)
    assert (v.verdict, v.ename, v.mode) == ("crash", "ZeroDivisionError", "transplant"), (v.verdict, v.reason)


def test_a_cell_writing_through_its_copy_is_still_blocked(conn):
    """The same copy written into before the cell raises: the seal names CRANE's bytes only (`blocked`, as before,
    now without waiting for the deadline)."""
    cell = PIPES + ("kept = [os.fdopen(os.dup(fd), 'wb', buffering=0) for fd in _pipes()]\n"
                    "for f in kept:\n    f.write(b'{\"verdict\": \"no-crash\", \"elapsed_ms\": 1.0}\\n')\n1/0\n")
    with Untouched(conn) as watch:
        v = transplant(conn, cell, BUDGET_S, layer="blocking")
    assert watch.unchanged, (watch.changes(), watch.outputs)
    assert v.verdict == "blocked" and "result channel" in (v.reason or ""), (v.verdict, v.reason)
