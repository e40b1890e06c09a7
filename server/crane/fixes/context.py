"""What a candidate generator sees: the notebook, the target cell's source and analysis, the crash, and the
runtime facts before the cell ran (`pre`, from the live kernel) and at the point where it crashed (`post`,
read in the sandbox right after the crash, so names the cell bound before the failing line are there).

Generators never run code. They build candidates with `ctx.candidate(...)`, which prices the change: the
characters changed in the target plus a cost per cell to run first (smaller change first).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from crane.analysis.cell import CellAnalysis, analyze_cell
from crane.analysis.scope import NotebookScope
from crane.finding import Finding
from crane.fixes.edits import SourceEdit, change_size
from crane.fixes.model import Candidate, Crash
from crane.notebook.model import Notebook
from crane.probe.facts import AttrCheck, Facts, KeyCheck, ProbeRequest, ProbeResult

RUN_CELL_COST = 10.0  # a cell to run first counts like a change of this many characters

FactsAsker = Callable[[ProbeRequest], "ProbeResult | None"]
Evaluator = Callable[[str], Any]  # a Python literal the expression evaluates to in the crash-point state (or raises)


@dataclass
class FixContext:
    nb: Notebook
    target: int
    original: str  # the target's source as the user has it
    source: str  # the source candidates build on (the original, or a candidate's for a follow-up crash)
    crash: Crash
    scope: NotebookScope
    pre: ProbeResult | None = None  # facts of the live state, before the cell ran
    post: ProbeResult | None = None  # facts at the crash point (sandbox)
    findings: list[Finding] = field(default_factory=list)
    run_first: tuple[int, ...] = ()  # the base candidate's cells to run first
    cell_edits: tuple[tuple[int, str], ...] = ()  # the base candidate's edits of other cells
    depth: int = 1
    ask: FactsAsker | None = None  # more facts of the crash-point state (other names), when available
    evaluator: Evaluator | None = None  # evaluates an expression in the crash-point state (the sandbox)
    guard_line: int | None = None  # the original crash's line (the guard protects that statement)
    analysis: CellAnalysis = field(init=False)

    def __post_init__(self) -> None:
        self.analysis = analyze_cell(self.source)

    # -- facts -----------------------------------------------------------------------------------------------
    def facts(self, name: str) -> Facts | None:
        """A name's facts at the crash point, else before the cell (when the cell did not rebind it)."""
        if self.post is not None and name in self.post.facts:
            return self.post.facts[name]
        if self.pre is not None and name in self.pre.facts and name not in self.analysis.stored_names:
            return self.pre.facts[name]
        return None

    def attr_check(self, chain: str) -> AttrCheck | None:
        for probe in (self.post, self.pre):
            if probe is not None:
                hit = next((a for a in probe.attrs if a.expr == chain), None)
                if hit is not None:
                    return hit
        return None

    def key_check(self, expr: str, key) -> KeyCheck | None:
        for probe in (self.post, self.pre):
            if probe is not None:
                hit = next((k for k in probe.keys if k.expr == expr and k.key == key), None)
                if hit is not None:
                    return hit
        return None

    def known_names(self) -> set[str]:
        """Names known to exist in the namespace (asked for by a probe and bound)."""
        out: set[str] = set()
        for probe in (self.pre, self.post):
            if probe is not None:
                out |= set(probe.facts)
        return out

    def is_undefined(self, name: str) -> bool:
        probe = self.post or self.pre
        return probe is not None and name in probe.undefined and name not in self.known_names()

    def probe_more(self, request: ProbeRequest) -> ProbeResult | None:
        """Ask the crash-point state (the sandbox) a probe request, when it can be asked."""
        return self.ask(request) if self.ask is not None else None

    def evaluate(self, expr: str, default: Any = None) -> Any:
        """The literal value of `expr` in the crash-point state (the sandbox, never the user's kernel)."""
        if self.evaluator is None:
            return default
        try:
            return self.evaluator(expr)
        except Exception:
            return default

    def more_facts(self, names: list[str]) -> dict[str, Facts]:
        """Facts of other names at the crash point (asked of the sandbox), when it can be asked."""
        if self.ask is None or not names:
            return {}
        result = self.ask(ProbeRequest(names=sorted(set(names))[:80]))
        return dict(result.facts) if result is not None else {}

    # -- the crash site --------------------------------------------------------------------------------------
    def _orig_span(self, node: ast.AST) -> tuple[int, int]:
        a = self.analysis
        line = getattr(node, "lineno", 1)
        return a.original_line(line), a.original_line(getattr(node, "end_lineno", None) or line)

    def statements(self) -> list[ast.stmt]:
        tree = self.analysis.tree
        return [n for n in ast.walk(tree) if isinstance(n, ast.stmt)] if tree is not None else []

    def failing_statement(self) -> ast.stmt | None:
        """The innermost statement spanning the crash line."""
        line = self.crash.line
        if line is None or self.analysis.tree is None:
            return None
        best: ast.stmt | None = None
        best_size = 1 << 30
        for s in self.statements():  # breadth first: among equal spans, the deeper statement comes later
            lo, hi = self._orig_span(s)
            if lo <= line <= hi and hi - lo <= best_size:
                best, best_size = s, hi - lo
        return best

    def top_statement(self, node: ast.AST) -> ast.stmt | None:
        """The top-level statement of the cell holding `node`."""
        tree = self.analysis.tree
        if tree is None:
            return None
        for s in tree.body:
            if any(n is node for n in ast.walk(s)):
                return s
        return None

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        """The innermost statement holding `node`."""
        best = None
        for s in self.statements():
            if any(n is node for n in ast.walk(s)):
                if best is None or any(n is s for n in ast.walk(best)):
                    best = s
        return best

    def fresh_name(self, base: str) -> str:
        """`base`, or `base_2`, ... : a name neither the state nor any cell binds."""
        taken = set(self.analysis.stored_names) | self.known_names()
        for d in self.scope.cells:
            taken |= set(d.binds)
        name, i = base, 1
        while name in taken:
            i += 1
            name = f"{base}_{i}"
        return name

    def crash_nodes(self, *types: type) -> Iterator[ast.AST]:
        """Nodes of the failing statement spanning the crash line (every node of the cell when the line is not
        known), innermost last."""
        stmt = self.failing_statement()
        root: ast.AST | None = stmt if stmt is not None else self.analysis.tree
        if root is None:
            return
        line = self.crash.line
        for n in ast.walk(root):
            if types and not isinstance(n, types):
                continue
            if line is not None and hasattr(n, "lineno"):
                lo, hi = self._orig_span(n)
                if not lo <= line <= hi:
                    continue
            yield n

    def all_nodes(self, *types: type) -> Iterator[ast.AST]:
        tree = self.analysis.tree
        if tree is None:
            return
        for n in ast.walk(tree):
            if not types or isinstance(n, types):
                yield n

    def text(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.analysis.python, node) or ast.unparse(node)

    def editor(self) -> SourceEdit:
        return SourceEdit(self.analysis)

    # -- imports the cell can rely on ------------------------------------------------------------------------
    def alias(self, module: str) -> str | None:
        """The name `module` is bound to in the kernel or by the cell ("pd" for pandas), if any."""
        a = self.analysis
        for imp in a.imports:
            if imp.target == module and imp.bound != "*":
                return imp.bound
        for name in self.known_names():
            f = self.facts(name)
            if f is not None and f.kind == "module" and f.module_name == module:
                return name
        executed = sorted((d for d in self.scope.cells if d.execution_count is not None),
                          key=lambda d: d.execution_count or 0)
        for d in reversed(executed):
            for bound, target in d.imports.items():
                if target == module and not self.is_undefined(bound):
                    return bound
        return None

    # -- building candidates ---------------------------------------------------------------------------------
    def candidate(self, kind: str, title: str, source: str | None = None, run_first: tuple[int, ...] | None = None,
                  detail: str = "", penalty: float = 0.0) -> Candidate:
        new = self.source if source is None else source
        cells = self.run_first if run_first is None else run_first
        cost = change_size(self.original, new) + RUN_CELL_COST * len(cells) + penalty
        cost += sum(change_size(self.nb.cell(k).source, s) for k, s in self.cell_edits)
        return Candidate(kind=kind, title=title, source=new, run_first=tuple(cells), cell_edits=self.cell_edits,
                         cost=round(cost, 2), detail=detail, depth=self.depth)
