"""Issue 42: the fork sandbox finds the kernel's shell without calling anything the notebook can replace. Before, its
start (in the user's kernel, before the fork) ran `from IPython import get_ipython; get_ipython()`: a notebook that
wrapped `IPython.get_ipython` had its function run in the kernel at every speculative run, and one whose wrapper
raised made every run `unavailable` ("not an IPython kernel"). Now the shell is `InteractiveShell._instance` read
from the class's own `__dict__` (kernel_common/ipython_shell.py)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate

from ..wrapped_get_ipython import UNWRAP, WRAP


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")
def test_the_fork_calls_no_replaced_get_ipython(tmp_path):
    with start_kernel(tmp_path) as kernel:
        conn = kernel.connection
        assert conn.run_cell(WRAP, timeout=60).status == "ok"
        try:
            crash = speculate(conn, "x = [1, 2]\ny = x[5]\n")
            clean = speculate(conn, "x = [1, 2]\ny = x[1]\n")
        finally:
            calls = conn.evaluate("list(CALLS)")
            assert conn.run_cell(UNWRAP, timeout=60).status == "ok"
        assert calls == [], calls
        assert crash.verdict == "crash" and crash.ename == "IndexError", crash
        assert clean.verdict == "no-crash", clean
