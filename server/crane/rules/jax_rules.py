"""JAX rule: Python control flow on a traced argument of a jitted function.

Under `jax.jit` every argument not named in `static_argnums`/`static_argnames` is a tracer; `if`, `while`, `assert`,
a conditional expression, `and`/`or`/`not` and `bool()` on a value computed from it call `Tracer.__bool__`, which
raises TracerBoolConversionError (a ConcretizationTypeError) while the function is traced, i.e. at its first call.
The probe gives a live jitted function's static arguments and the source of the wrapped function and of the plain
functions it names (JitFacts); the rule follows the traced arguments through direct calls and `jax.grad(f)(...)` /
`jax.value_and_grad(f)(...)` into those functions. A test that uses only static properties of a tracer (`.shape`,
`.ndim`, `.dtype`, `.size`, `len(x)`, `x is None`, `isinstance`) is fine and not judged.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import Facts, JitFacts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit
from crane.rulekit.lib_helpers import Verdict
from crane.rulekit.registry import rule

_STATIC_ATTRS = {"shape", "ndim", "dtype", "size", "aval", "weak_type"}
_STATIC_CALLS = {"len", "isinstance", "type", "callable", "hasattr"}
_GRAD_WRAPPERS = {"grad", "value_and_grad"}


def _parse_def(source: str) -> ast.FunctionDef | None:
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            return node
    return None


def _dynamic_uses(expr: ast.AST, traced: set[str]) -> str | None:
    """A traced name the expression's truth value depends on (not through a static property), or None."""

    def visit(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return node.id if node.id in traced else None
        if isinstance(node, ast.Attribute):
            if node.attr in _STATIC_ATTRS:
                return None
            return visit(node.value)
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in _STATIC_CALLS:
                return None
            return None  # what a call returns is not known (it may be static)
        if isinstance(node, ast.Compare):
            if any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                return None
            for part in [node.left, *node.comparators]:
                hit = visit(part)
                if hit:
                    return hit
            return None
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Subscript)):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.operator, ast.unaryop, ast.boolop, ast.expr_context)):
                    continue
                hit = visit(child)
                if hit:
                    return hit
            return None
        return None

    return visit(expr)


def _rebound(fn: ast.FunctionDef) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _bool_tests(fn: ast.FunctionDef) -> Iterator[tuple[ast.AST, ast.expr]]:
    for node in ast.walk(fn):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            yield node, node.test
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "bool" and node.args:
            yield node, node.args[0]


def _traced_in(
    fn: ast.FunctionDef, traced_params: set[str], callees: dict[str, str], depth: int, seen: set[str]
) -> tuple[str, str, str] | None:
    """(function name, traced parameter, test text) of the first Python test on a traced value, following calls."""
    traced = traced_params - _rebound(fn)
    for _node, test in _bool_tests(fn):
        hit = _dynamic_uses(test, traced)
        if hit:
            return fn.name, hit, ast.unparse(test)
    if depth >= 2:
        return None
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        target = call.func
        name: str | None = None
        if isinstance(target, ast.Name):
            name = target.id
        elif isinstance(target, ast.Call) and target.args and isinstance(target.args[0], ast.Name):
            wrapper = target.func
            wname = wrapper.attr if isinstance(wrapper, ast.Attribute) else getattr(wrapper, "id", None)
            if wname in _GRAD_WRAPPERS and not target.keywords:
                name = target.args[0].id
        if name is None or name not in callees or name in seen:
            continue
        callee = _parse_def(callees[name])
        if callee is None or callee.args.vararg or callee.args.kwonlyargs:
            continue
        params = [a.arg for a in callee.args.posonlyargs + callee.args.args]
        passed: set[str] = set()
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Starred):
                break
            if i < len(params) and isinstance(a, ast.Name) and a.id in traced:
                passed.add(params[i])
        for kw in call.keywords:
            if kw.arg in params and isinstance(kw.value, ast.Name) and kw.value.id in traced:
                passed.add(kw.arg)
        if passed:
            hit3 = _traced_in(callee, passed, callees, depth + 1, seen | {name})
            if hit3:
                return hit3
    return None


def jit_verdict(fname: str, f: Facts) -> Verdict | None:
    jf: JitFacts | None = f.jit
    if jf is None or not jf.source or jf.params is None:
        return None
    fn = _parse_def(jf.source)
    if fn is None or fn.args.vararg or fn.args.kwonlyargs:
        return None
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if params != jf.params:
        return None  # the source read is not the wrapped function's
    static = set(jf.static_argnames) | {params[i] for i in jf.static_argnums if 0 <= i < len(params)}
    traced = set(params) - static
    hit = _traced_in(fn, traced, dict(jf.callees or {}), 0, {fn.name})
    if hit is None:
        return None
    where, param, test = hit
    ev = [
        f"{fname} is jax.jit({jf.function}); static arguments: {sorted(static) or 'none'} (probe)",
        f"`{test}` in {where} tests a value traced from argument {param!r} with Python control flow",
    ]
    return Verdict(
        "TracerBoolConversionError",
        f"Attempted boolean conversion of traced array with shape bool[]. The error occurred while tracing "
        f"the function {jf.function} for jit. This concrete value was not available in Python because it "
        f"depends on the value of the argument {param}.",
        "implementation error",
        ev,
        0.85,
    )


@rule("jax-traced-control-flow", needs_probe=True)
def jax_traced_control_flow(ctx: RuleContext) -> Iterator[Finding]:
    """A call of a live jitted function whose body (or a function it calls) branches on a traced argument."""
    for call in ctx.calls():
        if not isinstance(call.func, ast.Name) or not ctx.is_certain(call):
            continue
        f = ctx.facts(call.func.id)
        if f is None or f.jit is None or not ctx.is_live(call.func.id, call):
            continue
        v = jit_verdict(call.func.id, f)
        if v is not None:
            yield emit(ctx, call, "jax-traced-control-flow", v)
            return
