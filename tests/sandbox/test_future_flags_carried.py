"""An earlier cell's `from __future__ import annotations` holds in the copy paths' worker too (round 12, h7; issues
40 and 41: an honest cell's false certain crash), on IPython 8 and 9.

IPython's compiler keeps the `__future__` features a cell turned on for every later cell, so after `from __future__
import annotations` a later cell's annotations are never evaluated: `def f(x: NotYetDefined)` and a dataclass field
annotated with a class defined further down run clean in the kernel. The fork path runs on the kernel's own shell;
the transplant and portable workers compiled the cell with a fresh compiler, evaluated the annotations and answered a
certain `NameError` (one-shot runs and sessions). The kernel's features now go to the worker with its environment
(kernel/environment `compile_flags`, applied by worker/main `_enter_environment`)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox.session import open_session

from .one_shot import PORTABLE, one_shot

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's confinement is Linux's")

PATHS = ["blocking", "transplant", "portable"]
CELLS = {
    "a function's annotations": "def f(x: NotYetDefined) -> AlsoLater:\n    return x\nprint(f(3))",
    "a class attribute's": "class C:\n    a: Missing = 3\nprint(C.a)",
    "a dataclass field's": "import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: Later\nprint(P(3).x)",
}
RAISING = "def g(x: NotYetDefined):\n    return undefined_name\ng(1)"  # (the body still raises)


@pytest.fixture(scope="module")
def conn(env_conn):
    assert env_conn.run_cell("from __future__ import annotations").status == "ok"
    return env_conn


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", list(CELLS))
def test_an_earlier_future_import_holds_in_every_path(conn, cell, path):
    v = one_shot(conn, path, CELLS[cell])
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "3"), v


@pytest.mark.parametrize("path", PATHS)
def test_a_body_that_raises_is_still_that_crash(conn, path):
    v = one_shot(conn, path, RAISING)
    assert (v.verdict, v.ename) == ("crash", "NameError"), v


def test_a_portable_session_compiles_with_the_kernels_features_too(conn):
    with Untouched(conn) as watch:
        with open_session(conn, budget_s=30, sandbox=PORTABLE) as sb:
            v = sb.run(CELLS["a function's annotations"])
            assert (v.verdict, v.stdout.strip()) == ("no-crash", "3"), v
            v = sb.run(RAISING)
            assert (v.verdict, v.ename) == ("crash", "NameError"), v
    assert watch.unchanged, (watch.outputs, watch.changes())


def test_the_kernels_own_word_on_those_cells(conn):
    for source in CELLS.values():
        assert conn.run_cell(source).status == "ok", source
    assert conn.run_cell(RAISING).status == "error"
