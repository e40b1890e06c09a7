"""A loop miniature's rewrite of the cell never goes through `ast`'s Python-level names, nor through a node class a
notebook changed (issue 41), on IPython 8 and 9 kernels.

The miniature (kernel/miniature: every `for` and `while` bounded) parsed, walked and rebuilt the cell with
`ast.parse`, `ast.NodeTransformer`, `ast.copy_location`, `ast.fix_missing_locations` and `ast.Call`/`ast.If`...,
and put its rewrite among the shell's AST transformers (so IPython also called `ast.fix_missing_locations` on the
cell, which a kernel without transformers never does). A notebook that rebinds any of these changes what the
miniature runs and not what the kernel runs: a raising cell came back `no-crash`. The node classes are mutable too:
a property on `_ast.For.body` that hides the body of a loop whose iterable is CRANE's bound leaves the kernel's code
as it is and empties the miniature's loop. Now the tree is the C parser's (`compile(..., PyCF_ONLY_AST)`), the node
types are taken from a tree it made, the walk and the rewrite are CRANE's, and a tree with a node class a cell
changed is not rewritten (the run is a full one, and its reason says so). Each case failed before (`no-crash`)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.scale import loop_spec

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's confinement is Linux's")

SAVE = ("import ast as _crane_ast\n"
        "_crane_saved = _crane_ast.NodeTransformer.visit, _crane_ast.fix_missing_locations")
RESTORE = ("_crane_ast.NodeTransformer.visit, _crane_ast.fix_missing_locations = _crane_saved\n"
           "import _ast\n"
           "if 'body' in vars(_ast.For):\n    del _ast.For.body\n"
           "del _crane_ast, _crane_saved")

PATCHES = {
    # a transformer's `visit` (what IPython calls on each of the shell's AST transformers) returns an empty module
    "NodeTransformer.visit": ("import ast\n"
                              "ast.NodeTransformer.visit = lambda self, node: ast.Module(body=[], type_ignores=[])\n"),
    # IPython's `transform_ast` calls it once the shell has an AST transformer: it empties the cell in place
    "fix_missing_locations": ("import ast\n_fml = ast.fix_missing_locations\n"
                              "def _emptied(node):\n"
                              "    if type(node).__name__ == 'Module':\n"
                              "        node.body[:] = []\n"
                              "    return _fml(node)\n"
                              "ast.fix_missing_locations = _emptied\n"),
    # the C node class itself: a loop whose iterable is a call of CRANE's bound reads an empty body
    "_ast.For.body": ("import _ast\n"
                      "def _get(self):\n"
                      "    it = self.__dict__.get('iter')\n"
                      "    f = getattr(it, 'func', None)\n"
                      "    if getattr(f, 'id', '').startswith('__crane'):\n"
                      "        return [_ast.Pass(lineno=self.lineno, col_offset=self.col_offset)]\n"
                      "    return self.__dict__['body']\n"
                      "def _set(self, v):\n"
                      "    self.__dict__['body'] = v\n"
                      "_ast.For.body = property(_get, _set)\n"),
}

CELL = "for i in range(3):\n    1 / 0\n"


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


@pytest.mark.parametrize("patch", list(PATCHES))
def test_a_notebook_that_patches_ast_gets_its_crash_from_a_loop_miniature(conn, patch):
    assert conn.run_cell(SAVE).status == "ok"
    try:
        assert conn.run_cell(PATCHES[patch]).status == "ok"
        assert conn.run_cell(CELL).status == "error"  # (the kernel's own word: the patch leaves its code as it is)
        with Untouched(conn) as watch:
            v = speculate(conn, CELL, 60.0, miniature=loop_spec())
        assert watch.unchanged, (watch.outputs, watch.changes(), v)
        assert (v.verdict, v.ename, v.line) == ("crash", "ZeroDivisionError", 2), v
        if patch == "_ast.For.body":  # not rewritten: a full run, and the reason says why
            assert "changed a class of Python's syntax trees" in (v.reason or ""), v
    finally:
        assert conn.run_cell(RESTORE).status == "ok"
    v = speculate(conn, "t = 0\nfor i in range(3):\n    t += i\nprint(t)", 60.0, miniature=loop_spec())
    assert (v.verdict, v.stdout) == ("no-crash", "3\n"), v  # the kernel restored: an honest miniature as before
    assert "changed a class" not in (v.reason or ""), v
