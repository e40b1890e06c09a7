"""`textDocument/codeAction` on a cell: the verified quick fixes, Diagnose with CRANE, Fix with CRANE agent, Run
speculatively.

The verified quick fixes (crane.lsp.quick_fixes: "Use column 'Total_Gross' (tested)", "Run cell 3 first
(tested)") come first, on cells with CRANE diagnostics, from the cache (never computed here). The other three
are offered on every Python code cell, with or without a diagnostic: as quick fixes (attached to CRANE's
diagnostics) when the cell has some, as `source.crane` actions otherwise.
"""

from __future__ import annotations

from lsprotocol import types

from crane.lsp.agent_bridge import FIX_CELL
from crane.lsp.commands import DIAGNOSE_CELL
from crane.lsp.crane_server import CraneServer
from crane.lsp.diagnostics import SOURCE
from crane.lsp.notebook_map import snapshot
from crane.lsp.speculative_command import RUN_SPECULATIVELY

SOURCE_CRANE = "source.crane"
KINDS = [types.CodeActionKind.QuickFix, SOURCE_CRANE]

ACTIONS = (
    ("Diagnose with CRANE", DIAGNOSE_CELL),
    ("Fix with CRANE agent", FIX_CELL),
    ("Run speculatively with CRANE", RUN_SPECULATIVELY),
)


def code_actions(ls: CraneServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    uri = params.text_document.uri
    session = ls.session_of_cell(uri)
    if session is None:
        return None
    nb = ls.workspace.get_notebook_document(cell_uri=uri)
    cell = next((c for c in nb.cells if ls.key(c.document) == ls.key(uri)), None) if nb else None
    if cell is None or cell.kind != types.NotebookCellKind.Code:
        return None
    ours = [d for d in params.context.diagnostics if d.source == SOURCE]
    only = params.context.only
    kind = types.CodeActionKind.QuickFix if ours else SOURCE_CRANE
    if only and not any(kind == k or str(kind).startswith(f"{k}.") for k in only):
        return None
    verified: list[types.CodeAction] = []
    snap = snapshot(ls.workspace, session.uri) if ours else None
    current = snap.cell(cell.document) if snap is not None else None
    if snap is not None and current is not None:
        verified = ls.quick_fixes.actions(session, snap, current, ours)
    return verified + [
        types.CodeAction(
            title=title,
            kind=kind,
            diagnostics=ours or None,
            is_preferred=(command == DIAGNOSE_CELL and bool(ours) and not verified) or None,
            command=types.Command(title=title, command=command, arguments=[cell.document]),
        )
        for title, command in ACTIONS
    ]
