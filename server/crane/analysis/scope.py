"""NotebookScope: what each cell of a notebook binds, deletes and imports, built statically from the cells.

Used (a) with no kernel (static-only mode): which names a cell loads that no cell above it binds
(`undefined_in_order`), and (b) with a kernel, to explain a missing name (`related_for_missing`: the cell that
would define it but has not run, or that sits below the target) and to fill `Facts.defined_in`
(`defined_in`: the execution count of the cell that last bound a name).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from crane.analysis.cell import CellAnalysis, analyze_cell, is_predefined
from crane.finding import Related


@dataclass
class CellDefs:
    number: int
    execution_count: int | None
    analysis: CellAnalysis
    binds: dict[str, int] = field(default_factory=dict)  # name -> original line of its first binding
    deletes: dict[str, int] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # bound name -> "numpy", "sklearn.x.f"

    @property
    def dynamic(self) -> bool:
        return bool(self.analysis.dynamic)


def _module_level(tree: ast.Module):
    """Nodes of the module outside function/lambda/class bodies."""
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, ast.Lambda):
            continue
        for c in reversed(list(ast.iter_child_nodes(n))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and c in n.body:
                continue
            stack.append(c)


def cell_defs(number: int, execution_count: int | None, source: str) -> CellDefs:
    """What one code cell binds, deletes and imports (pure: cacheable by (number, execution_count, source))."""
    a = analyze_cell(source)
    d = CellDefs(number, execution_count, a)
    if a.tree is None:
        return d

    def add(table: dict[str, int], name: str, node: ast.AST) -> None:
        line = a.original_line(getattr(node, "lineno", 1))
        table.setdefault(name, line)

    for n in _module_level(a.tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            add(d.binds, n.id, n)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Del):
            add(d.deletes, n.id, n)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            add(d.binds, n.name, n)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            add(d.binds, n.name, n)
    for imp in a.imports:
        if imp.bound != "*":
            add(d.binds, imp.bound, imp.node)
            d.imports[imp.bound] = imp.target
    for info in a.functions.values():
        for name in info.global_stores:
            add(d.binds, name, info.node)
    return d


_defs = cell_defs  # the former private name, kept for existing callers


class NotebookScope:
    """Static definitions of every code cell. `cells`: (number, execution_count, source) triples or Cells."""

    def __init__(self, cells: Iterable):
        self.cells: list[CellDefs] = []
        for c in cells:
            if hasattr(c, "cell_type"):
                if not c.is_code:
                    continue
                number, count, source = c.number, c.execution_count, c.source
            else:
                number, count, source = c
            try:
                self.cells.append(cell_defs(number, count, source))
            except Exception:  # never fail a whole notebook on one odd cell
                self.cells.append(CellDefs(number, count, analyze_cell("")))
        self.cells.sort(key=lambda d: d.number)

    @classmethod
    def from_defs(cls, defs: Iterable[CellDefs]) -> NotebookScope:
        """From per-cell definitions already computed with `cell_defs` (e.g. cached by the daemon)."""
        scope = cls(())
        scope.cells = sorted(defs, key=lambda d: d.number)
        return scope

    @classmethod
    def from_notebook(cls, nb) -> NotebookScope:
        """Every code cell of a notebook (executed or not: unexecuted cells explain missing names)."""
        return cls(nb.cells)

    @classmethod
    def from_cells(cls, cells: Iterable) -> NotebookScope:
        """From (number, execution_count, source) triples or Cells."""
        return cls(cells)

    def cell(self, number: int) -> CellDefs | None:
        return next((d for d in self.cells if d.number == number), None)

    def _executed(self) -> list[CellDefs]:
        return sorted((d for d in self.cells if d.execution_count is not None), key=lambda d: (d.execution_count, d.number))

    def definers(self, name: str) -> list[CellDefs]:
        return [d for d in self.cells if name in d.binds]

    def defined_in(self, name: str) -> int | None:
        """Execution count of the executed cell that last bound `name` (None if none did)."""
        last = None
        for d in self._executed():
            if name in d.binds:
                last = d.execution_count
            elif name in d.deletes:
                last = None
        return last

    def import_target(self, name: str) -> str | None:
        """What an imported name refers to ("np" -> "numpy"), from the cells that ran (else any cell)."""
        found = None
        for d in self._executed() or self.cells:
            if name in d.imports:
                found = d.imports[name]
            elif name in d.binds:
                found = None
        if found is None and not self._executed():
            return None
        return found

    # -- static-only mode ---------------------------------------------------------------------------
    def bound_before(self, target: int) -> set[str] | None:
        """Names bound by the code cells above `target` in notebook order; None if one of them may bind
        arbitrary names (star import, %run, exec)."""
        names: set[str] = set()
        for d in self.cells:
            if d.number >= target:
                break
            if d.dynamic:
                return None
            names |= set(d.binds)
        return names

    def undefined_in_order(self, target: int, names: Iterable[str]) -> list[str]:
        """The given names that no cell above `target` binds (running the notebook top to bottom)."""
        bound = self.bound_before(target)
        if bound is None:
            return []
        return [n for n in names if n not in bound and not is_predefined(n)]

    # -- explanations -------------------------------------------------------------------------------
    def related_for_missing(self, name: str, target: int | None) -> list[Related]:
        """Where a name missing from the kernel would have come from."""
        out: list[Related] = []
        for d in self.definers(name):
            if d.number == target:
                continue
            where = "below this cell" if target is not None and d.number > target else "above"
            line = d.binds[name]
            if d.execution_count is None:
                msg = f"'{name}' is defined in cell {d.number} ({where}), which has not been run"
            else:
                msg = (f"'{name}' is defined in cell {d.number} (run as [{d.execution_count}]), "
                       "but the kernel does not have it now")
            out.append(Related(message=msg, cell=d.number, line=line, execution_count=d.execution_count))
        for d in self._executed():
            if name in d.deletes and d.number != target:
                out.append(Related(message=f"'{name}' is deleted in cell {d.number} (run as [{d.execution_count}])",
                                   cell=d.number, line=d.deletes[name], execution_count=d.execution_count))
        out.sort(key=lambda r: (r.execution_count is not None, target is not None and (r.cell or 0) > target, r.cell or 0))
        return out[:5]
