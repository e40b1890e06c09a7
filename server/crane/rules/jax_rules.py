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


# -- jax.grad of a function whose output is visibly not a scalar ----------------------------------------------------
# jax._src.api._check_scalar: "Gradient only defined for scalar-output functions. Output had shape: (3,)."
_ELEMENTWISE = {
    "jax.numpy." + n for n in ("sin", "cos", "tan", "exp", "log", "log1p", "expm1", "tanh", "sqrt", "abs", "square",
                               "negative", "exp2", "log2", "log10", "sinh", "cosh", "arctan")
} | {"jax.nn.relu", "jax.nn.sigmoid", "jax.nn.softplus", "jax.nn.gelu", "jax.nn.silu"}
_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.FloorDiv, ast.Mod)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    out = []
    for x, y in zip(((1,) * (len(b) - len(a)) + a), ((1,) * (len(a) - len(b)) + b), strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def output_shape(ctx: RuleContext, expr: ast.expr, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    """The shape of `expr` when it is built only of the parameters (known shapes), number literals, arithmetic and
    element-wise jax functions; None for anything else (reductions, other calls, unknown names)."""
    if isinstance(expr, ast.Name):
        return shapes.get(expr.id)
    if isinstance(expr, ast.Constant) and type(expr.value) in (int, float):
        return ()
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        return output_shape(ctx, expr.operand, shapes)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, _ARITH):
        a, b = output_shape(ctx, expr.left, shapes), output_shape(ctx, expr.right, shapes)
        return _broadcast(a, b) if a is not None and b is not None else None
    if (isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords
            and ctx.qualname(expr.func) in _ELEMENTWISE):
        return output_shape(ctx, expr.args[0], shapes)
    return None


def _grad_target(ctx: RuleContext, fn: ast.expr, at: ast.AST) -> tuple[list[str], ast.expr] | None:
    """(parameter names, returned expression) of a lambda or of a one-statement function defined earlier in the cell
    (top level, not rebound before `at`)."""
    if isinstance(fn, ast.Lambda):
        a = fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            return None
        return [p.arg for p in a.args], fn.body
    if not isinstance(fn, ast.Name):
        return None
    found: ast.FunctionDef | None = None
    for stmt in ctx.statements():
        if (stmt.lineno, stmt.col_offset) >= (getattr(at, "lineno", 0), getattr(at, "col_offset", 0)):
            break
        if isinstance(stmt, ast.FunctionDef) and stmt.name == fn.id:
            found = stmt
        elif any(isinstance(n, ast.Name) and n.id == fn.id and isinstance(n.ctx, (ast.Store, ast.Del))
                 for n in ast.walk(stmt)):
            found = None
    if found is None or found.decorator_list:
        return None
    a = found.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
        return None
    body = [s for s in found.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    return [p.arg for p in a.args], body[0].value


@rule("jax-grad-output", needs_probe=True)
def jax_grad_output(ctx: RuleContext) -> Iterator[Finding]:
    """`jax.grad(f)(x)` / `jax.value_and_grad(f)(x)` where f visibly returns an array of x's (non-scalar) shape."""
    for call in ctx.calls():
        inner = call.func
        if not (isinstance(inner, ast.Call) and ctx.qualname(inner.func) in ("jax.grad", "jax.value_and_grad")
                and len(inner.args) == 1 and not inner.keywords and ctx.is_certain(call)):
            continue
        if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
            continue
        target = _grad_target(ctx, inner.args[0], call)
        if target is None:
            continue
        params, ret = target
        if len(params) != len(call.args):
            continue
        shapes: dict[str, tuple[int, ...]] = {}
        evidence = []
        for p, arg in zip(params, call.args, strict=True):
            f = ctx.value(arg)
            if isinstance(arg, ast.Constant) and type(arg.value) is float:
                shapes[p] = ()
                continue
            if f is None or f.shape is None or f.kind not in ("tensor", "ndarray") or not (f.dtype or "").startswith(
                    ("float", "bfloat")):
                continue
            shapes[p] = tuple(int(d) for d in f.shape)
            evidence.append(f"{ctx.text(arg)[:40]}: {f.kind} of shape {tuple(f.shape)}, dtype {f.dtype}")
        out = output_shape(ctx, ret, shapes)
        if out is None or out == ():
            continue
        yield ctx.finding(
            call, rule="jax-grad-output", ename="TypeError",
            message=f"Gradient only defined for scalar-output functions. Output had shape: {out}.",
            root_cause="implementation error", confidence=0.9,
            evidence=[*evidence, f"the function returns {ctx.text(ret)[:60]}: element-wise, shape {out} (jax.grad "
                      "needs a scalar: reduce it, e.g. jnp.sum, or use jax.jacobian/jax.vmap)"])
        return
