"""A `functools.lru_cache`/`cache` wrapper of a notebook function is copied (red team round 17h, F3; kernel/pickling.py
`lru_reducers`): the wrapper pickled by reference to `__main__.<name>`, which the worker's `__main__` lacks, so any
cell using one was `unavailable` on the copy paths ("Can't get attribute 'slow_square' on <module '__main__'>").
Now the wrapper is rebuilt in the worker around the function copied by value, with the kernel's `maxsize` and
`typed` (read from functools' own `cache_parameters` closure: nothing of the notebook's is called) and an empty
cache. IPython 8 and 9, the six paths; the kernel untouched and nothing outside changed (end_paths)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions

from . import end_paths
from .conftest import tree_hash
from .copy_sessions import copy_path_kernel
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
SETUP = ("import functools\nSCALE = 3\n"
         "@functools.lru_cache(maxsize=None)\ndef slow_square(x):\n    return x * x * SCALE // 3\n"
         "@functools.cache\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
         "@functools.lru_cache(maxsize=7, typed=True)\ndef tag(x):\n    'the tag'\n    return f'<{x}>'\n"
         "class Model:\n    @functools.lru_cache\n    def width(self):\n        return 4\n"
         "m = Model()\nslow_square(3), fib(20), tag(1), m.width()")


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "assert slow_square(4) == 16 and fib(30) == 832040",
    "assert tag.cache_parameters() == {'maxsize': 7, 'typed': True}\nassert tag(2) == '<2>' and tag.__doc__ == 'the tag'"
    "\nassert tag.__wrapped__(3) == '<3>' and tag.__name__ == 'tag'",
    "assert m.width() == 4 and Model.width.cache_info().maxsize == 128",
], ids=["calls", "parameters", "method"])
def test_a_cached_notebook_function_is_copied(pk, path, cell):
    assert pk["conn"].run_cell(SETUP, timeout=60).status == "ok"
    v = path_verdict(pk, path, cell, _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", PATHS)
def test_a_cached_functions_crash_is_the_cells(pk, path):
    assert pk["conn"].run_cell(SETUP, timeout=60).status == "ok"
    v = path_verdict(pk, path, "slow_square('a')", _served)
    assert (v.verdict, v.ename, v.line) == ("crash", "TypeError", 1), v


@pytest.mark.parametrize("path", PATHS)
def test_a_replaced_cache_parameters_is_never_called(pk, path):
    """The notebook set `cache_parameters` to its own function (it would write a file when called): the export
    never calls it (the folder is unchanged: end_paths), the wrapper is not rebuilt (pickled as before)."""
    assert pk["conn"].run_cell(SETUP + "\nslow_square.cache_parameters = lambda: open('crane_lru_mark', 'w') and "
                               "{'maxsize': None, 'typed': False}", timeout=60).status == "ok"
    v = path_verdict(pk, path, "assert slow_square(4) == 16", _served)
    assert v.verdict in (("no-crash",) if path.startswith("fork") else ("no-crash", "unavailable")), v


@pytest.mark.parametrize("path", ["transplant", "portable"])
def test_a_rebound_cell_type_is_never_called(pk, path):
    """`types.CellType` rebound to a class whose `cell_contents` would write a file: nothing of it runs in the
    kernel (the folder is unchanged, the kernel untouched); the export reads closures with the cell type bound at
    install, and where CRANE's export is installed after the rebinding its install refuses (`unavailable`,
    naming it)."""
    conn = pk["conn"]
    evil = ("import types\n"
            "class Evil:\n    cell_contents = property(lambda self: open('crane_lru_cell', 'w'))\n"
            "types.CellType = Evil")
    ran = conn.run_cell(SETUP + "\n" + evil, timeout=60)
    assert ran.status == "ok", ran
    before = tree_hash(pk["work"])
    try:
        with copy_path_kernel(conn, path), Untouched(conn) as watch:
            v = speculate(conn, "assert slow_square(4) == 16", 60.0,
                          sandbox=SandboxOptions(confinement="portable") if path == "portable" else None)
    finally:
        back = conn.run_cell("import types\ntypes.CellType = type((lambda x: lambda: x)(0).__closure__[0])",
                             timeout=60)
        assert back.status == "ok", back
    assert watch.unchanged and tree_hash(pk["work"]) == before, v
    assert (v.verdict, v.certain) == ("no-crash", True) or (v.verdict == "unavailable" and "CellType" in (v.reason or "")), v
