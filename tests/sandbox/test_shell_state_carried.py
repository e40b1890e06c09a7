"""Issue 42 part 2 (h10): the kernel's shell state that an earlier cell set and the copy's worker lacks never gives a
false certain verdict on the copy paths (OS transplant and portable; IPython 8 and 9).

- AST transformers an earlier cell registered (`get_ipython().ast_transformers`) rewrite every later cell in the
  kernel; the worker compiled the cell as written: a transformer that defines a name gave a certain `NameError`
  where the kernel runs clean. Now copied and run in the worker (kernel/transformers.py, issue 42 h1; input
  transformers: test_cell_transformers_carried.py); one that cannot be copied (the proof refuses it) is not, and
  such a crash is "likely" (env.json `shell_missed`).
- a display formatter's `for_type` printer of the notebook's replaces an object's own `_repr_html_` in the kernel;
  the worker calls the raising method: its crash has no cell line, "likely" (so before this change too; held here).
- `%autoawait off`: a top-level `await` is the kernel's SyntaxError; the worker ran it clean (a false no-crash).
  Carried (kernel/environment `_autoawait`, worker/main `_enter_environment`; kernel/run `_compile_plan` compiles a
  top-level await only where the shell's autoawait is on).
Each case's state is set, checked and taken back by the test itself; the kernel is unchanged by every run."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

PATHS = {
    "transplant": lambda conn, src: transplant(conn, src, 60.0),
    "portable": lambda conn, src: speculate(conn, src, 60.0, sandbox=SandboxOptions(confinement="portable")),
}
SETUP = "import sys, types\nsys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork"

AST_ON = """
import ast
class Magic(ast.NodeTransformer):
    def visit_Name(self, node):
        if node.id == 'magic_name':
            return ast.copy_location(ast.Constant(7), node)
        return node
get_ipython().ast_transformers.append(Magic())
"""
AST_REFUSED_ON = AST_ON.replace("class Magic(ast.NodeTransformer):\n",
                                "class Magic(ast.NodeTransformer):\n    def __reduce__(self):\n        return (Magic, ())\n")
AST_OFF = "get_ipython().ast_transformers[:] = [t for t in get_ipython().ast_transformers if type(t).__name__ != 'Magic']"
FMT_ON = """
class H:
    def _repr_html_(self):
        raise ValueError('no html')
get_ipython().display_formatter.formatters['text/html'].for_type(H, lambda o: '<b>h</b>')
"""
FMT_OFF = "get_ipython().display_formatter.formatters['text/html'].pop(H)"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp(f"h10-shell-{request.param}"), python=kernel_python(request.param))
    c = kernel.connection
    assert c.run_cell(SETUP, timeout=300).status == "ok"
    yield c
    kernel.shutdown()


def _run(conn, path: str, cell: str):
    with Untouched(conn) as watch:
        v = PATHS[path](conn, cell)
    assert watch.unchanged, (watch.changes(), watch.outputs, v)
    return v


@pytest.mark.parametrize("path", list(PATHS))
def test_the_copy_runs_the_notebook_s_ast_transformers(conn, path):
    assert conn.run_cell(AST_ON).status == "ok"
    try:
        assert conn.run_cell("print(magic_name)").status == "ok"  # the kernel's own word
        v = _run(conn, path, "print(magic_name)")  # copied and run in the worker (issue 42, h1)
        assert (v.verdict, v.stdout.strip()) == ("no-crash", "7"), v
    finally:
        assert conn.run_cell(AST_OFF).status == "ok"


@pytest.mark.parametrize("path", list(PATHS))
def test_a_crash_an_ast_transformer_not_copied_would_have_prevented_is_only_likely(conn, path):
    assert conn.run_cell(AST_REFUSED_ON).status == "ok"  # (its class pickles itself: the proof refuses it)
    try:
        assert conn.run_cell("print(magic_name)").status == "ok"  # the kernel's own word
        v = _run(conn, path, "print(magic_name)")
        assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", False), v
    finally:
        assert conn.run_cell(AST_OFF).status == "ok"
    v = _run(conn, path, "print(undefined_after)")  # none registered: certain again
    assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", True), v


@pytest.mark.parametrize("path", list(PATHS))
def test_a_crash_in_a_formatter_the_notebook_replaced_is_only_likely(conn, path):
    assert conn.run_cell(FMT_ON).status == "ok"
    try:
        assert conn.run_cell("H()").status == "ok"
        v = _run(conn, path, "H()")
        assert (v.verdict, v.ename, v.certain) == ("crash", "ValueError", False), v
        v = _run(conn, path, "undefined_here")  # a crash elsewhere stays certain
        assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", True), v
    finally:
        assert conn.run_cell(FMT_OFF).status == "ok"


@pytest.mark.parametrize("path", list(PATHS))
def test_autoawait_off_is_carried(conn, path):
    cell = "import asyncio\nawait asyncio.sleep(0)\nprint('awaited')"
    assert conn.run_cell("%autoawait off").status == "ok"
    try:
        assert conn.run_cell(cell).status == "error"
        v = _run(conn, path, cell)
        assert (v.verdict, v.ename) == ("crash", "SyntaxError"), v
    finally:
        assert conn.run_cell("%autoawait on").status == "ok"
    v = _run(conn, path, cell)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "awaited"), v
