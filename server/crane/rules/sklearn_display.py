"""scikit-learn's ConfusionMatrixDisplay given `display_labels` of another length than the matrix has classes.

`ConfusionMatrixDisplay.plot()` sets one tick per class and the display labels as their texts; matplotlib then
raises "The number of FixedLocator locations (3), usually from a call to set_ticks, does not match the number of
labels (2)." (scikit-learn 1.2 to 1.9, matplotlib 3.7 to 3.11). `from_predictions` / `from_estimator` plot at
once. The number of classes comes from a live matrix's shape, from `confusion_matrix(..., labels=[...])`, or from
the kernel's unique values of y_true and y_pred (exact union when both are known completely; otherwise the larger
exact count is a lower bound, which decides only when it exceeds the labels). Only literal list/tuple labels (or
live lists/arrays of known length) are judged: a string is a sequence of characters there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import Facts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, qualname, value
from crane.rulekit.lib_helpers import NOVALUE, Verdict, has_star_args, literal, shape_of
from crane.rulekit.registry import rule

DISPLAY = "ConfusionMatrixDisplay"


def _is_sklearn(q: str | None, name: str) -> bool:
    return bool(q) and q.startswith("sklearn.") and q.rsplit(".", 1)[-1] == name  # type: ignore[union-attr]


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _binding(ctx: RuleContext, name: str, at: ast.AST) -> ast.expr | None:
    """The value of `name = <value>`, the last top-level statement binding `name` before `at`, when no statement
    between them rebinds, deletes or sets an attribute of it (None otherwise)."""
    found: ast.expr | None = None
    at_stmt = ctx.statement_of(at)
    for stmt in ctx.statements():
        if stmt is at_stmt or _pos(stmt) >= _pos(at):
            break
        touched = any(
            (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del)))
            or (isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del))
                and isinstance(n.value, ast.Name) and n.value.id == name)
            for n in ast.walk(stmt))
        if not touched:
            continue
        found = None
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == name):
            found = stmt.value
    return found


def _n_labels(ctx: RuleContext, node: ast.expr | None) -> int | None:
    """Length of literal (or live, known-length) display labels; None for a string, None or unknown."""
    if node is None:
        return None
    lit = literal(node)
    if lit is not NOVALUE:
        return len(lit) if isinstance(lit, (list, tuple)) else None
    f = value(ctx, node)
    if f is None or f.truncated:
        return None
    if f.kind in ("list", "tuple") and f.length is not None:
        return f.length
    shp = shape_of(f)
    if f.kind in ("ndarray", "series") and shp is not None and len(shp) == 1:
        return shp[0]
    return None


def _classes(f: Facts | None) -> tuple[int | None, list | None]:
    """(a lower bound on the distinct labels, the complete list of them when known exactly) of a 1-D target."""
    if f is None or f.truncated or f.has_nan or f.kind not in ("series", "ndarray", "list"):
        return None, None
    shp = shape_of(f)
    if shp is not None and len(shp) != 1:
        return None, None
    nu = f.num_unique
    complete = None
    if not f.sampled and f.unique_values is not None and nu is not None and len(f.unique_values) == nu:
        complete = list(f.unique_values)
    return nu, complete


def _same_kind(values: list) -> bool:
    strs = [isinstance(v, str) for v in values]
    return all(strs) or not any(strs)


def _count(ctx: RuleContext, y_true: ast.expr | None, y_pred: ast.expr | None, labels: ast.expr | None,
           ) -> tuple[int, bool, list[str]] | None:
    """(number of classes, exact?, evidence) of confusion_matrix(y_true, y_pred, labels=labels)."""
    if labels is not None:
        lit = literal(labels)
        if isinstance(lit, (list, tuple)) and lit:
            return len(lit), True, [f"labels={label(ctx, labels)}: {len(lit)} classes"]
        return None
    if y_true is None or y_pred is None:
        return None
    ft, fp = value(ctx, y_true), value(ctx, y_pred)
    (lt, ct), (lp, cp) = _classes(ft), _classes(fp)
    ev = []
    for node, n, c in ((y_true, lt, ct), (y_pred, lp, cp)):
        if n is not None:
            shown = f" ({', '.join(repr(v) for v in c)})" if c is not None else ""
            ev.append(f"{label(ctx, node)}: {n} distinct labels{shown}")
    if ct is not None and cp is not None:
        both = ct + cp
        if not _same_kind(both):
            return None  # "Mix of label input types" comes first
        union = len(set(both))
        return union, True, ev + [f"confusion matrix: {union} x {union}"]
    bounds = [n for n in (lt, lp) if n is not None]
    if not bounds:
        return None
    return max(bounds), False, ev


def _matrix_classes(ctx: RuleContext, node: ast.expr | None, at: ast.AST) -> tuple[int, bool, list[str]] | None:
    if node is None:
        return None
    call = node
    if isinstance(node, ast.Name):
        bound = _binding(ctx, node.id, at)
        if bound is None:
            f = value(ctx, node)
            shp = shape_of(f)
            if f is not None and f.kind == "ndarray" and shp is not None and len(shp) == 2 and shp[0] == shp[1]:
                return shp[0], True, [f"{node.id}: array {tuple(shp)}"]
            return None
        call = bound
    if not isinstance(call, ast.Call) or has_star_args(call) or not _is_sklearn(qualname(ctx, call.func),
                                                                               "confusion_matrix"):
        return None
    return _count(ctx, ctx.arg(call, 0, "y_true"), ctx.arg(call, 1, "y_pred"), ctx.kwarg(call, "labels"))


def _verdict(n: int, exact: bool, n_labels: int, ev: list[str], labels_text: str) -> Verdict | None:
    if n == n_labels or (not exact and n < n_labels):
        return None
    return Verdict(
        "ValueError",
        f"The number of FixedLocator locations ({n}), usually from a call to set_ticks, does not match the number "
        f"of labels ({n_labels}).", "implementation error",
        ev + [f"display_labels={labels_text}: {n_labels} labels for {'' if exact else 'at least '}{n} classes"],
        0.9)


def _display_call(ctx: RuleContext, recv: ast.expr, at: ast.AST) -> ast.Call | None:
    """The `ConfusionMatrixDisplay(...)` call a `.plot()` receiver was built by in the cell."""
    node: ast.expr | None = recv
    if isinstance(recv, ast.Name):
        node = _binding(ctx, recv.id, at)
    if isinstance(node, ast.Call) and not has_star_args(node) and _is_sklearn(qualname(ctx, node.func), DISPLAY):
        return node
    return None


@rule("sklearn-display", needs_probe=True)
def confusion_display(ctx: RuleContext) -> Iterator[Finding]:
    """ConfusionMatrixDisplay plotted with display_labels whose count differs from the matrix's classes."""
    for call in ctx.calls():
        if not isinstance(call.func, ast.Attribute) or not ctx.is_certain(call) or has_star_args(call):
            continue
        attr = call.func.attr
        found = None
        if attr == "plot":
            ctor = _display_call(ctx, call.func.value, call)
            if ctor is None:
                continue
            labels = ctx.kwarg(ctor, "display_labels")
            counted = _matrix_classes(ctx, ctx.arg(ctor, 0, "confusion_matrix"), ctor)
            found = (labels, counted)
        elif attr in ("from_predictions", "from_estimator") and _is_sklearn(qualname(ctx, call.func.value), DISPLAY):
            labels = ctx.kwarg(call, "display_labels")
            if attr == "from_predictions":
                counted = _count(ctx, ctx.arg(call, 0, "y_true"), ctx.arg(call, 1, "y_pred"), ctx.kwarg(call, "labels"))
            else:  # the predictions are unknown: y's own labels are a lower bound
                counted = _count(ctx, ctx.arg(call, 2, "y"), ctx.arg(call, 2, "y"), ctx.kwarg(call, "labels"))
                if counted is not None and ctx.kwarg(call, "labels") is None:
                    counted = (counted[0], False, counted[2][:1])
            found = (labels, counted)
        if found is None or found[1] is None:
            continue
        labels, (n, exact, ev) = found[0], found[1]
        n_labels = _n_labels(ctx, labels)
        if labels is None or n_labels is None:
            continue
        v = _verdict(n, exact, n_labels, ev, label(ctx, labels))
        if v is not None:
            yield emit(ctx, call, "sklearn-display", v)
            return
