"""The names a cell reads, found in the daemon (never with the kernel's `transform_cell`, which runs the user's
input transformers and re-tokenises a cell once per `!`/`%` escape).

A transplant copies these names from the kernel. IPython syntax is handled line by line without IPython: a line
whose first non-blank character is `!` or `%` (or ends with `?`) contributes the identifiers in its text (`!ls
{d}`, `%timeit f(x)`) and is blanked; `a = !cmd {x}` / `a = %magic x` read the identifiers right of `=`; a cell
magic's body is Python for the magics that run it (`%%time`, ...), else text whose identifiers count. The rest is
parsed with `ast`: every `Name` loaded or deleted, and the targets of augmented assignments. When the rewritten text still
does not parse, every identifier of the cell counts (a superset: a name too many is copied, never one too few).
Linear in the cell's size. Where the cell reaches the namespace by a name held in a string (`globals()['x']`,
`'x' in vars()`, `get_ipython().user_ns.get('x')`, `eval('x + 1')`, `getattr(sys.modules['__main__'], 'x')`:
`DYNAMIC_READ`), the identifiers in its string constants (`cell_strings`) are copied too, where the kernel can
(kernel/export.py: a guess, never the export's failure).
"""

from __future__ import annotations

import ast
import functools
import re

from crane.analysis.transform import PYTHON_BODY_CELL_MAGICS

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# code that reads the namespace by a name held in a string or as a whole (a namespace's mapping, `eval`/`exec` of
# text): a kernel name may be read that the cell never names as code
DYNAMIC_READ = re.compile(r"(?<![.\w])(?:globals|vars|locals|dir|eval|exec)\s*\(|\buser_(?:global_)?ns\b|\b__dict__\b|"
                          r"(?<![\'\"])\b__main__\b(?![\'\"])|\bsys\s*\.\s*modules\b|\bf_globals\b")
_ESCAPED_ASSIGN = re.compile(r"^(\s*)([A-Za-z_][\w.,\s\[\]]*?)\s*=\s*([!%].*)$")


def _idents(text: str, out: dict) -> None:
    for n in _IDENT.findall(text):
        out.setdefault(n, None)


@functools.lru_cache(maxsize=16)
def _python(source: str) -> tuple[ast.AST | None, tuple[str, ...]]:
    """(`source`'s Python part parsed, IPython's escapes blanked; the identifiers the escapes and a non-Python cell
    magic's text contribute, in first-seen order). The tree is None for a non-Python cell magic and for text that
    still does not parse (then every identifier of the cell is among the second). One parse per cell for
    `cell_names` and `cell_strings` (kept for the last few cells: the tree is only read)."""
    out: dict = {}
    lines = source.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        magic = lines[first].lstrip()[2:].split(None, 1)
        _idents(magic[1] if len(magic) > 1 else "", out)
        if not magic or magic[0] not in PYTHON_BODY_CELL_MAGICS:
            _idents("\n".join(lines[first + 1:]), out)
            return None, tuple(out)
        lines = lines[first + 1:]
    python: list[str] = []
    for ln in lines:
        stripped = ln.lstrip()
        indent = ln[: len(ln) - len(stripped)]
        m = _ESCAPED_ASSIGN.match(ln)
        if m and not stripped.startswith(("!", "%")):
            _idents(m.group(3), out)
            python.append(f"{m.group(1)}{m.group(2)} = None")
        elif stripped.startswith(("!", "%")) or (stripped.endswith("?") and not stripped.startswith("#")):
            _idents(stripped.lstrip("!%").rstrip("?"), out)
            python.append(f"{indent}pass" if stripped else "")
        else:
            python.append(ln)
    try:
        return ast.parse("\n".join(python)), tuple(out)
    except (SyntaxError, ValueError):
        _idents(source, out)
        return None, tuple(out)


def cell_names(source: str) -> list[str]:
    """The names `source` reads, in first-seen order."""
    tree, escaped = _python(source)
    out: dict = dict.fromkeys(escaped)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, None)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Load, ast.Del)):
            out.setdefault(node.id, None)
    return list(out)


def cell_read_first(source: str) -> list[str]:
    """The names of `cell_names(source)` that a read may find in the kernel's namespace: all but those the cell
    surely binds before any read of them (`con = sqlite3.connect(p)` then `con.execute(...)`: the kernel's `con`, an
    earlier run's connection that cannot be copied, is never read, so the copy does without it; `cell_rebinds` has
    it, copied only where its value has a finalizer). Conservative: a name read in a nested function, class body,
    lambda or comprehension counts where that is defined; a binding inside a compound statement (`if`, `for`,
    `while`, `try`, `with`'s body, `match`) counts only within it; `with ... as n` binds `n` for what follows; `del`
    unbinds; a walrus, a star import and IPython's escapes bind nothing (their identifiers are all read)."""
    names = cell_names(source)
    tree, escaped = _python(source)
    if not isinstance(tree, ast.Module):
        return names
    first: set = set(escaped)
    _bound_first(tree.body, set(), first)
    return [n for n in names if n in first]


def _reads(node: ast.AST, bound: set, first: set) -> None:
    """Every name `node` reads (loaded, deleted, augmented) that `bound` lacks, into `first`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Name):
            if sub.target.id not in bound:
                first.add(sub.target.id)
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Load, ast.Del)) and sub.id not in bound:
            first.add(sub.id)


def _stored(target: ast.AST) -> list[str]:
    """The names an assignment's `target` binds when it succeeds (`a`, `a, (b, *c)`; not `a.b`, `a[i]`)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _stored(t)]
    if isinstance(target, ast.Starred):
        return _stored(target.value)
    return []


def _bound_first(body: list, bound: set, first: set) -> None:
    """Walk the statements of `body` in order: `first` gains each name read where `bound` does not hold it, and
    `bound` (the caller's copy) the names each statement surely binds for the statements after it."""
    for st in body:
        if isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            if isinstance(st, ast.AnnAssign):
                _reads(st.annotation, bound, first)
            if st.value is not None:
                _reads(st.value, bound, first)
            for t in targets:
                _reads(t, bound, first)  # (`a.b = v`, `a[i] = v` read `a`)
            if st.value is not None:
                bound.update(n for t in targets for n in _stored(t))
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in st.names if a.name != "*")
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            _reads(st, bound, first)  # (decorators, defaults, bases; the body's reads count here too)
            bound.add(st.name)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            for item in st.items:
                _reads(item.context_expr, bound, first)
                if item.optional_vars is not None:
                    _reads(item.optional_vars, bound, first)
                    bound.update(_stored(item.optional_vars))
            _bound_first(st.body, set(bound), first)  # (an exception its __exit__ swallows may end the body early)
        elif isinstance(st, ast.If):
            _reads(st.test, bound, first)
            _bound_first(st.body, set(bound), first)
            _bound_first(st.orelse, set(bound), first)
        elif isinstance(st, (ast.For, ast.AsyncFor)):
            _reads(st.iter, bound, first)
            _reads(st.target, bound, first)
            _bound_first(st.body, bound | set(_stored(st.target)), first)
            _bound_first(st.orelse, set(bound), first)
        elif isinstance(st, ast.While):
            _reads(st.test, bound, first)
            _bound_first(st.body, set(bound), first)
            _bound_first(st.orelse, set(bound), first)
        elif isinstance(st, (ast.Try, ast.TryStar)):  # (`try` and `try ... except*`, 3.11+)
            _bound_first(st.body, set(bound), first)
            for h in st.handlers:
                if h.type is not None:
                    _reads(h.type, bound, first)
                _bound_first(h.body, bound | ({h.name} if h.name else set()), first)
            _bound_first(st.orelse, set(bound), first)
            _bound_first(st.finalbody, set(bound), first)
        elif isinstance(st, ast.Delete):
            _reads(st, bound, first)
            for t in st.targets:
                bound.difference_update(_stored(t))
        else:  # (an expression, `x += 1`, `match`, `assert`, ...: its reads; it binds nothing for sure)
            _reads(st, bound, first)


def cell_strings(source: str) -> list[str]:
    """The identifiers in the string constants of `source`'s Python part (IPython's escapes blanked, as
    `cell_names` reads it), in first-seen order, at most 2000: the kernel copies those it holds only where the
    cell, or a notebook function it reaches, reads the namespace by a name held in a string (kernel/export.py,
    kernel/dynamic_reads.py)."""
    tree, _escaped = _python(source)
    out: dict = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            _idents(node.value[:10000], out)
            if len(out) >= 2000:
                break
    return list(out)[:2000]


def cell_attrs(source: str) -> list[str]:
    """The attribute names `source`'s Python part reads (`np.float`, `df.b.progress_apply`; `getattr(x, 'name')` with
    a constant name), in first-seen order, at most 300: the kernel looks for them on the library modules and classes
    the cell's values are, for what an earlier cell put there (kernel/library_attrs.py). Where the cell does not
    parse, or has IPython escapes, its text's dotted identifiers too (a few more names looked up, never fewer)."""
    tree, escaped = _python(source)
    out: dict = {}
    if tree is None or escaped:  # (a line magic's or shell escape's text too: `%time y = np.float(3)`)
        for m in re.finditer(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)", source):
            out.setdefault(m.group(1), None)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Attribute):
            out.setdefault(node.attr, None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            out.setdefault(node.args[1].value, None)
        if len(out) >= 300:
            break
    return list(out)[:300]


def cell_rebinds(source: str) -> list[str]:
    """The names `source` binds at the top level without reading them first (`o = 1`, `def o(): ...`, `import x as
    o`; `cell_read_first`), in first-seen order: rebinding one frees what it held in the kernel, whose finalizers then run (the export copies
    such a name when its value has one: kernel/finalizers.rebound). [] where the cell is not plain Python."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out: dict = {}

    class _Stores(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, ast.Store):
                out.setdefault(node.id, None)

        def _named(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
            out.setdefault(node.name, None)  # (its body's names are its own)
            for d in node.decorator_list:
                self.visit(d)

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _named

        def visit_Lambda(self, node: ast.Lambda) -> None:
            pass

        def visit_alias(self, node: ast.alias) -> None:
            if node.name != "*":
                out.setdefault((node.asname or node.name).split(".")[0], None)

        def _scoped(self, node: ast.AST) -> None:
            pass  # (a comprehension's names are its own)

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _scoped

    _Stores().visit(tree)
    read = set(cell_read_first(source))
    return [n for n in out if n not in read]

