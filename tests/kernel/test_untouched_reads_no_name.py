"""Issue 42: kernel/untouched's private requests (the state fingerprint, the effect sentinels) read no name of the
notebook's: a notebook's `exec`, `__import__` and `get_ipython` in its namespace, and a replaced `builtins.__import__`,
are never called for them (before, `exec(...)`, `get_ipython()` and `__import__('sys')` were evaluated there)."""

from __future__ import annotations

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched, kernel_state

SETUP = r"""
import builtins, sys
CALLS = []
_real_exec, _real_import, _real_gi = builtins.exec, builtins.__import__, get_ipython
exec = lambda *a, **k: (CALLS.append('exec'), _real_exec(*a, **k))[1]
__import__ = lambda *a, **k: (CALLS.append('__import__'), _real_import(*a, **k))[1]
get_ipython = lambda: (CALLS.append('get_ipython'), _real_gi())[1]
def _import(*a, **k):  # (recorded for code run in a namespace of CRANE's check: its own, or a bare one)
    g = sys._getframe(1).f_globals
    if '__name__' not in g or str(g['__name__']).startswith('_crane_untouched'):
        CALLS.append('builtins.__import__ ' + str(a[0]))
    return _real_import(*a, **k)
builtins.__import__ = _import
"""


def test_the_checks_requests_read_no_name_of_the_notebooks(tmp_path):
    with start_kernel(tmp_path) as kernel:
        conn = kernel.connection
        assert conn.run_cell(SETUP).status == "ok"
        try:
            state = kernel_state(conn)
            with Untouched(conn, sentinel="_sentinel_x") as watch:
                pass
            assert watch.unchanged, (watch.changes(), watch.hits)
            assert state["count"] == kernel_state(conn)["count"]
        finally:
            calls = conn.evaluate("list(CALLS)")
            assert conn.run_cell("builtins.__import__ = _real_import\ndel exec, __import__, get_ipython").status == "ok"
        assert calls == [], calls
