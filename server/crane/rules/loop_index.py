"""A loop's index running past the end of an array or list it indexes: the Kaggle EDA grid
(`fig, axes = plt.subplots(2, 7); axes = axes.flatten()` and then one subplot per column of a 17-column frame).

The loop (`for`, certain, no `break`/`continue`/`return` in its body) has a known number of iterations N: a
DataFrame's columns (`df`, `df.columns`, `df.items()`), a list/tuple literal, a live list/tuple/Series/ndarray,
`enumerate(...)` of one of those, or `range(...)` of literal ints or `len(<one of those>)`. The index is the loop's
own variable (range, enumerate's counter) or a counter set to an int literal before the loop and advanced by one
`counter += k` statement at the top of the loop body. The subscript `a[index]` runs in every iteration (certain
within the body, not in a nested loop), `a` has a known length L (ndarray's first axis, list, tuple) and the body
does not rebind or grow it. The first index ≥ L raises numpy's "index 14 is out of bounds for axis 0 with size
14" (IndexError) or "list index out of range".
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.analysis.certainty import is_certain
from crane.finding import Finding
from crane.probe.facts import Facts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, qualname, value
from crane.rulekit.lib_helpers import NOVALUE, Verdict, describe, is_dataframe, literal, n_columns, shape_of
from crane.rulekit.registry import rule

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _own_nodes(loop: ast.For) -> Iterator[ast.AST]:
    """Nodes of the loop's body, not those of nested functions/classes (nested loops included)."""
    stack: list[ast.AST] = list(loop.body)
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, _SCOPES):
            continue
        stack.extend(ast.iter_child_nodes(n))


def _length(ctx: RuleContext, node: ast.expr) -> int | None:
    """How many items iterating over `node` yields, when known exactly."""
    lit = literal(node)
    if lit is not NOVALUE:
        return len(lit) if isinstance(lit, (list, tuple, str)) else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args and not node.keywords
            and node.func.attr in ("items", "iteritems", "keys")):
        f = value(ctx, node.func.value)
        return n_columns(f) if is_dataframe(f) else None
    if isinstance(node, ast.Attribute) and node.attr == "columns":
        f = value(ctx, node.value)
        return n_columns(f) if is_dataframe(f) else None
    f = value(ctx, node)
    if f is None or f.truncated:
        return None
    if is_dataframe(f):
        return n_columns(f)
    if f.kind in ("list", "tuple"):
        return f.length
    shp = shape_of(f)
    if f.kind in ("ndarray", "series") and shp:
        return shp[0]
    return None


def _range_values(ctx: RuleContext, call: ast.Call) -> range | None:
    if call.keywords or not 1 <= len(call.args) <= 3:
        return None
    args: list[int] = []
    for a in call.args:
        lit = literal(a)
        if isinstance(lit, int) and not isinstance(lit, bool):
            args.append(lit)
            continue
        if (isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "len" and len(a.args) == 1
                and not a.keywords and qualname(ctx, a.func) in (None, "len", "builtins.len")):
            n = _length(ctx, a.args[0])
            if n is None:
                return None
            args.append(n)
            continue
        return None
    try:
        return range(*args)
    except ValueError:
        return None


def _loop_indices(ctx: RuleContext, loop: ast.For) -> dict[str, tuple[list[int], ast.AST | None]]:
    """Index variables of the loop: name -> (its value in each iteration at the top of the body, the counter's
    increment statement, after which it is one step further, or None)."""
    out: dict[str, tuple[list[int], ast.AST | None]] = {}
    it = loop.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and qualname(ctx, it.func) in (
            None, "range", "builtins.range") and it.func.id == "range":
        r = _range_values(ctx, it)
        if r is not None and isinstance(loop.target, ast.Name):
            out[loop.target.id] = (list(r), None)
        n = len(r) if r is not None else None
    elif isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and qualname(
            ctx, it.func) in (None, "enumerate", "builtins.enumerate") and it.args and len(it.args) <= 2:
        n = _length(ctx, it.args[0])
        start_node = it.args[1] if len(it.args) > 1 else ctx.kwarg(it, "start")
        start = literal(start_node) if start_node is not None else 0
        if n is not None and isinstance(start, int) and not isinstance(start, bool) and all(
                k.arg == "start" for k in it.keywords) and isinstance(loop.target, ast.Tuple) and len(
                loop.target.elts) == 2 and isinstance(loop.target.elts[0], ast.Name):
            out[loop.target.elts[0].id] = (list(range(start, start + n)), None)
    else:
        n = _length(ctx, it)
    if n is None or n == 0:
        return {}
    out.update(_counters(ctx, loop, n))
    return out


def _counters(ctx: RuleContext, loop: ast.For, n: int) -> dict[str, tuple[list[int], ast.AST | None]]:
    """`c = <int>` before the loop and one `c += <int>` statement directly in its body."""
    out: dict[str, tuple[list[int], ast.AST | None]] = {}
    stores: dict[str, int] = {}
    for node in _own_nodes(loop):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
    for stmt in loop.body:
        if not (isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        step = literal(stmt.value)
        if stores.get(name) != 1 or not isinstance(step, int) or isinstance(step, bool) or step <= 0:
            continue
        start = _start_value(ctx, name, loop)
        if start is not None:
            out[name] = ([start + step * k for k in range(n)], stmt)
    return out


def _start_value(ctx: RuleContext, name: str, loop: ast.For) -> int | None:
    """The int literal bound to `name` by the last top-level statement before the loop that binds it."""
    start = None
    for stmt in ctx.statements():
        if stmt is loop or (stmt.lineno, stmt.col_offset) > (loop.lineno, loop.col_offset):
            break
        if not any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del))
                   for n in ast.walk(stmt)):
            continue
        start = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            v = literal(stmt.value)
            if isinstance(v, int) and not isinstance(v, bool):
                start = v
    if not any(stmt is loop for stmt in ctx.statements()):
        return None  # a loop nested in another statement: the counter may have moved before it
    return start


def _jumps(loop: ast.For) -> bool:
    for node in _own_nodes(loop):
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, (ast.Break, ast.Continue)) and _owner_loop(node, loop) is loop:
            return True
    return False


def _owner_loop(node: ast.AST, loop: ast.For) -> ast.AST | None:
    # the innermost loop around a break/continue, found by walking the loop's own tree
    found: ast.AST | None = None

    def walk(n: ast.AST, current: ast.AST) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(n):
            if child is node:
                found = current
                return
            if isinstance(child, _SCOPES):
                continue
            walk(child, child if isinstance(child, _LOOPS) else current)

    walk(loop, loop)
    return found


def _index_verdict(lbl: str, f: Facts, first_bad: int, length: int) -> Verdict:
    if f.kind in ("list", "tuple"):
        return Verdict("IndexError", f"{f.kind} index out of range", "implementation error",
                       [f"{lbl}: {f.kind} of length {length}"], 0.85)
    return Verdict("IndexError", f"index {first_bad} is out of bounds for axis 0 with size {length}",
                   "implementation error", [describe(lbl, f)], 0.85)


def _array_length(f: Facts | None) -> int | None:
    if f is None or f.truncated:
        return None
    if f.kind in ("list", "tuple"):
        return f.length
    shp = shape_of(f)
    if f.kind == "ndarray" and shp:
        return shp[0]
    return None


@rule("loop-index", needs_probe=True)
def loop_index(ctx: RuleContext) -> Iterator[Finding]:
    """A loop index (range, enumerate, or a counter) that reaches past the end of the array it indexes."""
    for loop in ctx.nodes(ast.For):
        assert isinstance(loop, ast.For)
        if not ctx.is_certain(loop) or _jumps(loop):
            continue
        indices = _loop_indices(ctx, loop)
        if not indices:
            continue
        stored = {n.id for n in _own_nodes(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        for node in _own_nodes(loop):
            if not (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                    and isinstance(node.slice, ast.Name) and node.slice.id in indices
                    and isinstance(node.value, ast.Name) and node.value.id not in stored):
                continue
            if not is_certain(node, ctx.analysis.parents, stop=loop) or _in_nested_loop(ctx, node, loop):
                continue
            if _mutated_in_loop(loop, node.value.id):
                continue
            values, step_stmt = indices[node.slice.id]
            if step_stmt is not None and _before(ctx, step_stmt, node):
                step = values[1] - values[0] if len(values) > 1 else None
                if step is None:
                    continue
                values = [v + step for v in values]
            f = value(ctx, node.value)
            length = _array_length(f)
            if f is None or length is None or any(v < -length for v in values):
                continue
            bad = [v for v in values if v >= length]
            if bad:
                v = _index_verdict(label(ctx, node.value), f, bad[0], length)
                v.evidence.append(f"the loop runs {len(values)} times; {node.slice.id} reaches {max(values)}")
                yield emit(ctx, node, "loop-index", v)
                return


def _in_nested_loop(ctx: RuleContext, node: ast.AST, loop: ast.For) -> bool:
    cur = ctx.parent(node)
    while cur is not None and cur is not loop:
        if isinstance(cur, _LOOPS + (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp) + _SCOPES):
            return True
        cur = ctx.parent(cur)
    return False


def _mutated_in_loop(loop: ast.For, name: str) -> bool:
    """A method that may grow or shrink a list (append, pop, ...) called on `name` in the loop."""
    for node in _own_nodes(loop):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == name
                and node.func.attr in ("append", "extend", "insert", "pop", "remove", "clear", "resize")):
            return True
    return False


def _before(ctx: RuleContext, stmt: ast.AST, node: ast.AST) -> bool:
    """The loop-body statement `stmt` comes before the statement holding `node`."""
    return (getattr(stmt, "lineno", 0), getattr(stmt, "col_offset", 0)) < (
        getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
