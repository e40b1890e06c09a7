"""Applying a verified fix: to a notebook file (the CLI, the bench) and as an LSP WorkspaceEdit (the editor).

In the file, the target's source is replaced and the cells to run first get execution counts after the
notebook's existing history, in order, so that replaying the written notebook (its executed cells in count
order, then the target) reproduces the verified run. Every other byte stays (crane.agent.nbwrite).
"""

from __future__ import annotations

import difflib

from crane.agent.nbwrite import apply_cell_changes
from crane.agent.proposal import minimal_text_edit
from crane.fixes.model import VerifiedFix
from crane.notebook.model import Notebook


def execution_counts(nb: Notebook, fix: VerifiedFix) -> dict[int, int]:
    """Counts for the cells to run first: after the highest count the notebook has, in the fix's order."""
    last = max((c.execution_count or 0 for c in nb.cells if c.is_code), default=0)
    return {cell: last + i for i, cell in enumerate(fix.run_first, start=1)}


def apply_to_notebook(data: bytes, nb: Notebook, fix: VerifiedFix) -> bytes:
    sources = {fix.target: (fix.old, fix.new)} if fix.changes_code else {}
    return apply_cell_changes(data, sources, execution_counts(nb, fix), nb.path)


def unified_diff(fix: VerifiedFix, path: str = "notebook.ipynb") -> str:
    if not fix.changes_code:
        return ""
    lines = difflib.unified_diff(fix.old.splitlines(keepends=True), fix.new.splitlines(keepends=True),
                                 fromfile=f"a/{path} (cell {fix.target})", tofile=f"b/{path} (cell {fix.target})")
    out = "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines)
    return out


def workspace_edit(fix: VerifiedFix, cell_uri: str, version: int | None, current: str) -> dict | None:
    """The fix as a JSON-ready WorkspaceEdit on the target cell (its text must still be `fix.old`), or None
    when it changes no code."""
    if not fix.changes_code or current != fix.old:
        return None
    edit = minimal_text_edit(fix.old, fix.new)
    if edit is None:
        return None
    return {"documentChanges": [{"textDocument": {"uri": cell_uri, "version": version}, "edits": [edit]}]}
