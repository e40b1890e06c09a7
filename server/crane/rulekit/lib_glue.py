"""Glue shared by the library rules: reading call sites through a RuleContext (which library function a call
is, the facts of its receiver and arguments, whether the cell may have changed an object's state before the
call) and turning a Verdict into a Finding.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.analysis.extract import dotted
from crane.finding import Finding
from crane.probe.facts import Facts
from crane.rulekit.lib_helpers import Verdict

# Methods that do not change an estimator / DataFrame / array they are called on.
READ_ONLY_METHODS = {
    "predict", "predict_proba", "predict_log_proba", "decision_function", "transform", "score", "score_samples",
    "get_params", "get_feature_names_out", "inverse_transform", "head", "tail", "describe", "info", "copy",
    "sum", "mean", "std", "min", "max", "count", "isnull", "isna", "notnull", "notna", "value_counts",
    "nunique", "unique", "astype", "reshape", "to_numpy", "tolist", "plot", "corr", "groupby", "sample",
}

LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def library_version(ctx, lib: str) -> str | None:
    probe = getattr(ctx, "probe", None)
    return probe.libraries.get(lib) if probe is not None else None


def qualname(ctx, node: ast.AST) -> str | None:
    q = ctx.qualname(node)
    return q if q else dotted(node)


def method_calls(ctx) -> Iterator[tuple[ast.Call, ast.expr, str]]:
    """(call, receiver node, method name) for every `<expr>.<method>(...)` call of the cell."""
    for call in ctx.calls():
        if isinstance(call.func, ast.Attribute):
            yield call, call.func.value, call.func.attr


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _enclosing_loops(ctx, node: ast.AST) -> list[ast.AST]:
    out: list[ast.AST] = []
    cur = ctx.parent(node)
    while cur is not None:
        if isinstance(cur, LOOPS):
            out.append(cur)
        cur = ctx.parent(cur)
    return out


def _inside(ctx, node: ast.AST, ancestor: ast.AST) -> bool:
    cur = ctx.parent(node)
    while cur is not None:
        if cur is ancestor:
            return True
        cur = ctx.parent(cur)
    return False


def state_may_change(ctx, name: str, at: ast.AST) -> bool:
    """The cell may change the object bound to `name` before `at` runs: a method call on it other than a
    read-only one, passing it to a call, or (re)binding it, earlier in the cell or anywhere in a loop
    enclosing `at`. Conservative: True also when unsure."""
    if not ctx.is_live(name, at):
        return True
    loops = _enclosing_loops(ctx, at)
    at_pos = _pos(at)
    for node in ctx.nodes():
        if node is at:
            continue
        if not (_pos(node) < at_pos or any(_inside(ctx, node, loop) for loop in loops)):
            continue
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == name
                    and f.attr not in READ_ONLY_METHODS):
                return True
            for a in list(node.args) + [k.value for k in node.keywords]:
                if isinstance(a, ast.Name) and a.id == name:
                    return True
        elif isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if isinstance(node.value, ast.Name) and node.value.id == name:
                return True
    return False


def base_name(node: ast.AST) -> str | None:
    """The variable at the root of `a.b[c].d`."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def value(ctx, node: ast.AST | None) -> Facts | None:
    return ctx.value(node) if node is not None else None


def label(ctx, node: ast.AST | None) -> str:
    text = ctx.text(node) if node is not None else ""
    return text if len(text) <= 40 else text[:37] + "..."


def emit(ctx, node: ast.AST, rule_id: str, verdict: Verdict, end_node: ast.AST | None = None) -> Finding:
    return ctx.finding(
        node,
        rule=rule_id,
        ename=verdict.ename,
        message=verdict.message,
        root_cause=verdict.root_cause,
        confidence=verdict.confidence,
        evidence=verdict.evidence,
        end_node=end_node,
    )
