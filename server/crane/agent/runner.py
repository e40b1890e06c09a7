"""The agent's working copy of the notebook and the glue that executes it in a sandbox (never the user's kernel).

Cells keep the notebook's numbers; a cell the agent adds gets the next free number and a position after the
cell it names. Executing cell N runs, in the sandbox, the *plan* for N first — the cells before N in notebook
order that the agent edited, added or chose to run (plus never-run cells after N that it ran) — then N. The
sandbox only resets (back to the state the user's kernel has) when what already ran since the last reset is
not a prefix of that plan, so every execution equals a fresh run of the plan: edits to earlier cells are
re-executed in order, and a cell never runs twice on top of its own effects.
"""

from __future__ import annotations

import ast

import msgspec

from crane.agent.guard import check_edit, parse_cell
from crane.agent.proposal import CellAddition, CellEdit, Evidence
from crane.agent.sandboxes import ExecResult, ExecutionSandbox
from crane.errors import CraneError
from crane.notebook.model import Notebook
from crane.text import cell_line, clean_traceback


class WorkCell(msgspec.Struct):
    number: int
    source: str
    original: str | None  # None: added by the agent
    is_code: bool = True
    ran_before: bool = False  # part of the notebook's executed history
    after: int | None = None  # added cells: the notebook cell they follow
    failing_line: int | None = None  # the line its recorded (or observed) error came from

    @property
    def edited(self) -> bool:
        return self.original is not None and self.source != self.original


def same_code(a: str, b: str) -> bool:
    """`a` and `b` are the same code: equal but for blank space, or the same Python (layout and comments aside)."""
    if a.strip() == b.strip():
        return True
    tree_a, tree_b = parse_cell(a), parse_cell(b)
    return tree_a is not None and tree_b is not None and ast.dump(tree_a) == ast.dump(tree_b)


class RunnerError(CraneError, ValueError):
    """An action refers to a cell that cannot take it; the message goes back to the model."""


class FixRunner:
    def __init__(self, nb: Notebook, target: int, sandbox: ExecutionSandbox, cell_timeout: float = 120.0):
        self.nb = nb
        self.target = target
        self.sandbox = sandbox
        self.cell_timeout = cell_timeout
        self.cells: dict[int, WorkCell] = {
            c.number: WorkCell(number=c.number, source=c.source, original=c.source, is_code=c.is_code,
                               ran_before=c.execution_count is not None,
                               failing_line=cell_line(clean_traceback(c.error.traceback)) if c.error else None)
            for c in nb.cells
        }
        self.order: list[int] = [c.number for c in nb.cells]
        self.agent_ran: list[int] = []  # cells the agent executed (other than the target), first-run order
        # what ran in the sandbox since its last reset: (cell, source, result)
        self.executed: list[tuple[int, str, ExecResult]] = []
        self.refusals: list[str] = []
        self.runs = 0  # cells executed in the sandbox on the agent's behalf

    # -- the working copy ------------------------------------------------------------------------------------
    def _code_cell(self, n: int) -> WorkCell:
        cell = self.cells.get(n)
        if cell is None:
            raise RunnerError(f"there is no cell {n} (cells are 1..{max(self.cells)})")
        if not cell.is_code:
            raise RunnerError(f"cell {n} is not a code cell")
        return cell

    def edit(self, n: int, source: str) -> str:
        cell = self._code_cell(n)
        if same_code(source, cell.source):
            raise RunnerError(f"nothing changed: cell {n} already has this code.{self._raises(cell)}")
        if cell.original is not None:
            reason = check_edit(cell.original, source, cell.failing_line)
            if reason:
                self.refusals.append(f"cell {n}: {reason}")
                raise GuardRefusal(reason)
        cell.source = source
        rerun = " It will be re-run, in order, before the next cell you execute after it." if n != self.target else ""
        return f"cell {n} edited.{rerun}"

    def _raises(self, cell: WorkCell) -> str:
        """" Line k (`code`) is the one that raises." for a cell whose failing line is known, else ""."""
        lines = cell.source.splitlines()
        k = cell.failing_line
        if k is None or not 1 <= k <= len(lines):
            return ""
        return f" Line {k} (`{lines[k - 1].strip()[:200]}`) is the one that raises: change it."

    def add(self, after: int, source: str) -> int:
        if not source.strip():
            raise RunnerError("nothing added: the new cell's `source` is empty. Send the code the cell should run.")
        if after != 0 and after not in self.cells:
            raise RunnerError(f"there is no cell {after} to add a cell after")
        number = max(self.cells) + 1
        self.cells[number] = WorkCell(number=number, source=source, original=None, after=after)
        pos = 0 if after == 0 else self.order.index(after) + 1
        while pos < len(self.order) and self.cells[self.order[pos]].original is None:  # after earlier additions
            pos += 1
        self.order.insert(pos, number)
        return number

    def plan(self, n: int) -> list[int]:
        """Cells to run before `n`, in order."""
        pos = self.order.index(n)
        before = [c for c in self.order[:pos]
                  if self.cells[c].is_code and (self.cells[c].original is None or self.cells[c].edited
                                                or c in self.agent_ran)]
        later = [c for c in self.agent_ran
                 if self.order.index(c) > pos and not self.cells[c].ran_before and c != n]
        return before + later

    # -- execution -------------------------------------------------------------------------------------------
    def execute(self, n: int) -> tuple[list[tuple[int, ExecResult]], ExecResult]:
        """Run the plan for `n`, then `n`: (plan results, n's result)."""
        cell = self._code_cell(n)
        if n != self.target and n not in self.agent_ran:
            self.agent_ran.append(n)
        plan = [(c, self.cells[c].source) for c in self.plan(n)]
        done = [(c, src) for c, src, _ in self.executed]
        if done != plan[: len(done)] or getattr(self.sandbox, "needs_reset", False):
            self.sandbox.reset_to_history()
            self.executed = []
        for c, src in plan[len(self.executed):]:
            self._run(c, src)
        results = [(c, r) for c, _, r in self.executed]
        result = self._run(n, cell.source)
        if result.status == "error" and result.line and n == self.target and cell.failing_line is None \
                and not cell.edited:
            cell.failing_line = result.line
        return results, result

    def _run(self, n: int, source: str) -> ExecResult:
        self.runs += 1
        result = self.sandbox.run_cell(source, timeout=self.cell_timeout)
        self.executed.append((n, source, result))
        return result

    def inspect(self, expression: str) -> str:
        if getattr(self.sandbox, "needs_reset", False):
            self.sandbox.reset_to_history()
            self.executed = []
        return self.sandbox.inspect(expression, timeout=10.0)

    def verify(self) -> Evidence:
        """The target run after its plan, from a state equal to a fresh sandbox (the acceptance test)."""
        results, result = self.execute(self.target)
        return Evidence(
            sandbox=getattr(self.sandbox, "kind", "replay"), ran=[c for c, _ in results],
            target=self.target, status=result.status, ename=result.ename, evalue=(result.evalue or "")[:500] or None,
            certain=result.certain, doubt=result.doubt,
            traceback=result.traceback[-2000:], stdout=result.stdout[-2000:],
            failed_before=[f"cell {c}: {r.ename}: {(r.evalue or '')[:200]}" for c, r in results if not r.clean],
        )

    # -- the proposal ----------------------------------------------------------------------------------------
    def edits(self) -> list[CellEdit]:
        return [CellEdit(cell=c.number, old=c.original, new=c.source)
                for c in self.cells.values() if c.original is not None and c.edited]

    def additions(self) -> list[CellAddition]:
        return [CellAddition(cell=c.number, after=c.after or 0, source=c.source)
                for n in self.order for c in [self.cells[n]] if c.original is None]

    def final_guard(self) -> list[str]:
        """The guard on the whole diff (original -> final source of every edited cell)."""
        out = []
        for e in self.edits():
            reason = check_edit(e.old, e.new, self.cells[e.cell].failing_line)
            if reason:
                out.append(f"cell {e.cell}: {reason}")
        return out


class GuardRefusal(Exception):
    """The guard refused an edit; the message says why (and goes back to the model)."""


def describe_run(plan_results: list[tuple[int, ExecResult]], n: int, result: ExecResult) -> str:
    lines = []
    if plan_results:
        done = ", ".join(f"{c} ({'ok' if r.clean else r.ename or r.status})" for c, r in plan_results)
        lines.append(f"first re-ran cells {done}")
        for c, r in plan_results:
            if not r.clean:
                lines.append(f"cell {c} {r.summary(600)}")
    lines.append(f"cell {n} {result.summary()}")
    return "\n".join(lines)
