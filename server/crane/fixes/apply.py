"""Applying a verified fix: to a notebook file (the CLI, the bench), as a unified diff; the editor's WorkspaceEdit
is built by crane.lsp.quick_fixes from `changes`.

In the file, the target's source is replaced and the cells to run first get execution counts after the
notebook's existing history, in order, so that replaying the written notebook (its executed cells in count
order, then the target) reproduces the verified run. Every other byte stays (crane.agent.nbwrite).
"""

from __future__ import annotations

import difflib

from crane.agent.nbwrite import apply_cell_changes
from crane.fixes.model import VerifiedFix
from crane.notebook.model import Notebook


def execution_counts(nb: Notebook, fix: VerifiedFix) -> dict[int, int]:
    """Counts for the cells to run first: after the highest count the notebook has, in the fix's order."""
    last = max((c.execution_count or 0 for c in nb.cells if c.is_code), default=0)
    return {cell: last + i for i, cell in enumerate(fix.run_first, start=1)}


def changes(fix: VerifiedFix) -> dict[int, tuple[str, str]]:
    """Every cell the fix edits: {cell: (old, new)} (the target, and the other cells it edits)."""
    out = {c.cell: (c.old, c.new) for c in fix.cell_edits}
    if fix.new != fix.old:
        out[fix.target] = (fix.old, fix.new)
    return out


def apply_to_notebook(data: bytes, nb: Notebook, fix: VerifiedFix) -> bytes:
    return apply_cell_changes(data, changes(fix), execution_counts(nb, fix), nb.path, frozenset(fix.to_code))


def unified_diff(fix: VerifiedFix, path: str = "notebook.ipynb") -> str:
    out = []
    for cell, (old, new) in sorted(changes(fix).items()):
        lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=f"a/{path} (cell {cell})", tofile=f"b/{path} (cell {cell})")
        out.append("".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines))
    return "".join(out)
