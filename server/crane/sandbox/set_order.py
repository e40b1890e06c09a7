"""Which copied sets of strings a cell reads where their iteration order can show (red team round 17h, F8).

A set rebuilt in the transplant worker iterates in another order than the kernel's: its slots depend on the
string hashes (the worker's are the kernel's only with the same `PYTHONHASHSEED`) and on the order its items came
in (pickling re-adds them in the kernel's iteration order, which lays them out otherwise). Membership, size,
sorting and equality never show it; iterating, listing, printing or handing the set to a library may. The worker
names the loaded values that hold a set of strings (worker/main `_hash_missed`); `transplant.state_doubt` makes a
verdict of a cell that reads one of them where the order can show only "likely". Runs in the daemon.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection

_ORDER_FREE_CALLS = frozenset(("len", "sorted", "set", "frozenset", "min", "max", "any", "all", "bool", "isinstance"))
_SET_METHODS = frozenset(("union", "intersection", "difference", "symmetric_difference", "copy"))
_ORDER_FREE_METHODS = frozenset(("issubset", "issuperset", "isdisjoint", "add", "discard", "remove", "update",
                                 "intersection_update", "difference_update", "symmetric_difference_update", "clear"))


def ordered_set_reads(source: str, names: Collection[str]) -> list[str]:
    """Of `names` (copied sets of strings), those `source` reads where their order can show: anything but
    membership (`x in s`), `len`/`sorted`/`min`/`max`/`set(...)`, equality with another set, truthiness, the
    set-algebra that makes another set read the same way, and in-place set methods. A cell that does not parse
    (a magic) names every one it mentions."""
    mentioned = [n for n in names if re.search(rf"\b{re.escape(n)}\b", source)]
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return sorted(mentioned)
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load) \
                and not _order_free(node, parents):
            out.add(node.id)
    return sorted(out)


def built_set_read(source: str) -> bool:
    """`source` builds a set (a display, a comprehension, `set(...)`/`frozenset(...)`) and reads it where its order
    can show: with the worker's string hashes not the kernel's, a set of strings the cell builds iterates in
    another order there (its elements are not known here: any such set counts). A cell that does not parse: False
    (its magics are IPython's to run; the copied sets are `ordered_set_reads`')."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(tree):
        built = isinstance(node, (ast.Set, ast.SetComp)) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "frozenset"))
        if built and not _order_free(node, parents):
            return True
    return False


def _order_free(node: ast.AST, parents: dict) -> bool:
    """`node` (a set's value) is used where its iteration order cannot show (see `ordered_set_reads`)."""
    while True:
        parent = parents.get(id(node))
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor)):
            node = parent  # (another set, read the same way)
            continue
        if isinstance(parent, ast.Attribute) and parent.value is node:
            call = parents.get(id(parent))
            if not (isinstance(call, ast.Call) and call.func is parent):
                return False
            if parent.attr in _ORDER_FREE_METHODS:
                return True
            if parent.attr in _SET_METHODS:
                node = call
                continue
            return False
        break
    if isinstance(parent, ast.Compare):
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops) and node is not parent.left:
            return True
        return all(isinstance(op, (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in parent.ops)
    if isinstance(parent, ast.Call) and node in parent.args and isinstance(parent.func, ast.Name):
        return parent.func.id in _ORDER_FREE_CALLS
    if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and parent.test is node:
        return True
    if isinstance(parent, (ast.BoolOp, ast.UnaryOp)):
        return True
    return False
