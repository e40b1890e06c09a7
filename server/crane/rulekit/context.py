"""RuleContext: everything a rule may look at for one target cell, and the helpers rules share.

A rule receives one `RuleContext` and reads:

- `ctx.analysis` — the static `CellAnalysis` of the target cell (crane.analysis.cell): `tree`, `free_loads`,
  `imports`, `attr_chains`, `literal_keys`, `paths`, `syntax_error`, ... (positions are in `analysis.python`,
  the IPython-transformed code; `ctx.finding` maps them back to the original cell lines).
- `ctx.probe` — the kernel's `ProbeResult` (crane.probe.facts), or None when no kernel is attached
  (static-only mode); `ctx.probed` is the same, typed as set, for rules registered with `needs_probe=True`.
- `ctx.environment` — without a kernel, what CRANE's own environment tells (modules found by this process,
  files relative to the notebook's folder) as a `ProbeResult` of `modules`, `paths` and `cwd` only; the rules
  registered with `environment=True` run on it (`ctx.probed` is then this, and `ctx.probe` is None).
  Kernel facts describe the state BEFORE the cell runs: use `ctx.value(node)` (which follows the cell's own
  assignments and mutations) rather than `ctx.probe.facts[...]` directly.
- `ctx.scope` — the `NotebookScope` (crane.analysis.scope) of the whole notebook, or None.
- `ctx.target_cell` — the target's 1-based cell number, or None.

Helpers (all of them total: they return None / False instead of raising):

- `statements()`: top-level statements in execution order. `nodes(*types)`: every node of the tree in
  source order, optionally filtered by type. `calls()`: every ast.Call in source order.
- `value(node)`: the flow-sensitive abstract value (`Facts`) of an expression at its position: live kernel
  facts while the cell has not rebound/mutated the name, synthesised facts for derived values
  (`df['a']`, `df[['a','b']]`, `df.drop(...)`, `.values`, `train_test_split(...)`, ...), None when unknown.
  Synthesised facts have `name` = the expression's text; `truncated=True` on them means row-dependent stats
  (n_nan, num_unique, value_range, unique values) are upper bounds / supersets, not exact.
  Synthesised columns whose dtype cannot be known carry dtype "unknown".
- `is_live(name, at)`: the name still holds the kernel's value at node `at` (not rebound or mutated earlier
  in the cell). `facts(name)`: the kernel's facts for a name (not flow-sensitive).
- `attr_check(expr_text, at=None)` / `key_check(expr_text, key, axis=None, at=None)`: the probe's answers
  (AttrCheck / KeyCheck) for an attribute chain or a literal key; with `at`, None unless the chain's base
  name is still live at that node.
- `is_certain(node)`: the node runs whenever the cell runs (not inside if/while/try-with-handlers/def/lambda/
  class bodies, conditional expressions, `and`/`or` right operands, after a `break`/`continue` in a loop body;
  for-loop / comprehension bodies count if the iterable is not known to be empty).
- `literal(node, default=None)`: `ast.literal_eval` of the node, or `default`. `text(node)`: `ast.unparse`.
- `qualname(node)`: the dotted name an expression refers to, with import aliases resolved, e.g.
  `pd.read_csv` -> "pandas.read_csv", `train_test_split` -> "sklearn.model_selection.train_test_split"
  (from the cell's own imports, the kernel's facts of a live class/function —
  `Facts.public_name`/`qualname` —, the notebook's executed cells and the probe's module facts); for other
  expressions the plain dotted text ("model.fit"); None if not a Name/Attribute chain.
- `kwarg(call, name)`: the keyword argument's value node or None. `arg(call, i, name=None)`: positional
  argument i, else keyword `name`.
- `parent(node)`: the parent node. `statement_of(node)`: the enclosing statement.
- `finding(node, rule=, ename=, message=, root_cause=, confidence=, evidence=[...], related=[...],
  end_node=None)`: a Finding positioned on `node` (through `end_node` if given), in original cell lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import Any

from crane.analysis.cell import CellAnalysis
from crane.analysis.certainty import is_certain as _is_certain
from crane.analysis.flow import FlowResult, evaluate_cell
from crane.analysis.scope import NotebookScope
from crane.finding import Finding, Related
from crane.probe.facts import AttrCheck, Facts, KeyCheck, ProbeResult

_MISSING = object()


class RuleContext:
    """The facts about one target cell, shared by all rules (see the module docstring)."""

    def __init__(
        self,
        analysis: CellAnalysis,
        probe: ProbeResult | None = None,
        scope: NotebookScope | None = None,
        target_cell: int | None = None,
        environment: ProbeResult | None = None,
    ):
        self.analysis = analysis
        self.probe = probe
        self.environment = environment if probe is None else None
        self.scope = scope
        self.target_cell = target_cell
        self._flow: FlowResult | None = None
        self._attrs = {a.expr: a for a in (probe.attrs if probe else [])}
        self._keys: dict[tuple[str, str, str], KeyCheck] = {}
        for k in probe.keys if probe else []:
            self._keys[(k.expr, repr(k.key), k.axis)] = k
        self._nodes: list[ast.AST] | None = None

    # -- the tree -----------------------------------------------------------------------------------
    def statements(self) -> list[ast.stmt]:
        tree = self.analysis.tree
        return list(tree.body) if tree is not None else []

    def nodes(self, *types: type) -> Iterator[ast.AST]:
        if self._nodes is None:
            tree = self.analysis.tree
            nodes = list(ast.walk(tree)) if tree is not None else []
            nodes = [n for n in nodes if hasattr(n, "lineno")]
            nodes.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
            self._nodes = nodes
        for n in self._nodes:
            if not types or isinstance(n, types):
                yield n

    def calls(self) -> Iterator[ast.Call]:
        yield from self.nodes(ast.Call)  # type: ignore[misc]

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.analysis.parents.get(node)

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        cur: ast.AST | None = node
        while cur is not None and not isinstance(cur, ast.stmt):
            cur = self.analysis.parents.get(cur)
        return cur

    # -- values -------------------------------------------------------------------------------------
    @property
    def probed(self) -> ProbeResult:
        """`probe`, for the rules registered with `needs_probe=True` (`run_rules` runs them only when it is set),
        else CRANE's own `environment` for those registered with `environment=True`."""
        if self.probe is not None:
            return self.probe
        if self.environment is not None:
            return self.environment
        raise RuntimeError("a rule that needs the kernel's probe ran without one")

    @property
    def flow(self) -> FlowResult:
        if self._flow is None:
            self._flow = evaluate_cell(self.analysis, self.probe, self.scope)
        return self._flow

    def value(self, node: ast.AST) -> Facts | None:
        try:
            return self.flow.value(node)
        except Exception:
            return None

    def facts(self, name: str) -> Facts | None:
        return self.probe.facts.get(name) if self.probe else None

    def is_live(self, name: str, at: ast.AST) -> bool:
        try:
            return self.flow.is_live(name, at)
        except Exception:
            return False

    def attr_check(self, expr_text: str, at: ast.AST | None = None) -> AttrCheck | None:
        chk = self._attrs.get(expr_text)
        if chk is None:
            return None
        if at is not None and not self.is_live(expr_text.split(".", 1)[0], at):
            return None
        return chk

    def key_check(self, expr_text: str, key: Any, axis: str | None = None, at: ast.AST | None = None) -> KeyCheck | None:
        found = None
        for ax in (axis,) if axis else ("key", "columns", "index"):
            found = self._keys.get((expr_text, repr(key), ax))
            if found is not None:
                break
        if found is None:
            return None
        base = expr_text.split(".", 1)[0].split("[", 1)[0]
        if at is not None and not self.is_live(base, at):
            return None
        return found

    def is_certain(self, node: ast.AST) -> bool:
        try:
            return _is_certain(node, self.analysis.parents, self._known_empty)
        except Exception:
            return False

    def _known_empty(self, iterable: ast.expr) -> bool:
        lit = self.literal(iterable, _MISSING)
        if lit is not _MISSING:
            try:
                return len(lit) == 0
            except TypeError:
                return False
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "range":
            args = [self.literal(a, _MISSING) for a in iterable.args]
            if args and all(isinstance(a, int) for a in args):
                try:
                    return len(range(*args)) == 0
                except (TypeError, ValueError):
                    return False
        v = self.value(iterable)
        if v is None:
            return False
        if v.length is not None:
            return v.length == 0
        if v.shape:
            return v.shape[0] == 0
        return False

    # -- small helpers --------------------------------------------------------------------------------
    @staticmethod
    def literal(node: ast.AST | None, default: Any = None) -> Any:
        if node is None:
            return default
        try:
            return ast.literal_eval(node)
        except Exception:
            return default

    @staticmethod
    def text(node: ast.AST) -> str:
        try:
            return ast.unparse(node)
        except Exception:
            return ""

    @staticmethod
    def kwarg(call: ast.Call, name: str) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        return None

    @staticmethod
    def arg(call: ast.Call, index: int, name: str | None = None) -> ast.expr | None:
        pos = [a for a in call.args if not isinstance(a, ast.Starred)]
        if len(pos) == len(call.args) and index < len(pos):
            return pos[index]
        if name is not None:
            return RuleContext.kwarg(call, name)
        return None

    def qualname(self, node: ast.AST) -> str | None:
        try:
            return self.flow.qualname(node)
        except Exception:
            return None

    # -- findings -------------------------------------------------------------------------------------
    def finding(
        self,
        node: ast.AST,
        *,
        rule: str,
        ename: str,
        message: str,
        root_cause: str | None = None,
        confidence: float = 0.8,
        evidence: Iterable[str] = (),
        related: Iterable[Related] = (),
        end_node: ast.AST | None = None,
    ) -> Finding:
        line, col, end_line, end_col = self.analysis.original_span(node, end_node)
        return Finding(
            rule=rule,
            ename=ename,
            message=message,
            line=line,
            col=col,
            end_line=end_line,
            end_col=end_col,
            root_cause=root_cause,
            confidence=confidence,
            evidence=list(evidence),
            related=list(related),
        )
