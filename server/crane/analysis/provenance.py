"""Where a crash began: the notebook's data flow from the failing line's names back to the cells that made them.

Static and cheap (the cells' code and execution counts, crane.analysis.scope); runs in the daemon and the CLI,
never in a kernel. The executed history is the cells with an execution count, in count order (a cell that ran
before the target and the target itself when it already ran once). For a name it answers:

- `trace(scope, name, target)`: the executed cells that last made it — its fresh binding (an assignment that
  does not read it, an import, a def) and every cell after that changed it (rebinding it from itself
  `df = df.drop(...)`, storing into it `df['c'] = ...`, an in-place method `df.drop(..., inplace=True)`,
  `lst.remove(x)`, `model.fit(...)`, `del df`), in the order they ran;
- `origin_cells(scope, names, target)`: those cells for every name, and (one step further) the cells that
  made the names their statements read — the cells that can hold the cause, most recent first;
- `dependents(scope, cells, target)`: the executed cells after an edited cell that read what it binds
  (transitively) and feed the target: what must run again after an edit, in history order;
- `explain(...)`: the diagnosis in words ("`df` was made in cell 2 [2]; changed in cell 4 [6]: drop(...,
  inplace=True)").
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from crane.analysis.cell import is_predefined
from crane.analysis.scope import CellDefs, NotebookScope

MUTATORS = frozenset({
    "append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "sort", "reverse", "setdefault",
    "add", "discard", "fit", "partial_fit", "fit_transform", "set_params", "set_index", "reset_index",
})


@dataclass(frozen=True)
class Touch:
    """One executed cell making or changing a name."""

    cell: int
    count: int | None
    name: str
    how: str  # "binds" (fresh) | "rebinds" (from itself) | "changes" (in place) | "deletes"
    line: int
    text: str  # the statement, first line, shortened

    def describe(self) -> str:
        where = f"cell {self.cell}" + (f" [{self.count}]" if self.count is not None else "")
        verb = {"binds": "made", "rebinds": "rebound", "changes": "changed", "deletes": "deleted"}[self.how]
        return f"`{self.name}` {verb} in {where}: `{self.text}`"


def history(scope: NotebookScope, target: int | None = None) -> list[CellDefs]:
    """The executed cells in the order they ran (the target too when it ran before)."""
    return sorted((d for d in scope.cells if d.execution_count is not None), key=lambda d: (d.execution_count, d.number))


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _reads(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node))


def _first_line(d: CellDefs, stmt: ast.AST) -> str:
    text = ast.get_source_segment(d.analysis.python, stmt) or ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 80 else line[:77] + "..."


def touches(d: CellDefs, name: str) -> list[Touch]:
    """How cell `d` makes or changes `name` (module-level statements, in order)."""
    tree = d.analysis.tree
    if tree is None:
        return []
    out: list[Touch] = []

    def add(how: str, stmt: ast.AST) -> None:
        out.append(Touch(d.number, d.execution_count, name, how, d.analysis.original_line(getattr(stmt, "lineno", 1)),
                         _first_line(d, stmt)))

    for stmt in _module_statements(tree):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in stmt.names):
                add("binds", stmt)
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if stmt.name == name:
                add("binds", stmt)
            continue
        if isinstance(stmt, ast.Delete) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            add("deletes", stmt)
            continue
        targets: list[ast.AST] = []
        value: ast.AST | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = list(stmt.targets), stmt.value
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets, value = [stmt.target], stmt.value
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            targets, value = [stmt.target], stmt.iter
        stored = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if name in stored:
            self_ref = isinstance(stmt, ast.AugAssign) or (value is not None and _reads(value, name))
            add("rebinds" if self_ref else "binds", stmt)
            continue
        if any(isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del))
               and _root(n) == name for t in targets + (list(stmt.targets) if isinstance(stmt, ast.Delete) else [])
               for n in ast.walk(t)):
            add("changes", stmt)
            continue
        if isinstance(stmt, (ast.Expr, ast.Assign)) and _mutates(stmt, name):
            add("changes", stmt)
    return out


def _module_statements(tree: ast.Module):
    """Statements run at module level (loop, if, with and try bodies included; def bodies not)."""
    stack: list[ast.stmt] = list(reversed(tree.body))
    while stack:
        s = stack.pop()
        yield s
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            for child in reversed(getattr(s, field, []) or []):
                if isinstance(child, ast.ExceptHandler):
                    stack.extend(reversed(child.body))
                elif isinstance(child, ast.stmt):
                    stack.append(child)


def _mutates(stmt: ast.AST, name: str) -> bool:
    for n in ast.walk(stmt):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                and n.func.value.id == name:
            inplace = any(k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True
                          for k in n.keywords)
            if inplace or n.func.attr in MUTATORS:
                return True
    return False


def trace(scope: NotebookScope, name: str, target: int | None = None) -> list[Touch]:
    """The executed cells that made `name` as the state has it: its last fresh binding and the changes since,
    in the order they ran (empty when no executed cell binds it)."""
    out: list[Touch] = []
    for d in history(scope, target):
        for t in touches(d, name):
            if t.how in ("binds", "deletes"):
                out = [t]
            else:
                out.append(t)
    return out


def reads_of(d: CellDefs) -> set[str]:
    return {n for n in d.analysis.free_names if not is_predefined(n)}


def origin_cells(scope: NotebookScope, names: list[str], target: int | None = None, depth: int = 2) -> list[int]:
    """The executed cells that made `names` (and, `depth` - 1 steps further, the names those cells read),
    most recent first; the target excluded."""
    seen: dict[int, int] = {}
    frontier = [n for n in names if not is_predefined(n)]
    done: set[str] = set()
    for _ in range(depth):
        nxt: list[str] = []
        for name in frontier:
            if name in done:
                continue
            done.add(name)
            for t in trace(scope, name, target):
                if t.cell == target:
                    continue
                seen.setdefault(t.cell, t.count or 0)
                d = scope.cell(t.cell)
                if d is not None:
                    nxt += sorted(reads_of(d))
        frontier = nxt
    return [c for c, _ in sorted(seen.items(), key=lambda kv: -kv[1])]


def dependents(scope: NotebookScope, cells: list[int], target: int, reads: set[str],
               exclude: set[int] | None = None) -> list[int]:
    """`cells` plus the executed cells that ran after the first of them, read what the plan binds (in turn) and
    bind something the target (`reads`) or a later plan cell reads — in the order they ran (never `exclude`)."""
    hist = [d for d in history(scope, target) if d.number != target and d.number not in (exclude or set())]
    chosen = {c for c in cells}
    first = min((i for i, d in enumerate(hist) if d.number in chosen), default=None)
    if first is None:
        return list(cells)
    bound: set[str] = set()
    for d in hist[first:]:
        if d.number in chosen:
            bound |= set(d.binds)
            continue
        if reads_of(d) & bound:
            later_reads = set(reads)
            if set(d.binds) & later_reads or _feeds(scope, d, hist, reads):
                chosen.add(d.number)
                bound |= set(d.binds)
    order = {d.number: i for i, d in enumerate(hist)}
    return sorted(chosen, key=lambda n: order.get(n, 1 << 30))


def _feeds(scope: NotebookScope, d: CellDefs, hist: list[CellDefs], reads: set[str]) -> bool:
    """Does a cell run after `d` read what `d` binds and bind something the target reads?"""
    i = hist.index(d)
    mine = set(d.binds)
    return any(reads_of(e) & mine and set(e.binds) & reads for e in hist[i + 1:])


def explain(scope: NotebookScope, names: list[str], target: int | None = None, limit: int = 4) -> list[str]:
    """Sentences naming where each of `names` was made and changed since (executed cells only)."""
    out: list[str] = []
    for name in names:
        steps = [t for t in trace(scope, name, target) if t.cell != target]
        if not steps:
            continue
        out.append("; ".join(t.describe() for t in steps[-3:]))
        if len(out) >= limit:
            break
    return out


def line_names(source: str, line: int | None) -> list[str]:
    """Names loaded on line `line` of a cell's source (every name the cell reads first when None), first first."""
    from crane.analysis.cell import analyze_cell

    a = analyze_cell(source)
    if a.tree is None:
        return []
    if line is None:
        return [n for n in a.free_names if not is_predefined(n)]
    out: dict[str, None] = {}
    for n in ast.walk(a.tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and a.original_line(n.lineno) == line \
                and not is_predefined(n.id):
            out.setdefault(n.id, None)
    return sorted(out, key=lambda k: source.find(k))


def explain_line(scope: NotebookScope, source: str, line: int | None, target: int | None = None,
                 limit: int = 4) -> list[str]:
    """`explain` for the names of one line of a cell (the failing line)."""
    return explain(scope, line_names(source, line), target, limit)
