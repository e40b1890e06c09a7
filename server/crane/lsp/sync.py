"""Notebook document sync: `notebookDocument/didOpen`, `didChange`, `didSave`, `didClose`.

pygls has already applied each change to its workspace when these run; here we decide what to re-check:
- text edits: the edited cells, debounced (and, while no kernel is attached, every cell: static scope
  depends on the other cells' text);
- structure changes: closed cells are cleared (empty diagnostics), every cell is re-checked (numbers moved);
- execution summaries that changed: a cell ran, so the cells depending on what it wrote are re-checked;
- save: every cell; close: every cell cleared, the kernel let go.
An unknown notebook is logged and ignored (never fatal).
"""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types

from crane.lsp import diagnostics
from crane.lsp.checks import refresh_cells
from crane.lsp.crane_server import CraneServer
from crane.lsp.notebook_map import notebook_path, snapshot
from crane.lsp.notebook_session import NotebookSession
from crane.lsp.scheduler import CellScheduler

log = logging.getLogger(__name__)

OTHERS_DELAY_S = 0.1  # static scope: cells other than the edited one are re-checked this much later


async def did_open(ls: CraneServer, params: types.DidOpenNotebookDocumentParams) -> None:
    nb = params.notebook_document
    key = ls.key(nb.uri)
    old = ls.sessions.pop(key, None)
    if old is not None:  # opened twice without a close: start over
        await _close_session(ls, old, [])
    session = NotebookSession(uri=nb.uri, path=notebook_path(nb.uri))

    async def run_batch(uris: list[str]) -> None:
        await refresh_cells(ls, session, uris)

    session.scheduler = CellScheduler(run_batch)
    for cell in nb.cells:
        session.cell(cell.document).exec_order = cell.execution_summary.execution_order if cell.execution_summary else None
    ls.sessions[key] = session
    ls.kernels.open(session)
    ls.kernels.notify_status(session)
    session.scheduler.request([c.document for c in nb.cells], 0.0)


async def did_change(ls: CraneServer, params: types.DidChangeNotebookDocumentParams) -> None:
    session = ls.session_of_notebook(params.notebook_document.uri)
    if session is None or session.scheduler is None:
        log.warning("didChange for a notebook that is not open: %s", params.notebook_document.uri)
        return
    cells = params.change.cells
    if cells is None:
        return
    debounce = ls.tuning.debounce_ms / 1000
    static_scope = session.attachment is None
    recheck_all = False
    if cells.structure is not None:
        closed = [c.uri for c in cells.structure.did_close or []]
        diagnostics.clear(ls, session, closed)
        recheck_all = True
    ran: list[str] = []
    for data in cells.data or []:
        order = data.execution_summary.execution_order if data.execution_summary else None
        if order is not None and session.known(data.document).exec_order != order:
            ran.append(data.document)
        session.cell(data.document).exec_order = order
        session.scheduler.request([data.document], debounce)  # kind or language may have changed
    edited = [t.document.uri for t in cells.text_content or []]
    now = asyncio.get_running_loop().time()
    for uri in edited:
        session.cell(uri).last_edit = now
    if recheck_all or (edited and static_scope):
        snap = snapshot(ls.workspace, session.uri)
        if snap is not None:
            # the other cells a little later, so the edited ones are published in a batch of their own
            later = debounce if recheck_all else debounce + OTHERS_DELAY_S
            session.scheduler.request([c.uri for c in snap.cells if c.uri not in edited], later)
    if edited:
        session.scheduler.request(edited, debounce)
    if ran:
        session.kernel_changed()
        snap = snapshot(ls.workspace, session.uri)
        for uri in ran:
            cell = snap.cell(uri) if snap else None
            ls.kernels.recheck_after_run(session, cell.source if cell else None)


async def did_save(ls: CraneServer, params: types.DidSaveNotebookDocumentParams) -> None:
    session = ls.session_of_notebook(params.notebook_document.uri)
    if session is None:
        log.warning("didSave for a notebook that is not open: %s", params.notebook_document.uri)
        return
    ls.kernels.recheck_all(session)


async def did_close(ls: CraneServer, params: types.DidCloseNotebookDocumentParams) -> None:
    session = ls.sessions.pop(ls.key(params.notebook_document.uri), None)
    uris = [c.uri for c in params.cell_text_documents]
    if session is None:
        diagnostics.clear(ls, None, uris)
        return
    await _close_session(ls, session, uris)


async def _close_session(ls: CraneServer, session: NotebookSession, uris: list[str]) -> None:
    session.closed = True
    if session.scheduler is not None:
        session.scheduler.close()
    for uri in set(uris) | {u for u, r in session.cells.items() if r.findings is not None}:
        diagnostics.publish(ls, uri, [])
    for rec in session.cells.values():
        rec.findings = None
    await ls.kernels.close(session)
