"""A kernel whose Python runs without the GIL (a free-threaded 3.13t+ build with the GIL off) gets no sandbox run:
`unavailable`, naming it, from the fork path, the copy (transplant) path, the portable sandbox and a session.
This machine has no free-threaded interpreter (tests/kernel_envs.py: SUPPORTED_VERSIONS, envs/find_python.sh), so
a real kernel is made to answer `sys._is_gil_enabled()` False before CRANE's kernel-side module is installed (it
binds the function then, like every name it uses), which is what a free-threaded kernel answers."""

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
    monkeypatch.setattr(shield, "_IS_GIL_ENABLED", lambda: False)
    assert FREE_THREADED in (shield.free_threaded() or "")
    monkeypatch.setattr(shield, "_IS_GIL_ENABLED", lambda: True)  # a free-threaded build that re-enabled it
    assert shield.free_threaded() is None


@pytest.mark.parametrize("confinement", ["os", "portable"])
def test_a_kernel_without_the_gil_gets_unavailable_runs_and_no_session(tmp_path, confinement):
    kernel = start_kernel(tmp_path, python=python_kernel("3.13"))
    try:
        conn = kernel.connection
        assert conn.run_cell("import sys\nsys._is_gil_enabled = lambda: False\nx = [1, 2]").status == "ok"
        options = SandboxOptions(confinement=confinement)
        with Untouched(conn) as watch:
            v = speculate(conn, "y = x[5]", 30.0, sandbox=options)
            assert v.verdict == "unavailable" and FREE_THREADED in (v.reason or ""), v
            with pytest.raises(SandboxError, match=FREE_THREADED):
                open_session(conn, budget_s=10, sandbox=options).close()
        assert watch.unchanged, (watch.outputs, watch.changes(), watch.hits)
    finally:
        kernel.shutdown()
