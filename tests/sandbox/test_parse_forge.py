"""A cell's source is parsed by the C parser itself, never through `ast`'s Python-level names (issue 41, round 6), on
IPython 8 and 9 kernels.

CRANE parsed every cell with `ast.parse` and built each statement's module with `ast.Module`: names a cell can rebind
without any frame walk (`ast.parse = lambda s, *a, **k: ast.Module(body=[], type_ignores=[])`, or `ast.Module` made a
subclass whose `body` reads empty). A clean session command that did so was kept as the session's state, and every
later command compiled to nothing: `1 / 0` came back `no-crash` in fork, transplant and portable sessions; so did
every one-shot run of a kernel whose user had made that patch. IPython parses through `compile` and bound `Module` at
its import, so in the kernel these cells still raise. Now kernel/run._compile_plan calls `compile(..., PyCF_ONLY_AST)`
and node types taken from trees the C parser made when CRANE's module was made (a cell can rebind `_ast.Module` and
`_ast.Interactive` too: the review's `_ast` case). Each test failed before (`no-crash`)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxSession
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session

from .copy_sessions import SESSIONS, copy_path_kernel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's confinement is Linux's")

PATCHES = {
    "parse": "import ast\nast.parse = lambda source, *a, **k: ast.Module(body=[], type_ignores=[])\n",
    "module": ("import ast\nclass _Empty(ast.Module):\n    body = property(lambda self: [], lambda self, v: None)\n"
               "ast.Module = _Empty\n"),
    # the C parser's module rebound too (`_ast`'s names, which `ast` re-exports): the review's reproducer
    "_ast": ("import _ast\nclass _EmptyM(_ast.Module):\n    body = property(lambda self: [], lambda self, v: None)\n"
             "class _EmptyI(_ast.Interactive):\n    body = property(lambda self: [], lambda self, v: None)\n"
             "_ast.Module, _ast.Interactive = _EmptyM, _EmptyI\n"),
}


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


def _session_checks(sb: Any, patch: str) -> None:
    v = sb.run(patch + "kept = 1")
    assert v.verdict == "no-crash", v
    v = sb.run("1 / 0")
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
    v = sb.run("{}['k']")
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    v = sb.run("y = kept + 1\nprint(y)")
    assert v.verdict == "no-crash" and v.stdout == "2\n", v


@pytest.mark.parametrize("patch", list(PATCHES))
def test_a_fork_session_command_patching_ast_forges_no_later_verdict(conn, patch):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=30) as sb:
            _session_checks(sb, PATCHES[patch])
    assert watch.unchanged, (watch.outputs, watch.changes())


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_copy_session_command_patching_ast_forges_no_later_verdict(conn, kind):
    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                _session_checks(sb, PATCHES["parse"])
        assert watch.unchanged, (watch.outputs, watch.changes())


_SAVE = ("import ast as _crane_ast, _ast as _crane_cast\n"
         "_crane_saved = _crane_ast.parse, _crane_ast.Module, _crane_cast.Module, _crane_cast.Interactive")
_RESTORE = ("(_crane_ast.parse, _crane_ast.Module, _crane_cast.Module, _crane_cast.Interactive) = _crane_saved\n"
            "del _crane_ast, _crane_cast, _crane_saved")


@pytest.mark.parametrize("patch", ["parse", "_ast"])
@pytest.mark.parametrize("path", ["blocking", "portable"])
def test_a_kernel_whose_ast_is_patched_still_gets_its_crashes(conn, path, patch):
    options: dict[str, Any] = ({"layer": "blocking"} if path == "blocking"
                               else {"sandbox": SandboxOptions(confinement="portable")})
    assert conn.run_cell(_SAVE).status == "ok"
    try:
        assert conn.run_cell(PATCHES[patch]).status == "ok"
        assert conn.run_cell("1 / 0").status == "error"  # (the kernel's own word)
        with Untouched(conn) as watch:
            v = speculate(conn, "1 / 0", 60.0, **options)
        assert watch.unchanged, (watch.outputs, watch.changes(), v)
        # (a portable run's export from such a kernel may also be refused: `unavailable`, never a verdict of its own)
        assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError") or (path, v.verdict) == ("portable", "unavailable"), v
    finally:
        assert conn.run_cell(_RESTORE).status == "ok"
