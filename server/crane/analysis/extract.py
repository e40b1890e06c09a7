"""Static facts of a cell's code: imports, attribute chains, literal keys, literal file paths."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Any


@dataclass
class ImportFact:
    module: str  # full dotted module name ("sklearn.model_selection"); "" for `from . import x`
    bound: str  # the name bound in the namespace ("np", "train_test_split", "os")
    target: str  # what the bound name refers to ("numpy", "sklearn.model_selection.train_test_split")
    node: ast.Import | ast.ImportFrom
    level: int = 0  # relative import level

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


@dataclass
class AttrChain:
    text: str  # "model.feature_importances_"
    base: str  # "model"
    node: ast.Attribute  # the outermost Attribute of the chain


@dataclass
class LiteralKey:
    expr: str  # the container's text: a name or an attribute chain ("df", "self.data")
    keys: list[Any]  # the literal keys / labels looked up
    axis: str  # "key" (x[k]: dict keys, DataFrame columns, Series index) | "columns" | "index"
    node: ast.Subscript | ast.Call  # the Subscript or the drop Call
    container: ast.expr  # the container expression node
    op: str  # "load" | "del" | "drop"


@dataclass
class PathUse:
    path: str
    func: str  # callee text ("pd.read_csv", "open")
    node: ast.Call
    arg: ast.expr  # the path argument
    mode: str  # "read" | "write" | "unknown"


READERS = {
    "read_csv", "read_table", "read_excel", "read_parquet", "read_pickle", "read_feather", "read_fwf",
    "read_stata", "read_sas", "read_spss", "read_orc", "read_json",
    "load", "loadtxt", "genfromtxt", "fromfile", "imread", "load_workbook", "read_file",
}
# Readers called as plain attributes that are too generic to trust on any base (x.load(...)).
_MODULE_ONLY_READERS = {"load", "imread", "read_file", "fromfile", "load_workbook"}
_MODULE_READER_BASES = {"np", "numpy", "joblib", "plt", "pyplot", "Image", "PIL.Image", "mpimg", "torch",
                        "openpyxl", "gpd", "geopandas", "matplotlib.image", "pickle"}
_JSON_EXT = (".json", ".json.gz", ".json.bz2", ".json.zip", ".json.xz", ".jsonl")
WRITERS_PREFIX = ("to_", "save", "dump", "write")
_PATH_KWARGS = ("filepath_or_buffer", "io", "path", "fname", "file", "filename", "path_or_buf", "f", "fp")


def dotted(node: ast.AST) -> str | None:
    """'a.b.c' for a pure Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def imports(tree: ast.Module) -> list[ImportFact]:
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for al in n.names:
                if al.asname:
                    out.append(ImportFact(al.name, al.asname, al.name, n))
                else:
                    top = al.name.split(".")[0]
                    out.append(ImportFact(al.name, top, top, n))
        elif isinstance(n, ast.ImportFrom):
            mod = n.module or ""
            for al in n.names:
                if al.name == "*":
                    out.append(ImportFact(mod, "*", mod, n, n.level))
                else:
                    out.append(ImportFact(mod, al.asname or al.name, f"{mod}.{al.name}" if mod else al.name, n, n.level))
    out.sort(key=lambda f: (f.node.lineno, f.node.col_offset))
    return out


def attr_chains(tree: ast.Module, parents: dict[ast.AST, ast.AST]) -> list[AttrChain]:
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Attribute) or isinstance(parents.get(n), ast.Attribute):
            continue
        # n is the outermost attribute of its chain; record each prefix of a pure chain
        cur: ast.AST = n
        while isinstance(cur, ast.Attribute):
            text = dotted(cur)
            if text is not None and isinstance(cur.ctx, ast.Load):
                out.append(AttrChain(text, text.split(".", 1)[0], cur))
            cur = cur.value
    out.sort(key=lambda c: (c.node.lineno, c.node.col_offset, -len(c.text)))
    return out


def _label(node: ast.AST) -> tuple[bool, Any]:
    """(ok, value) for a literal str/int label (bools excluded)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return True, node.value
    return False, None


def _labels(node: ast.AST | None) -> list[Any] | None:
    if node is None:
        return None
    ok, v = _label(node)
    if ok:
        return [v]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and node.elts:
        vals = []
        for e in node.elts:
            ok, v = _label(e)
            if not ok:
                return None
            vals.append(v)
        return vals
    return None


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def literal_keys(tree: ast.Module, parents: dict[ast.AST, ast.AST]) -> list[LiteralKey]:
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript):
            base = dotted(n.value)
            if base is None:
                continue
            parent = parents.get(n)
            if isinstance(n.ctx, ast.Load):
                op = "load"
            elif isinstance(n.ctx, ast.Del):
                op = "del"
            elif isinstance(parent, ast.AugAssign) and parent.target is n:
                op = "load"
            else:
                continue
            sl = n.slice
            ok, v = _label(sl)
            if ok:
                out.append(LiteralKey(base, [v], "key", n, n.value, op))
            elif isinstance(sl, ast.List) and op == "load":
                vals = _labels(sl)
                if vals:
                    out.append(LiteralKey(base, vals, "key", n, n.value, op))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "drop":
            base = dotted(n.func.value)
            if base is None:
                continue
            errors = _kw(n, "errors")
            if errors is not None and not (isinstance(errors, ast.Constant) and errors.value == "raise"):
                continue
            if any(k.arg is None for k in n.keywords) or any(isinstance(a, ast.Starred) for a in n.args):
                continue
            for kwname, axis in (("columns", "columns"), ("index", "index")):
                vals = _labels(_kw(n, kwname))
                if vals:
                    out.append(LiteralKey(base, vals, axis, n, n.func.value, "drop"))
            labels_node = n.args[0] if n.args else _kw(n, "labels")
            vals = _labels(labels_node)
            if not vals:
                continue
            axis_node = n.args[1] if len(n.args) > 1 else _kw(n, "axis")
            if axis_node is None:
                axis = "index"
            elif isinstance(axis_node, ast.Constant) and axis_node.value in (1, "columns"):
                axis = "columns"
            elif isinstance(axis_node, ast.Constant) and axis_node.value in (0, "index", "rows"):
                axis = "index"
            else:
                continue
            out.append(LiteralKey(base, vals, axis, n, n.func.value, "drop"))
    out.sort(key=lambda k: (k.node.lineno, k.node.col_offset))
    return out


def _literal_path(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Call)
        and dotted(node.func) in ("os.path.join", "path.join", "osp.join")
        and node.args
        and not node.keywords
    ):
        parts = [_literal_path(a) for a in node.args]
        if all(isinstance(p, str) for p in parts):
            return os.path.join(*parts)  # type: ignore[arg-type]
    return None


def _looks_like_path(p: str) -> bool:
    if not p or len(p) > 500 or "\n" in p or "://" in p or any(c in p for c in "*?[{<>|"):
        return False
    return not p.lstrip().startswith(("{", "[", "<"))


def paths(tree: ast.Module) -> list[PathUse]:
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        func = dotted(n.func) or ""
        name = func.rsplit(".", 1)[-1]
        arg = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg in _PATH_KWARGS), None)
        path = _literal_path(arg)
        if path is None or not _looks_like_path(path):
            continue
        if func in ("open", "io.open", "codecs.open"):
            mode_node = n.args[1] if len(n.args) > 1 else _kw(n, "mode")
            if mode_node is None:
                mode = "read"
            elif isinstance(mode_node, ast.Constant) and isinstance(mode_node.value, str):
                mode = "write" if any(c in mode_node.value for c in "wax") else "read"
            else:
                mode = "unknown"
        elif name in READERS and isinstance(n.func, ast.Attribute):
            base = func.rsplit(".", 1)[0] if "." in func else ""
            if name in _MODULE_ONLY_READERS and base not in _MODULE_READER_BASES:
                mode = "unknown"
            elif name == "read_json" and not path.lower().endswith(_JSON_EXT):
                mode = "unknown"
            else:
                mode = "read"
        elif name.startswith(WRITERS_PREFIX) or name in ("savefig", "mkdir", "makedirs"):
            mode = "write"
        else:
            mode = "unknown"
        out.append(PathUse(path, func, n, arg, mode))  # type: ignore[arg-type]
    out.sort(key=lambda p: (p.node.lineno, p.node.col_offset))
    return out


def _root_name(node: ast.AST) -> str | None:
    """The name at the root of a subscript / attribute / call chain: `df` for `df.loc[0, "a"]`, `m.fit(X).coef_`."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None


def possibly_mutated(tree: ast.Module) -> set[str]:
    """Names whose objects a cell may change in place when it runs (beyond rebinding them): the roots of
    subscript and attribute targets (`df["c"] = 0`, `m.coef_ = w`, `del d[k]`, `x[i] += 1`), the receivers of
    method calls (`df.drop(..., inplace=True)`, `lst.append(v)`) and the names passed to calls
    (`rng.shuffle(arr)`). Conservative on purpose: it chooses which cells to re-check after a run."""
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                targets.append(node.func.value)
            targets += [a.value if isinstance(a, ast.Starred) else a for a in node.args]
            targets += [k.value for k in node.keywords]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, (ast.Subscript, ast.Attribute)) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    name = _root_name(sub)
                    if name:
                        out.add(name)
            if isinstance(node, ast.Call):
                name = _root_name(t)
                if name:
                    out.add(name)
    return out
