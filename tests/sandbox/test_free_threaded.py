"""A kernel whose Python runs without the GIL (a free-threaded 3.13t+ build with the GIL off) gets no sandbox run:
`unavailable`, naming it, from the fork path, the copy (transplant) path, the portable sandbox and a session.
This machine has no free-threaded interpreter (tests/kernel_envs.py: SUPPORTED_VERSIONS, envs/find_python.sh), and
CRANE never calls a `sys._is_gil_enabled` the notebook replaced (it binds the interpreter's own at install, and one
replaced before the install is named, never called), so a kernel cannot be made to answer False end to end: the
answer itself is checked on kernel/shield.py's function, and the kernels below take the same way out (the fork
path's `unavailable`, the session's refusal) through a replaced function on a build whose ABI flags say
free-threaded (`sys.abiflags` with "t"), counting that the notebook's function is never called."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxError
from crane.sandbox.kernel import shield
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session

from ..kernel_envs import python_kernel

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels")

FREE_THREADED = "free-threaded Python with the GIL disabled"


def test_free_threaded_names_a_kernel_without_the_gil(monkeypatch):
    assert shield.free_threaded() is None  # this interpreter has the GIL (or no such switch)
    monkeypatch.setattr(shield, "_SH_GIL_OWN", True)
    monkeypatch.setattr(shield, "_IS_GIL_ENABLED", lambda: False)
    assert FREE_THREADED in (shield.free_threaded() or "")
    monkeypatch.setattr(shield, "_IS_GIL_ENABLED", lambda: True)  # a free-threaded build that re-enabled it
    assert shield.free_threaded() is None


REPLACED = ("import sys\nsys.calls = 0\n"
            "def _is_gil_enabled():\n    sys.calls += 1\n    return False\n"
            "sys._is_gil_enabled = _is_gil_enabled\nx = [1, 2]")


@pytest.mark.parametrize("confinement", ["os", "portable"])
@pytest.mark.parametrize("build", ["free-threaded", "with the GIL"])
def test_a_replaced_gil_switch_is_never_called_and_a_free_threaded_build_gets_no_run(tmp_path, confinement, build):
    kernel = start_kernel(tmp_path, python=python_kernel("3.13"))
    try:
        conn = kernel.connection
        flags = "sys.abiflags = sys.abiflags + 't'\n" if build == "free-threaded" else ""
        assert conn.run_cell("import sys\n" + flags + REPLACED).status == "ok"
        options = SandboxOptions(confinement=confinement)
        with Untouched(conn) as watch:
            v = speculate(conn, "y = x[5]", 30.0, sandbox=options)
            if confinement == "portable" or build == "free-threaded":
                # the copy's export refuses to install over a replaced function; the fork path, on a build that
                # may run without the GIL, cannot ask: both name it
                assert v.verdict == "unavailable" and "sys._is_gil_enabled" in (v.reason or ""), v
                with pytest.raises(SandboxError, match="sys._is_gil_enabled"):
                    open_session(conn, budget_s=10, sandbox=options).close()
            else:  # a build with the GIL always on: the fork runs, without asking the notebook's function
                assert v.verdict == "crash" and v.ename == "IndexError", v
        assert watch.unchanged, (watch.outputs, watch.changes(), watch.hits)
        calls = conn.run_cell("print(sys.calls)")
        assert calls.stdout.strip() == "0", calls
    finally:
        kernel.shutdown()
