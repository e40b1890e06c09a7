"""A name the cell surely binds before it reads it is not needed from the kernel (sandbox/cell_names.cell_read_first):
re-running `con = sqlite3.connect(p)` / `con.execute(...)` while the kernel holds the connection of the cell's
last run (which cannot be pickled) was `unavailable` on every copy path ("`con` (sqlite3.Connection) cannot be
copied into a separate process"); the copy now does without it, and gets a verdict. A name the cell may read first
(read on the right of its own assignment, bound only in an `if` or a `try`, read by a function defined before) is
still copied, so such a cell stays `unavailable` as before. IPython 8 and 9, one-shot and session."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.cell_names import cell_read_first, cell_rebinds
from crane.sandbox.session import open_session

from . import end_paths
from .copy_sessions import SESSIONS, copy_path_kernel
from .end_paths import BUDGET_S, PATHS, PORTABLE, path_verdict

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
COPY_PATHS = [p for p in PATHS if not p.startswith("fork")]
CONNECT = "import sqlite3\ncon = sqlite3.connect(':memory:')\n"
# (the kernel's connection of the last test closed first: on Python 3.13 an unclosed one warns when the collector
# frees it — it is in a cycle with its statement cache —, and a collection a request's allocations trigger in its
# top-level frame, whose globals are the namespace, gave the namespace a `__warningregistry__`: docs/sandbox.md)
RECONNECT = "try:\n    con.close()\nexcept NameError:\n    pass\n" + CONNECT


@pytest.mark.parametrize(("source", "read_first"), [
    ("con = sqlite3.connect(p)\ncon.execute(1)", ["p", "sqlite3"]),
    ("con = con or connect()", ["con", "connect"]),  # (read on the right of its own assignment)
    ("def g():\n    return con\ncon = 1\ng()", ["con"]),  # (a function defined before the binding reads it)
    ("class K:\n    c = con\ncon = 1", ["con"]),
    ("f = lambda: con\ncon = 1\nf()", ["con"]),
    ("if a:\n    b = 1\nprint(b)", ["a", "print", "b"]),  # (bound only in a branch)
    ("for i in xs:\n    j = i\n    print(j)\nprint(i, j)", ["xs", "i", "print", "j"]),  # (zero rounds: unbound)
    ("try:\n    c = 1\nexcept E as e:\n    print(e)\nprint(c)", ["E", "print", "c"]),
    ("with suppress(E):\n    c = f()\nprint(c)", ["print", "c", "suppress", "E", "f"]),
    ("with open(p) as fh:\n    y = fh.read()\nprint(y, fh)", ["print", "y", "open", "p"]),
    ("x = 1\ndel x\nprint(x)", ["x", "print"]),  # (unbound again by del)
    ("x += 1", ["x"]),
    ("(w := 3)\nw", ["w"]),  # (a walrus binds nothing for sure)
    ("%time y = f(z)\ny", ["time", "y", "f", "z"]),  # (IPython's escapes: every identifier read)
    ("x: int = 1\nx", ["int"]),
    ("a, *b = t\nprint(a, b)", ["t", "print"]),
    ("x.y = 1\nx", ["x"]),
    ("import numpy as np\nfrom os import path as q\nnp.zeros(1), q", []),
    ("from m import *\nz", ["z"]),  # (a star import may not bind `z`)
    ("def f():\n    pass\nf()", []),
    ("%%bash\necho $x", ["echo", "x"]),  # (not Python: every identifier)
])
def test_names_read_first(source, read_first):
    assert cell_read_first(source) == read_first


def test_a_name_bound_first_is_a_rebind():
    """Copied only where its value has a finalizer (kernel/finalizers.rebound), as a name never read."""
    assert cell_rebinds(CONNECT + "con.execute('select 1')") == ["sqlite3", "con"]
    assert cell_rebinds("con = con or connect()") == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")
@pytest.mark.parametrize("path", PATHS)
def test_rerunning_a_cell_that_makes_an_unpicklable_value(pk, path):
    assert pk["conn"].run_cell(RECONNECT, timeout=60).status == "ok"
    v = path_verdict(pk, path, CONNECT + "assert con.execute('select 41 + 1').fetchone() == (42,)", _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v
    crash = path_verdict(pk, path, CONNECT + "con.execute('select * from missing')", _served)
    assert (crash.verdict, crash.ename, crash.line) == ("crash", "OperationalError", 3), crash
    assert crash.certain, crash


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")
@pytest.mark.parametrize("path", COPY_PATHS)
@pytest.mark.parametrize("source", [
    "con.close()\n" + CONNECT,  # (the kernel's connection is read first)
    "import sqlite3\nif len(str(1)) > 5:\n    con = sqlite3.connect(':memory:')\ncon.execute('select 1')",
])
def test_a_name_read_first_is_still_copied(pk, path, source):
    conn = pk["conn"]
    assert conn.run_cell(RECONNECT, timeout=60).status == "ok"
    with copy_path_kernel(conn, path.split()[0]), Untouched(conn) as watch:
        if " " in path:
            with open_session(conn, budget_s=BUDGET_S, sandbox=SESSIONS[path.split()[0]]) as sb:
                v = sb.run(source)
        else:
            v = speculate(conn, source, BUDGET_S, sandbox=PORTABLE if path == "portable" else None)
    assert watch.unchanged, watch.changes()
    assert v.verdict == "unavailable" and "`con` (sqlite3.Connection)" in (v.reason or ""), v


def _served(sb) -> None:
    assert sb.run("y = 1").verdict == "no-crash"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")
@pytest.mark.parametrize("path", COPY_PATHS)
def test_a_rebound_value_that_cannot_be_pickled_is_left_out(pk, path):
    """A value the cell rebinds whose class has a finalizer (`__del__`) is copied for it (kernel/finalizers.rebound),
    but this one holds a connection and cannot be pickled: left out (a dry run), never the export's failure. (On
    Python 3.13 `sqlite3.Connection` itself has `__del__`: the rerun cell above was `unavailable` in the 3.13 CI.)"""
    assert pk["conn"].run_cell(RECONNECT + "class Owner:\n    def __del__(self):\n        pass\n"
                               "owner = Owner()\nowner.con = con", timeout=60).status == "ok"
    v = path_verdict(pk, path, "owner = 1\nassert owner == 1", _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v
