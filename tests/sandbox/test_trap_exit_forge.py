"""A library's `__exit__` never swallows the cell's exception on CRANE's way (issue 41, round 6), on IPython 8 and 9.

Every path ran the cell inside `with shell.builtin_trap:` (IPython's BuiltinTrap, which puts `get_ipython`, `exit`...
in the builtins for a cell). A `with` block's `__exit__` is code of IPython's that the cell can change — no frame
walk, no CRANE object: `type(get_ipython().builtin_trap).__exit__.__code__ = ...` — and one that returns true
swallows the exception going through it: the raising cell then reached CRANE's clean branch and came back
`no-crash`, sealed clean, on every one-shot path (fork blocking and layered, transplant, portable) and in every
session (fork, transplant, portable), where a clean command's patch also turned every later command's crash into
`no-crash`. In the kernel the same cell is an error (IPython catches the cell's exception inside its own trap).
Now the trap is entered and left by plain calls (kernel/run._exec_plan): the exception goes straight to CRANE's
caller. Each test failed before (every verdict below came back `no-crash`)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import SandboxSession
from crane.sandbox.session import open_session

from .copy_sessions import SESSIONS, copy_path_kernel
from .one_shot import each_kernel, one_shot  # noqa: F401 (each_kernel: the fixture conn)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's confinement is Linux's")

# IPython's own trap made to swallow whatever goes through it (it still takes its builtins off)
PATCH = ("type(get_ipython().builtin_trap).__exit__.__code__ = "
         "(lambda self, *a: (self.deactivate(), True)[1]).__code__\n")
# the same through the generic `contextlib` route a cell might take: every `nullcontext` swallows too (CRANE's eval
# guard is one on the fork path)
PATCH_NULL = "import contextlib\ncontextlib.nullcontext.__exit__.__code__ = (lambda self, *a: True).__code__\n"

PATHS = ["blocking", "layered", "transplant", "portable"]


@pytest.mark.parametrize("path", PATHS)
def test_a_cell_whose_trap_swallows_its_exception_is_that_crash(conn, path):
    v = one_shot(conn, path, PATCH + "raise ValueError('real')")
    assert (v.verdict, v.ename) == ("crash", "ValueError"), v
    # the kernel's own word on that cell (its trap's code changed for good: restored below)
    assert conn.run_cell("_crane_t = type(get_ipython().builtin_trap)\n_crane_c = _crane_t.__exit__.__code__").status == "ok"
    try:
        assert conn.run_cell(PATCH + "raise ValueError('real')").status == "error"
        v = one_shot(conn, path, "{}['k']")  # (a copy of a kernel whose trap swallows)
        assert (v.verdict, v.ename) == ("crash", "KeyError"), v
        v = one_shot(conn, path, "y = base + 1")
        assert v.verdict == "no-crash", v
    finally:
        assert conn.run_cell("_crane_t.__exit__.__code__ = _crane_c\ndel _crane_t, _crane_c").status == "ok"


def _session_checks(sb: Any) -> None:
    v = sb.run(PATCH + "raise ValueError('real')")
    assert (v.verdict, v.ename) == ("crash", "ValueError"), v
    v = sb.run("{}['k']")
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    # a clean command's patch (kept, as a kernel keeps a cell's state) changes no later command's verdict
    v = sb.run(PATCH + PATCH_NULL + "kept = 1")
    assert v.verdict == "no-crash", v
    v = sb.run("{}['k']")
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    v = sb.run("1 / 0")
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
    assert sb.inspect("kept + base") == "2"
    v = sb.run("y = kept + base")
    assert v.verdict == "no-crash", v


def test_a_fork_session_command_whose_trap_swallows_is_that_crash_and_changes_no_later_one(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=30) as sb:
            _session_checks(sb)
    assert watch.unchanged, (watch.outputs, watch.changes())


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_copy_session_command_whose_trap_swallows_is_that_crash_and_changes_no_later_one(conn, kind):
    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                _session_checks(sb)
        assert watch.unchanged, (watch.outputs, watch.changes())
