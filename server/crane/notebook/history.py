"""Execution history: which cells ran before a target cell, and in which order.

The state before a target is rebuilt by running the code cells that carry an `execution_count`, in the order
of those counts (not cell order: out-of-order histories are real and are kept).
"""

from __future__ import annotations

from crane.notebook.model import Cell, Notebook, NotebookError


def history_before(nb: Notebook, target: int) -> list[Cell]:
    """Code cells with an execution count, other than the target, sorted by execution count."""
    nb.cell(target)  # validates the number
    cells = [c for c in nb.cells if c.is_code and c.execution_count is not None and c.number != target]
    return sorted(cells, key=lambda c: (c.execution_count, c.number))


def default_targets(nb: Notebook) -> list[int]:
    """Every code cell without an execution count (cells not run yet)."""
    return [c.number for c in nb.cells if c.is_code and c.execution_count is None and c.source.strip()]


def check_target(nb: Notebook, target: int) -> Cell:
    cell = nb.cell(target)
    if not cell.is_code:
        raise NotebookError(f"cell {target} is a {cell.cell_type} cell, not a code cell")
    return cell


def executed_history(nb: Notebook) -> list[Cell]:
    """All code cells with an execution count, sorted by it: the state the kernel is in now."""
    cells = [c for c in nb.cells if c.is_code and c.execution_count is not None]
    return sorted(cells, key=lambda c: (c.execution_count, c.number))
