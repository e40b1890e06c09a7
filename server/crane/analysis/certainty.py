"""Does a node certainly run when its cell runs? (Conservative: False whenever in doubt.)

Uncertain: if/elif/else branches (unless the test is a constant), while bodies (unless `while True`),
try bodies/handlers/else when the try has handlers, match cases, def/lambda/class bodies, the branches of a
conditional expression, the right operands of `and`/`or`, an assert's message, comprehension elements behind
an `if` filter, code in a loop body after a `break`/`continue`/`return`/`raise` that may have skipped it, and
code under a `with contextlib.suppress(...)`-like manager. For-loop and comprehension bodies are certain when
the iterable is not known to be empty (`known_empty(iter_node)` decides).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from crane.analysis.bindings import TRY_NODES

_SUPPRESSORS = ("suppress", "raises", "assertRaises", "catch_exceptions", "ignore_errors")


def _const_truth(test: ast.AST) -> bool | None:
    if isinstance(test, ast.Constant):
        return bool(test.value)
    return None


def _has_jump(stmts: list[ast.stmt]) -> bool:
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Raise)):
                return True
    return False


def is_certain(
    node: ast.AST,
    parents: dict[ast.AST, ast.AST],
    known_empty: Callable[[ast.expr], bool] = lambda _n: False,
    stop: ast.AST | None = None,
) -> bool:
    """True if `node` runs whenever the code up to `stop` (default: the whole cell) runs."""
    child = node
    parent = parents.get(child)
    while parent is not None and child is not stop:
        if parent is stop:
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            if child in getattr(parent, "body", ()) or child is getattr(parent, "body", None):
                return False
        elif isinstance(parent, ast.If):
            truth = _const_truth(parent.test)
            if child in parent.body and truth is not True:
                return False
            if child in parent.orelse and truth is not False:
                return False
        elif isinstance(parent, ast.IfExp):
            if child is not parent.test:
                return False
        elif isinstance(parent, ast.BoolOp):
            if child is not parent.values[0]:
                return False
        elif isinstance(parent, ast.While):
            if child in parent.orelse:
                return False
            if child in parent.body:
                if _const_truth(parent.test) is not True or _has_jump(_before(parent.body, child)):
                    return False
        elif isinstance(parent, (ast.For, ast.AsyncFor)):
            if child in parent.orelse:
                return False
            if child in parent.body:
                if known_empty(parent.iter) or _has_jump(_before(parent.body, child)):
                    return False
        elif isinstance(parent, TRY_NODES):
            if parent.handlers and child not in parent.finalbody:
                return False
        elif isinstance(parent, ast.ExceptHandler):
            return False
        elif isinstance(parent, ast.match_case) or isinstance(parent, ast.Match) and child is not parent.subject:
            return False
        elif isinstance(parent, ast.Assert):
            if child is parent.msg:
                return False
        elif isinstance(parent, (ast.With, ast.AsyncWith)):
            if child in parent.body:
                for item in parent.items:
                    if any(s in ast.unparse(item.context_expr) for s in _SUPPRESSORS):
                        return False
        elif isinstance(parent, ast.comprehension):
            if child is not parent.iter and not _comp_child(parent, child, known_empty):
                return False
        elif isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            gens = parent.generators
            if child not in gens:
                if any(g.ifs for g in gens) or any(known_empty(g.iter) for g in gens):
                    return False
            elif child is not gens[0] and (any(g.ifs for g in gens[: gens.index(child)]) or known_empty(gens[0].iter)):
                return False
            if isinstance(parent, ast.GeneratorExp) and child is not gens[0]:
                return False  # a generator only runs if something consumes it
        child, parent = parent, parents.get(parent)
    return stop is None or child is stop


def _comp_child(comp: ast.comprehension, child: ast.AST, known_empty) -> bool:
    # `ifs` of a comprehension run for each element of its iterable.
    if child in comp.ifs:
        return not known_empty(comp.iter)
    return True  # the target


def _before(body: list[ast.stmt], child: ast.AST) -> list[ast.stmt]:
    if not isinstance(child, ast.stmt):
        return []
    try:
        return body[: body.index(child)]
    except ValueError:
        return []
