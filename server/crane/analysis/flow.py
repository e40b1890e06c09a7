"""The flow-sensitive abstract evaluator: what each name holds at each statement of the target cell.

The environment maps name -> Facts | None (None: bound but unknown) and starts as the probe's facts. The
cell's statements are walked in execution order; the environment BEFORE each statement is recorded, so the
value of any expression can be computed at its own position (`FlowResult.value`). A name keeps its live
kernel facts until the cell rebinds it, stores into it (`x[...] = `, `x.a = `), augments it, deletes it,
calls a mutating method on it (`inplace=True`, list/dict mutators, `fit`), or passes it to a function that
may mutate it (one not imported from a library); then it holds what the evaluator can compute, else None.

Derived values are synthesised Facts (see `crane.analysis.derive`). Loop bodies are evaluated once; names
bound or mutated in a loop, an if/else branch or a try are unknown after it unless every path agrees.
Nothing here raises: an internal error makes the value unknown.
"""

from __future__ import annotations

import ast
from typing import Any

import msgspec

from crane.analysis import derive
from crane.analysis.bindings import TRY_NODES
from crane.analysis.cell import CellAnalysis
from crane.analysis.extract import dotted
from crane.probe.facts import Facts, ProbeResult

Env = dict[str, Any]  # name -> Facts | tuple | None

LIST_DICT_MUTATORS = {
    "append", "extend", "insert", "remove", "pop", "clear", "update", "setdefault", "sort", "reverse", "popitem",
    "add", "discard", "difference_update", "intersection_update", "symmetric_difference_update",
    "fill", "resize", "put", "itemset", "setflags", "partition", "set_axis", "set_index", "rename_axis",
}
PURE_KINDS = {"dataframe", "series", "ndarray", "scalar", "str", "tuple", "module", "function", "class"}
FIT_METHODS = {"fit", "fit_transform", "fit_predict", "partial_fit", "fit_resample"}


class FlowResult:
    """Environments before every statement of a cell, and expression values computed from them."""

    def __init__(self, analysis: CellAnalysis, probe: ProbeResult | None, scope: Any = None):
        self.analysis = analysis
        self.probe = probe
        self.scope = scope
        self.live: dict[str, Facts] = dict(probe.facts) if probe else {}
        self.envs: dict[ast.AST, Env] = {}
        self.aliases: dict[str, str] = {}
        for imp in analysis.imports:
            if imp.bound != "*":
                self.aliases[imp.bound] = imp.target
        self._cache: dict[ast.AST, Any] = {}

    # -- queries ------------------------------------------------------------------------------------
    def env_at(self, node: ast.AST) -> Env | None:
        cur: ast.AST | None = node
        parents = self.analysis.parents
        while cur is not None:
            if isinstance(cur, ast.stmt) and cur in self.envs:
                return self.envs[cur]
            cur = parents.get(cur)
        return None

    def value(self, node: ast.AST) -> Facts | None:
        v = self._value(node)
        return v if isinstance(v, Facts) else None

    def _value(self, node: ast.AST) -> Any:
        if node in self._cache:
            return self._cache[node]
        env = self.env_at(node)
        result = None
        if env is not None:
            try:
                result = self.eval(node, env)
            except Exception:
                result = None
        self._cache[node] = result
        return result

    def is_live(self, name: str, at: ast.AST) -> bool:
        env = self.env_at(at)
        return env is not None and name in self.live and env.get(name) is self.live[name] and not self._local(name, at)

    def qualname(self, node: ast.AST) -> str | None:
        text = dotted(node)
        if text is None:
            return None
        base, _, rest = text.partition(".")
        target = self.aliases.get(base)
        if target is None and base not in self.analysis.stored_names:
            # The kernel's own answer for a live class or function (whatever the notebook's import history).
            f = self.live.get(base)
            if f is not None and f.kind in ("class", "function"):
                target = f.public_name or f.qualname
        if target is None and self.scope is not None:
            target = self.scope.import_target(base)
        if target is None:
            f = self.live.get(base)
            if f is not None and f.kind == "module" and f.module_name:
                target = f.module_name
        if target is None:
            return text
        return f"{target}.{rest}" if rest else target

    # -- expressions --------------------------------------------------------------------------------
    def _local(self, name: str, node: ast.AST) -> bool:
        """The name is bound by an enclosing comprehension/lambda/def at this node (not the global)."""
        cur = self.analysis.parents.get(node)
        while cur is not None:
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return True
            if isinstance(cur, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                for g in cur.generators:
                    if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(g.target)):
                        return True
            cur = self.analysis.parents.get(cur)
        return False

    def eval(self, node: ast.AST, env: Env) -> Any:
        if isinstance(node, ast.Name):
            if self._local(node.id, node):
                return None
            return env.get(node.id)
        if isinstance(node, ast.Constant):
            return derive.constant(node.value)
        if isinstance(node, ast.Tuple):
            return tuple(self.eval(e, env) for e in node.elts)
        if isinstance(node, ast.Subscript):
            base = self.eval(node.value, env)
            if isinstance(base, tuple):
                i = _literal(node.slice)
                return base[i] if isinstance(i, int) and -len(base) <= i < len(base) else None
            if not isinstance(base, Facts):
                return None
            key = _literal(node.slice, _NO)
            if key is _NO:
                mask = self.eval(node.slice, env)
                if isinstance(mask, Facts) and mask.kind == "series" and mask.dtype == "bool":
                    return derive.row_subset(base, None, f"{ast.unparse(node)}")
                return None
            return derive.subscript(base, key, ast.unparse(node))
        if isinstance(node, ast.Attribute):
            base = self.eval(node.value, env)
            if isinstance(base, Facts):
                return derive.attribute(base, node.attr, ast.unparse(node))
            return None
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left = self.eval(node.left, env)
            if isinstance(left, Facts) and left.kind == "series":
                return derive.bool_series(left, ast.unparse(node))
            return None
        if isinstance(node, ast.Call):
            return self._call(node, env)
        return None

    def _call(self, node: ast.Call, env: Env) -> Any:
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        text = ast.unparse(node)
        if isinstance(node.func, ast.Attribute):
            base = self.eval(node.func.value, env)
            if (isinstance(base, Facts) and base.kind == "estimator" and node.func.attr in ("fit_transform", "transform")
                    and len(node.args) == 1 and not kwargs):
                x = self.eval(node.args[0], env)
                return derive.scaled(base, x, node.func.attr == "fit_transform", text) if isinstance(x, Facts) else None
            if isinstance(base, Facts) and base.kind != "module":
                args = [_literal(a, _NO) for a in node.args]
                kw = {k: _literal(v, _NO) for k, v in kwargs.items()}
                return derive.method(base, node.func.attr, args, kw, text)
        q = self.qualname(node.func) or ""
        last = q.rsplit(".", 1)[-1]
        if last == "train_test_split":
            arrays = [self.eval(a, env) for a in node.args]
            kw = {k: _literal(v, _NO) for k, v in kwargs.items()}
            return derive.train_test_split(arrays, kw, [ast.unparse(a) for a in node.args])
        if q in ("torch.from_numpy", "torch.as_tensor", "torch.tensor") and len(node.args) == 1 and not kwargs:
            arg = self.eval(node.args[0], env)
            if isinstance(arg, Facts):
                return derive.numpy_to_tensor(arg, text)
        if q.startswith("sklearn.preprocessing.") and not node.args and not kwargs:
            return derive.scaler(q, text)
        if q == "matplotlib.pyplot.subplots" and len(node.args) <= 2:
            grid = [_literal(a, _NO) for a in node.args] + [_literal(kwargs[k], _NO) if k in kwargs else 1
                                                            for k in ("nrows", "ncols")[len(node.args):]]
            squeeze = _literal(kwargs["squeeze"], _NO) if "squeeze" in kwargs else True
            return derive.subplots(grid, squeeze, text)
        if q in ("numpy.array", "numpy.asarray") and len(node.args) == 1 and not kwargs:
            arg = self.eval(node.args[0], env)
            if isinstance(arg, Facts):
                return derive.to_numpy(arg, text)
        return None

    # -- statements ---------------------------------------------------------------------------------
    def run(self) -> FlowResult:
        env: Env = dict(self.live)
        if self.analysis.tree is not None:
            self._block(self.analysis.tree.body, env)
        return self

    def _block(self, body: list[ast.stmt], env: Env) -> None:
        for s in body:
            self.envs[s] = dict(env)
            try:
                self._stmt(s, env)
            except Exception:
                for n in _touched(s):
                    env[n] = None

    def _stmt(self, s: ast.stmt, env: Env) -> None:  # noqa: C901
        if isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None:
            v = self._value(s.value)
            for t in s.targets if isinstance(s, ast.Assign) else [s.target]:
                self._assign(t, v, env)
            self._effects(s.value, env)
        elif isinstance(s, ast.AugAssign):
            self._effects(s.value, env)
            base = _base_name(s.target)
            if base:
                env[base] = None
        elif isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
            self._effects(s.iter if not isinstance(s, ast.While) else s.test, env)
            inner = dict(env)
            if not isinstance(s, ast.While):
                self._assign(s.target, None, inner)
            self._block(s.body, inner)
            self._block(s.orelse, dict(inner))
            for n in _touched(s) | _changed(env, inner):
                env[n] = None
        elif isinstance(s, ast.If):
            self._effects(s.test, env)
            a, b = dict(env), dict(env)
            self._block(s.body, a)
            self._block(s.orelse, b)
            for n in set(a) | set(b):
                va, vb = a.get(n, _NO), b.get(n, _NO)
                if va is not vb:
                    env[n] = None
                elif va is not _NO:
                    env[n] = va
        elif isinstance(s, TRY_NODES):
            inner = dict(env)
            self._block(s.body, inner)
            for h in s.handlers:
                self._block(h.body, dict(inner))
            self._block(s.orelse, dict(inner))
            for n in _touched(s) | _changed(env, inner):
                env[n] = None
            self._block(s.finalbody, env)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self._effects(item.context_expr, env)
                if item.optional_vars is not None:
                    self._assign(item.optional_vars, None, env)
            self._block(s.body, env)
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                if isinstance(t, ast.Name):
                    env.pop(t.id, None)
                elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    base = env.get(t.value.id)
                    key = _literal(t.slice, _NO)
                    new = derive.drop(base, [key], "columns", ast.unparse(t.value)) if isinstance(base, Facts) else None
                    env[t.value.id] = new
                else:
                    target_base = _base_name(t)
                    if target_base:
                        env[target_base] = None
        elif isinstance(s, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for n in _touched(s):
                env[n] = None
        elif isinstance(s, ast.Expr):
            self._effects(s.value, env)
        else:
            for n in _touched(s):
                env[n] = None
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.expr):
                    self._effects(child, env)

    def _assign(self, t: ast.AST, v: Any, env: Env) -> None:
        if isinstance(t, ast.Name):
            env[t.id] = v
        elif isinstance(t, (ast.Tuple, ast.List)):
            vals = v if isinstance(v, tuple) and len(v) == len(t.elts) else (None,) * len(t.elts)
            for e, ev in zip(t.elts, vals, strict=False):
                self._assign(e, ev, env)
        elif isinstance(t, ast.Starred):
            self._assign(t.value, None, env)
        elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
            base = env.get(t.value.id)
            key = _literal(t.slice, _NO)
            new = None
            if isinstance(base, Facts) and base.kind == "dataframe" and isinstance(key, (str, int)):
                new = derive.set_column(base, key, v if isinstance(v, Facts) else None)
            env[t.value.id] = new
        else:
            b = _base_name(t)
            if b:
                env[b] = None

    def _effects(self, expr: ast.AST, env: Env) -> None:
        """Apply the mutations the calls in `expr` make to names (in place on env)."""
        for call in _calls(expr):
            f = call.func
            if isinstance(f, ast.Attribute):
                name = _base_name(f.value)
                if not name or name not in env:
                    continue
                cur = env.get(name)
                inplace = any(k.arg == "inplace" and _literal(k.value) is True for k in call.keywords)
                if inplace and self._chained_no_op(f.value, cur):
                    continue
                if inplace:
                    if isinstance(cur, Facts) and isinstance(f.value, ast.Name) and all(k.arg for k in call.keywords):
                        args = [_literal(a, _NO) for a in call.args]
                        kw = {k.arg: _literal(k.value, _NO) for k in call.keywords if k.arg and k.arg != "inplace"}
                        env[name] = derive.method(cur, f.attr, args, kw, name)
                    else:
                        env[name] = None
                elif f.attr in LIST_DICT_MUTATORS or (f.attr.endswith("_") and not f.attr.startswith("_")):
                    env[name] = None
                elif isinstance(cur, Facts) and cur.kind == "estimator" and f.value.__class__ is ast.Name:
                    if f.attr in FIT_METHODS:
                        env[name] = derive.fitted(cur)
                    elif f.attr.startswith("set_"):
                        env[name] = None
                elif isinstance(cur, Facts) and cur.kind not in PURE_KINDS and isinstance(f.value, ast.Name):
                    env[name] = None
            elif isinstance(f, ast.Name):
                if self._imported(f.id) or f.id in _PURE_BUILTINS:
                    continue
                if f.id in ("exec", "eval", "setattr", "delattr", "globals", "vars"):
                    for n in list(env):
                        env[n] = None
                    continue
                cls = env.get(f.id)
                if isinstance(cls, Facts) and cls.kind == "class":
                    continue
                for a in list(call.args) + [k.value for k in call.keywords]:
                    arg_base = _base_name(a)
                    if arg_base and arg_base in env:
                        env[arg_base] = None
                info = self.analysis.functions.get(f.id)
                if info is not None:
                    for n in {x.id for x in info.global_loads} | info.global_stores:
                        if n in env:
                            env[n] = None

    def _chained_no_op(self, recv: ast.expr, frame: Any) -> bool:
        """An in-place method on a column selected from a live pandas frame (`df['c'].fillna(0, inplace=True)`,
        `df.c.replace(..., inplace=True)`, `df[['a', 'b']].fillna(...)`) changes nothing in pandas 3: under
        copy-on-write the selection is a new object (pandas only warns: ChainedAssignmentError)."""
        version = self.probe.libraries.get("pandas") if self.probe is not None else None
        if not version or not version.split(".")[0].isdigit() or int(version.split(".")[0]) < 3:
            return False
        if not isinstance(frame, Facts) or frame.kind != "dataframe" or frame.columns is None:
            return False
        names = {c.name for c in frame.columns}
        if isinstance(recv, ast.Subscript) and isinstance(recv.value, ast.Name):
            key = _literal(recv.slice, _NO)
            keys = key if isinstance(key, list) else [key]
            return bool(keys) and all(isinstance(k, str) and k in names for k in keys)
        if isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name):
            return recv.attr in names
        return False

    def _imported(self, name: str) -> bool:
        if name in self.aliases:
            return True
        if self.scope is not None and self.scope.import_target(name):
            return True
        f = self.live.get(name)
        return f is not None and f.kind == "module"


_PURE_BUILTINS = {
    "print", "len", "type", "isinstance", "str", "int", "float", "bool", "list", "dict", "set", "tuple", "range",
    "enumerate", "zip", "sorted", "sum", "min", "max", "abs", "round", "repr", "hasattr", "getattr", "id", "map",
    "filter", "any", "all", "display", "iter", "next", "open", "format", "hash", "divmod", "pow", "reversed",
    "frozenset", "ord", "chr", "hex", "bin", "oct", "callable", "issubclass", "dir", "help", "input", "slice",
}


class _No:
    pass


_NO = _No()


def _literal(node: ast.AST, default: Any = None) -> Any:
    try:
        return ast.literal_eval(node)
    except Exception:
        return default


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _calls(expr: ast.AST) -> list[ast.Call]:
    out = []

    def walk(n: ast.AST) -> None:
        for c in ast.iter_child_nodes(n):
            if not isinstance(c, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(c)
        if isinstance(n, ast.Call):
            out.append(n)

    walk(expr)
    return out


def _touched(s: ast.AST) -> set[str]:
    """Names a statement may rebind or mutate (outside nested function bodies)."""
    out = set()
    for n in ast.walk(s):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Attribute, ast.Subscript)) and not isinstance(n.ctx, ast.Load):
            b = _base_name(n)
            if b:
                out.add(b)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out


def _changed(before: Env, after: Env) -> set[str]:
    return {n for n in set(before) | set(after) if before.get(n, _NO) is not after.get(n, _NO)}


def evaluate_cell(analysis: CellAnalysis, probe: ProbeResult | None, scope: Any = None) -> FlowResult:
    """Run the abstract evaluator over a cell (never raises)."""
    flow = FlowResult(analysis, probe, scope)
    try:
        return flow.run()
    except Exception:
        return FlowResult(analysis, probe, scope)


def replace(f: Facts, **changes: Any) -> Facts:
    return msgspec.structs.replace(f, **changes)
