"""Issue 42: identifying a kernel (at attach, in discovery, after every other client's request: lsp/kernel_attach
and kernel/identity.py) reads no name of the notebook's. Before, its `user_expressions` called `globals()`,
`__import__('os').getpid()` and `get_ipython().execution_count` in the notebook's namespace: a notebook that
defined any of them had its own function run by CRANE, and its trace function saw the request's frames. The identity
is still right (notebook path, pid, the count the next cell gets), a value that is not an exact str is not taken
(its `__repr__` never runs), and the kernel is unchanged."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.lsp.kernel_attach import identify
from crane.probe.collect import ProbeClient

from ..kernel_envs import KERNEL_ENVS, kernel_python

SETUP = r"""
import builtins, os, sys
CALLS = []
_real = (builtins.__import__, get_ipython, builtins.globals)
def __import__(*a, **k):
    CALLS.append('__import__')
    return _real[0](*a, **k)
def get_ipython():
    CALLS.append('get_ipython')
    return _real[1]()
def globals():
    CALLS.append('globals')
    return _real[2]()
_real_getpid = os.getpid
def _getpid():  # (the kernel's own code calls it too)
    if _in_request(sys._getframe(1)):
        CALLS.append('os.getpid')
    return _real_getpid()
os.getpid = _getpid
def _in_request(frame):  # a frame under IPython's evaluation of a request's user_expressions
    while frame is not None:
        if frame.f_code.co_name == 'user_expressions':
            return True
        frame = frame.f_back
    return False
def _tracer(frame, event, arg):  # a hook of the notebook's that would see the request's frames (below its top level)
    code = frame.f_code
    if event == 'call' and (code.co_filename == '<string>' and code.co_name != '<module>'
                            or code.co_filename.startswith('<crane')) and _in_request(frame.f_back):
        CALLS.append('trace ' + frame.f_code.co_filename + ' ' + frame.f_code.co_name)
    return None
"""
RESTORE = "sys.settrace(None)\nos.getpid = _real_getpid\nget_ipython = _real[1]\ndel __import__, globals"


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_identifying_reads_no_name_of_the_notebooks(tmp_path, kernel_env):
    with start_kernel(tmp_path, python=kernel_python(kernel_env)) as kernel:
        conn = kernel.connection
        pid = conn.evaluate("__import__('os').getpid()")
        assert conn.run_cell(SETUP, timeout=60).status == "ok"
        assert conn.run_cell("__vsc_ipynb_file__ = '/home/u/nb.ipynb'", timeout=60).status == "ok"
        with Untouched(conn) as watch:  # (its own requests are not of the kind under test: no tracer meanwhile)
            identify(conn, 10.0)
            ProbeClient(conn).read_notebook_path(10.0)
        assert watch.unchanged, watch.changes()
        assert conn.run_cell("sys.settrace(_tracer)", timeout=60).status == "ok"
        try:
            ident = identify(conn, 10.0)
            path = ProbeClient(conn).read_notebook_path(10.0)
        finally:
            assert conn.run_cell(RESTORE, timeout=60).status == "ok"
        calls = conn.evaluate("list(CALLS)")
        count = conn.evaluate("get_ipython().execution_count")
        assert calls == [], calls
        assert ident.notebook_path == "/home/u/nb.ipynb" and path == "/home/u/nb.ipynb"
        assert ident.pid == pid
        assert ident.execution_count == count - 1  # the count the next cell would have got then (RESTORE ran since)


def test_a_path_that_is_not_an_exact_str_is_not_taken(tmp_path):
    with start_kernel(tmp_path) as kernel:
        conn = kernel.connection
        src = ("CALLS = []\nclass P(str):\n    def __repr__(self):\n        CALLS.append('repr')\n        return 'x'\n"
               "__vsc_ipynb_file__ = P('/home/u/nb.ipynb')")
        assert conn.run_cell(src, timeout=60).status == "ok"
        ident = identify(conn, 10.0)
        assert ident.notebook_path is None
        assert ident.pid == conn.evaluate("__import__('os').getpid()")
        assert ProbeClient(conn).read_notebook_path(10.0) is None
        assert conn.evaluate("list(CALLS)") == []
