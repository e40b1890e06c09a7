"""The executed cells, trimmed for a prompt: comments stripped, and only the code the target depends on.

A backward pass over the top-level statements of the history (latest first) keeps a statement when it binds,
mutates or deletes a name the target needs, and then needs the names that statement reads (so the closure of
definitions behind the target's names is kept, nothing else). Imports and plots that feed nothing the target
uses are dropped; cells that raised while they ran are always kept (what they failed to define matters).
Long statements, long lines and a history over budget are cut, the farthest dependencies first, with `...`
marking every gap so the model knows code was left out.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field

from crane import pyast
from crane.notebook.model import Cell

MAX_LINE_CHARS = 160
MAX_STMT_LINES = 16  # longer statements keep their head and tail
HISTORY_BUDGET_CHARS = 3000

# Methods that change their object in place (pandas methods do so only with inplace=True).
MUTATING_METHODS = frozenset(
    "fit fit_transform partial_fit fit_generator train compile build add append extend insert remove pop "
    "popitem update clear sort reverse setdefault fill resize shuffle step backward zero_grad "
    "load_state_dict to cuda cpu eval requires_grad_ apply_ add_module register_buffer set_params "
    "set_output rename_axis set_axis __setitem__ __delitem__".split()
)
# Module functions that change their array/list argument in place (np.random.shuffle(a), random.shuffle(l)).
ARG_MUTATORS = frozenset({"shuffle", "fill_diagonal", "copyto", "put", "place", "putmask"})
# Bare calls to these (`f(...)` / `mod.f(...)`) only display: they do not mutate their arguments.
DISPLAY_ROOTS = frozenset({"print", "display", "plt", "sns", "px", "go", "len", "type", "repr", "pprint"})


@dataclass
class Stmt:
    lines: list[str]  # original source lines, comments stripped, blank lines removed
    defs: set[str] = field(default_factory=set)
    uses: set[str] = field(default_factory=set)
    is_import: bool = False
    depth: int | None = None  # None: not kept; 0: defines a name the target reads directly


@dataclass
class HistoryCell:
    number: int
    execution_count: int | None
    stmts: list[Stmt]
    error: str | None = None  # "KeyError: 'x'" when the cell raised while it ran


def strip_comments(source: str, keep_lines: bool = False) -> str:
    """Remove `#` comments; drop blank lines unless `keep_lines` (the target keeps its line numbers)."""
    lines = source.splitlines()
    cuts: dict[int, int] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                cuts[tok.start[0] - 1] = tok.start[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        cuts = {i: 0 for i, ln in enumerate(lines) if ln.lstrip().startswith("#")}
    out = []
    for i, ln in enumerate(lines):
        if i in cuts:
            ln = ln[: cuts[i]]
        ln = ln.rstrip()
        if ln or keep_lines:
            out.append(ln)
    return "\n".join(out)


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _defs_uses(node: ast.stmt) -> tuple[set[str], set[str], bool]:
    """Names a top-level statement binds, mutates or deletes (defs), and the names it reads (uses)."""
    defs: set[str] = set()
    uses: set[str] = set()
    is_import = isinstance(node, (ast.Import, ast.ImportFrom))
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for a in node.names:
            defs.add(a.asname or a.name.split(".")[0])
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        defs.add(node.name)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (uses if isinstance(sub.ctx, ast.Load) else defs).add(sub.id)
        elif isinstance(sub, (ast.Attribute, ast.Subscript)) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            r = _root(sub)  # df['x'] = ..., model.attr = ..., del d[k]
            if r:
                defs.add(r)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            inplace = any(k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True
                          for k in sub.keywords)
            r = _root(sub.func.value)
            if r and (inplace or sub.func.attr in MUTATING_METHODS):
                defs.add(r)  # df.dropna(inplace=True), model.fit(X, y), lst.append(x), model.to(device)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        if isinstance(func, ast.Name) and func.id not in DISPLAY_ROOTS or (
            isinstance(func, ast.Attribute) and func.attr in ARG_MUTATORS
        ):
            for arg in node.value.args:  # train(model, loader), np.random.shuffle(a): a bare call's arguments
                if isinstance(arg, ast.Name):
                    defs.add(arg.id)
    return defs, uses, is_import


def _cap_lines(lines: list[str]) -> list[str]:
    out = [ln if len(ln) <= MAX_LINE_CHARS else ln[: MAX_LINE_CHARS - 3] + "..." for ln in lines]
    if len(out) > MAX_STMT_LINES:
        head, tail = out[: MAX_STMT_LINES - 4], out[-3:]
        m = re.match(r"\s*", out[1] if len(out) > 1 else "")
        indent = m.group(0) if m else ""
        out = [*head, f"{indent}...", *tail]
    return out


def parse_cell(cell: Cell, error: str | None = None) -> HistoryCell:
    """Split a cell into top-level statements with the names each binds/mutates and reads."""
    from crane.analysis.transform import transform

    source = cell.source
    try:
        python, line_map, _magic = transform(source)
        tree = pyast.parse(python)
    except Exception:
        tree, line_map, python = None, [], source
    orig_lines = source.splitlines()
    stmts: list[Stmt] = []
    if tree is None:  # unparseable: one opaque statement, names by regex
        text = strip_comments(source).splitlines()
        words = set(re.findall(r"[A-Za-z_]\w*", source))
        defs = set(re.findall(r"^\s*([A-Za-z_]\w*)\s*=", source, re.M))
        stmts.append(Stmt(lines=_cap_lines(text), defs=defs, uses=words - defs))
    else:
        for node in tree.body:
            a = line_map[node.lineno - 1] if line_map else node.lineno
            b = line_map[(node.end_lineno or node.lineno) - 1] if line_map else node.end_lineno
            text = strip_comments("\n".join(orig_lines[a - 1 : b])).splitlines()
            if not text:
                continue
            defs, uses, is_import = _defs_uses(node)
            stmts.append(Stmt(lines=_cap_lines(text), defs=defs, uses=uses, is_import=is_import))
    if cell.error and not error:
        error = f"{cell.error.ename}: {cell.error.evalue}"
    return HistoryCell(number=cell.number, execution_count=cell.execution_count, stmts=stmts, error=error)


def select(cells: list[HistoryCell], needed: set[str]) -> set[str]:
    """Mark (depth) the statements the target depends on; return the final needed-name set."""
    depth_of = {n: 0 for n in needed}
    for hc in reversed(cells):
        for st in reversed(hc.stmts):
            hit = [depth_of[n] for n in st.defs if n in depth_of]
            if hit:
                st.depth = min(hit)
                for n in st.uses:
                    depth_of.setdefault(n, st.depth + 1)
            elif hc.error:
                st.depth = 99  # a cell that raised: kept while the budget allows
    return set(depth_of)


def last_bound(cells: list[HistoryCell]) -> dict[str, int]:
    """name -> execution count of the last history cell that bound, changed or deleted it."""
    out: dict[str, int] = {}
    for hc in cells:
        if hc.execution_count is None:
            continue
        for st in hc.stmts:
            for n in st.defs:
                out[n] = hc.execution_count
    return out


def _size(cells: list[HistoryCell]) -> int:
    return sum(len(ln) + 1 for hc in cells for st in hc.stmts if st.depth is not None for ln in st.lines)


def fit_budget(cells: list[HistoryCell], budget: int = HISTORY_BUDGET_CHARS) -> int:
    """Drop kept statements, farthest dependencies and oldest first, until the code fits. Returns # dropped."""
    dropped = 0
    order = [(st.depth, -i, -j, st) for i, hc in enumerate(cells) for j, st in enumerate(hc.stmts)
             if st.depth is not None]
    order.sort(key=lambda t: (-t[0], -t[1], -t[2]))  # deepest first, then oldest
    size = _size(cells)
    for depth, _i, _j, st in order:
        if size <= budget or depth == 0 and size <= budget * 1.5:
            break
        size -= sum(len(ln) + 1 for ln in st.lines)
        st.depth = None
        dropped += 1
    return dropped


def render(cells: list[HistoryCell]) -> tuple[str, list[str]]:
    """The kept code, cell by cell, with `...` for omitted statements; and the omitted cells, as ranges."""
    out: list[str] = []
    omitted: list[HistoryCell] = []
    for hc in cells:
        label = f"In[{hc.execution_count}]" if hc.execution_count is not None else f"cell {hc.number}"
        kept = [st for st in hc.stmts if st.depth is not None]
        if not kept and not hc.error:
            omitted.append(hc)
            continue
        out.append(f"# {label} cell {hc.number}" if hc.execution_count is not None else f"# {label}")
        gap = False
        for st in hc.stmts:
            if st.depth is None:
                gap = True
                continue
            if gap:
                out.append("...")
                gap = False
            out.extend(st.lines)
        if gap:
            out.append("...")
        if hc.error:
            out.append(f"# raised {hc.error[:200]}")
    return "\n".join(out), _ranges(omitted)


def _ranges(cells: list[HistoryCell]) -> list[str]:
    """In[2] In[3] In[4] In[7] -> ["In[2-4]", "In[7]"]; cells without an execution count by number."""
    out: list[str] = []
    run: list[int] = []

    def flush() -> None:
        if run:
            out.append(f"In[{run[0]}]" if len(run) == 1 else f"In[{run[0]}-{run[-1]}]")
            run.clear()

    for hc in cells:
        n = hc.execution_count
        if n is None:
            flush()
            out.append(f"cell {hc.number}")
        elif run and n == run[-1] + 1:
            run.append(n)
        else:
            flush()
            run.append(n)
    flush()
    return out
