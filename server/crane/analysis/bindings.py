"""Which names a cell loads before binding them, binds, and deletes, walking its code in execution order.

Rules of the walk (module scope):
- an assignment's value is evaluated before its targets are bound; `x += 1` loads x first; `del x` needs x;
- comprehensions: the first iterable is evaluated in the enclosing scope, their targets are local;
- `lambda` and `def` bodies are NOT run at definition (only defaults, decorators and annotations are); a
  function defined in the cell and then called at module level runs its global loads at the call, against
  the names bound at that point (transitively through other cell-defined functions it calls);
- class bodies run at definition, with their own local names;
- a star import, `exec(...)`, `globals()`/`vars()`, or a magic that can bind arbitrary names (`%run`,
  `%store`, `%time stmt`, ...) makes every later name possibly bound: no later load is reported as free.
Loads in conditional code are still reported (with their node); whether they certainly run is the rules'
business (crane.analysis.certainty).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# Line magics that cannot bind names in the user namespace.
SAFE_MAGICS = {
    "matplotlib", "pip", "conda", "config", "load_ext", "reload_ext", "unload_ext", "autoreload", "aimport",
    "timeit", "xmode", "precision", "who", "whos", "who_ls", "ls", "pwd", "cd", "env", "history", "pinfo",
    "pinfo2", "pdef", "pdoc", "psource", "pfile", "lsmagic", "magic", "set_env", "pylab_off", "clear", "notebook",
    "system", "sx", "bookmark", "dhist", "pushd", "popd", "dirs", "page", "colors", "doctest_mode", "automagic",
    "autosave", "qtconsole", "connect_info", "killbgscripts", "tb", "debug", "pdb", "prun", "lprun", "mprun",
    "memit", "watermark", "sql_config", "tensorflow_version",
}

# The try statements, for isinstance: `ast.TryStar` (try/except*) exists from Python 3.11 on.
TRY_NODES: tuple[type[ast.Try | ast.TryStar], ...] = (ast.Try, getattr(ast, "TryStar", ast.Try))


@dataclass
class NameLoad:
    """A load of a name that no earlier code of the cell bound."""

    name: str
    node: ast.AST  # the ast.Name (Load, or Store for `x += 1`, or Del for `del x`)
    via: ast.Call | None = None  # the module-level call of a cell function whose body makes this load
    function: ast.AST | None = None  # that function's def node
    deleted_at: ast.Name | None = None  # the `del` (its ast.Name) of this cell that removed the name before

    @property
    def after_delete(self) -> bool:
        return self.deleted_at is not None


@dataclass
class FunctionInfo:
    name: str
    node: ast.AST
    global_loads: list[ast.Name] = field(default_factory=list)
    global_stores: set[str] = field(default_factory=set)
    called: set[str] = field(default_factory=set)


@dataclass
class Bindings:
    loads: list[NameLoad]
    stored: set[str]
    deleted: set[str]
    functions: dict[str, FunctionInfo]
    dynamic: list[ast.AST]  # nodes after which any name may be bound
    future_annotations: bool


def target_names(t: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _function_info(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> FunctionInfo:
    a = fn.args
    local = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    local |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    declared_global: set[str] = set()
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    loads: list[ast.Name] = []
    called: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                local.add(child.name)
                continue
            if isinstance(child, ast.Lambda):
                continue
            if isinstance(child, ast.Global):
                declared_global.update(child.names)
            elif isinstance(child, ast.Nonlocal):
                local.update(child.names)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                local.update((al.asname or al.name).split(".")[0] for al in child.names)
            elif isinstance(child, ast.ExceptHandler) and child.name:
                local.add(child.name)
            elif isinstance(child, ast.Name):
                if isinstance(child.ctx, ast.Load):
                    loads.append(child)
                else:
                    local.add(child.id)
            elif isinstance(child, ast.Call) and isinstance(child.func, ast.Name):
                called.add(child.func.id)
            walk(child)

    for stmt in body:
        if isinstance(stmt, ast.AST):
            walk(ast.Module(body=[stmt], type_ignores=[]) if isinstance(stmt, ast.stmt) else stmt)
    local -= declared_global
    info = FunctionInfo(getattr(fn, "name", "<lambda>"), fn)
    info.global_loads = [n for n in loads if n.id not in local]
    info.global_stores = declared_global
    info.called = called
    return info


class _Binder:
    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.stored: set[str] = set()
        self.deleted: dict[str, ast.Name] = {}
        self.loads: list[NameLoad] = []
        self.functions: dict[str, FunctionInfo] = {}
        self.all_functions: dict[str, FunctionInfo] = {}
        self.dynamic: list[ast.AST] = []
        self.classes: list[set[str]] = []
        self.future_annotations = False

    # -- names --------------------------------------------------------------------------------------
    def load(self, name: str, node: ast.AST, via: ast.Call | None = None, fn: ast.AST | None = None) -> None:
        if self.dynamic or name in self.bound or any(name in c for c in self.classes):
            return
        self.loads.append(NameLoad(name, node, via, fn, self.deleted.get(name)))

    def bind(self, name: str) -> None:
        if self.classes:
            self.classes[-1].add(name)
            return
        self.bound.add(name)
        self.stored.add(name)
        self.deleted.pop(name, None)
        self.functions.pop(name, None)

    def unbind(self, name: str, node: ast.Name) -> None:
        if self.classes:
            self.classes[-1].discard(name)
            return
        self.bound.discard(name)
        self.deleted[name] = node
        self.functions.pop(name, None)

    # -- statements ---------------------------------------------------------------------------------
    def stmts(self, body: list[ast.stmt]) -> None:
        for s in body:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:  # noqa: C901 - one case per statement kind
        if isinstance(s, ast.Assign):
            self.expr(s.value)
            for t in s.targets:
                self.target(t)
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                self.load(s.target.id, s.target)
            else:
                self.target(s.target)
            self.expr(s.value)
            self.target(s.target)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.expr(s.value)
            if s.simple and not self.future_annotations and not self.classes:
                self.expr(s.annotation)
            if s.value is not None:
                self.target(s.target)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self.expr(s.iter)
            self.target(s.target)
            self.stmts(s.body)
            self.stmts(s.orelse)
        elif isinstance(s, ast.While):
            self.expr(s.test)
            self.stmts(s.body)
            self.stmts(s.orelse)
        elif isinstance(s, ast.If):
            self.expr(s.test)
            self.stmts(s.body)
            self.stmts(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.target(item.optional_vars)
            self.stmts(s.body)
        elif isinstance(s, TRY_NODES):
            self.stmts(s.body)
            for h in s.handlers:
                self.expr(h.type)
                if h.name:
                    self.bind(h.name)
                self.stmts(h.body)
            self.stmts(s.orelse)
            self.stmts(s.finalbody)
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                for n in ([t] if not isinstance(t, (ast.Tuple, ast.List)) else t.elts):
                    if isinstance(n, ast.Name):
                        self.load(n.id, n)
                        self.unbind(n.id, n)
                    else:
                        self.target(n)
        elif isinstance(s, ast.Import):
            for al in s.names:
                self.bind(al.asname or al.name.split(".")[0])
        elif isinstance(s, ast.ImportFrom):
            if s.module == "__future__" and any(al.name == "annotations" for al in s.names):
                self.future_annotations = True
            for al in s.names:
                if al.name == "*":
                    self.dynamic.append(s)
                else:
                    self.bind(al.asname or al.name)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.exprs(s.decorator_list)
            self._arguments(s.args)
            if not self.future_annotations:
                self.expr(s.returns)
            self.bind(s.name)
            if not self.classes:
                info = _function_info(s)
                self.functions[s.name] = info
                self.all_functions[s.name] = info
        elif isinstance(s, ast.ClassDef):
            self.exprs(s.decorator_list)
            self.exprs(s.bases)
            self.exprs([k.value for k in s.keywords])
            self.classes.append(set())
            self.stmts(s.body)
            self.classes.pop()
            self.bind(s.name)
        elif isinstance(s, ast.Match):
            self.expr(s.subject)
            for case in s.cases:
                for pat in ast.walk(case.pattern):
                    if isinstance(pat, ast.MatchValue):
                        self.expr(pat.value)
                    elif isinstance(pat, ast.MatchClass):
                        self.expr(pat.cls)
                    name = getattr(pat, "name", None) or getattr(pat, "rest", None)
                    if isinstance(name, str):
                        self.bind(name)
                self.expr(case.guard)
                self.stmts(case.body)
        else:  # Expr, Return, Raise, Assert, Global, Pass, Break, Continue, ...
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.expr):
                    self.expr(child)

    def _arguments(self, a: ast.arguments) -> None:
        self.exprs(a.defaults)
        self.exprs([d for d in a.kw_defaults if d is not None])
        if not self.future_annotations:
            for x in a.posonlyargs + a.args + a.kwonlyargs + [v for v in (a.vararg, a.kwarg) if v]:
                self.expr(x.annotation)

    def target(self, t: ast.AST) -> None:
        if isinstance(t, ast.Name):
            self.bind(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self.target(e)
        elif isinstance(t, ast.Starred):
            self.target(t.value)
        elif isinstance(t, ast.Attribute):
            self.expr(t.value)
        elif isinstance(t, ast.Subscript):
            self.expr(t.value)
            self.expr(t.slice)

    # -- expressions --------------------------------------------------------------------------------
    def exprs(self, nodes) -> None:
        for n in nodes:
            self.expr(n)

    def expr(self, e: ast.AST | None, local: frozenset[str] = frozenset()) -> None:
        if e is None:
            return
        if isinstance(e, ast.Name):
            if isinstance(e.ctx, ast.Load) and e.id not in local:
                self.load(e.id, e)
            return
        if isinstance(e, ast.NamedExpr):
            self.expr(e.value, local)
            self.bind(e.target.id)
            return
        if isinstance(e, ast.Lambda):
            self.exprs(e.args.defaults)
            self.exprs([d for d in e.args.kw_defaults if d is not None])
            return
        if isinstance(e, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            self._comprehension(e, local)
            return
        for child in ast.iter_child_nodes(e):
            if isinstance(child, ast.keyword):
                self.expr(child.value, local)
            elif isinstance(child, ast.expr):
                self.expr(child, local)
        if isinstance(e, ast.Call):
            self._after_call(e, local)

    def _comprehension(self, e: ast.AST, local: frozenset[str]) -> None:
        gens = e.generators  # type: ignore[attr-defined]
        self.expr(gens[0].iter, local)
        loc = set(local)
        for i, g in enumerate(gens):
            if i:
                self.expr(g.iter, frozenset(loc))
            loc |= target_names(g.target)
            for cond in g.ifs:
                self.expr(cond, frozenset(loc))
        inner = frozenset(loc)
        if isinstance(e, ast.DictComp):
            self.expr(e.key, inner)
            self.expr(e.value, inner)
        else:
            self.expr(e.elt, inner)  # type: ignore[attr-defined]

    def _after_call(self, call: ast.Call, local: frozenset[str]) -> None:
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in ("exec", "execfile", "globals", "vars", "locals", "__import__") and not local:
                self.dynamic.append(call)
            elif f.id in self.functions and f.id not in local and not self.classes:
                self._run_function(self.functions[f.id], call, set())
        elif isinstance(f, ast.Attribute) and f.attr in ("run_line_magic", "run_cell_magic", "magic"):
            first = call.args[0] if call.args else None
            name = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
            if f.attr == "run_cell_magic" and name in ("writefile", "bash", "sh", "html", "javascript", "js",
                                                       "markdown", "latex", "svg", "script", "sql"):
                return
            if name not in SAFE_MAGICS:
                self.dynamic.append(call)

    def _run_function(self, info: FunctionInfo, call: ast.Call, seen: set[str]) -> None:
        if info.name in seen:
            return
        seen.add(info.name)
        for n in info.global_loads:
            self.load(n.id, n, via=call, fn=info.node)
        for name in info.global_stores:
            self.bind(name)
        for name in info.called:
            if name in self.functions and name not in seen:
                self._run_function(self.functions[name], call, seen)


def bindings(tree: ast.Module) -> Bindings:
    b = _Binder()
    try:
        b.stmts(tree.body)
    except RecursionError:
        pass
    stored = set(b.stored)
    for info in b.all_functions.values():  # a function may bind its `global` names when called later
        stored |= info.global_stores
    return Bindings(b.loads, stored, set(b.deleted), b.all_functions, b.dynamic, b.future_annotations)
