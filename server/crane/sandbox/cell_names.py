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


def cell_rebinds(source: str) -> list[str]:
    """The names `source` binds at the top level without reading them (`o = 1`, `def o(): ...`, `import x as o`),
    in first-seen order: rebinding one frees what it held in the kernel, whose finalizers then run (the export copies
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
    read = set(cell_names(source))
    return [n for n in out if n not in read]

