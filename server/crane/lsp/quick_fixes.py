"""Verified quick fixes in the daemon: repairs tested in the sandbox before they are offered.

When the sandbox's speculative run of a cell crashes (auto/llm modes, an attached kernel), the cell is queued
for a search (`crane.fixes.search.search_fixes`) in a fork-sandbox session of the kernel. Searches run one at
a time on a sandbox thread of their own with their own kernel connection (never on the event loop; the
speculative runs of other cells go on meanwhile), only while the kernel is idle; a search stops as soon as
the kernel's state changes or the cell is edited.
Results are kept by the session per (cell text, kernel state generation), as they arrive, so
`textDocument/codeAction` answers from the cache at once; each arrival republishes the cell's diagnostics
(`data.fixes` = how many verified fixes are ready), which makes the editor ask for code actions again.

Code actions: an edit fix is a quick fix with a WorkspaceEdit on the cell ("Use column 'Total_Gross'
(tested)"), and on the cell defining the function the crash is in when the fix edits that one; a fix that
needs cells run first (edited ones again) carries the client command `crane.ui.runCells(notebookUri,
cellUris)` ("Run cell 3 first (tested)": VS Code runs them when the user picks it, after applying the edit).
A fix whose cells changed since it was verified is not offered.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from crane.lsp.diagnostics import republish
from crane.lsp.messages import CLIENT_RUN_CELLS
from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot, snapshot
from crane.lsp.notebook_session import FixEntry
from crane.lsp.sandbox_thread import SandboxThread

if TYPE_CHECKING:
    from crane.fixes.model import SearchReport, VerifiedFix
    from crane.lsp.host import Host
    from crane.lsp.notebook_session import NotebookSession
    from crane.lsp.speculation import SpeculationService

log = logging.getLogger(__name__)

SEARCH_SECONDS = 20.0
BUSY_POLL_S = 0.2


class QuickFixService:
    def __init__(self, host: Host, speculation: SpeculationService):
        self.host = host
        self.speculation = speculation
        self._due: dict[tuple[str, str], float] = {}
        self._running: dict[tuple[str, str], tuple[str, threading.Event]] = {}  # key -> (source, cancel)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._thread = SandboxThread("crane-fixes", host)
        self.searches = 0  # searches started (tests, logs)

    # -- what to search ---------------------------------------------------------------------------------------
    def entry(self, session: NotebookSession, cell: CellSnapshot) -> FixEntry | None:
        if not self.host.settings.speculative_on:
            return None
        return session.quick_fixes.get(cell.source, session.kernel_gen)

    def applicable(self, session: NotebookSession) -> bool:
        att = session.attachment
        return self.host.settings.speculative_on and att is not None and att.alive and not session.closed

    def consider(self, session: NotebookSession, cell: CellSnapshot) -> None:
        """A cell's diagnostics were published: search fixes when the sandbox saw it crash (and none are known)."""
        key = (self.host.key(session.uri), cell.uri)
        running = self._running.get(key)
        if running is not None and running[0] != cell.source:
            running[1].set()  # the text changed: that search is moot
        if not self.applicable(session) or not cell.is_code:
            return
        verdict = session.sandbox_verdicts.get(cell.source, session.kernel_gen)
        if verdict is None or verdict.verdict != "crash" or session.quick_fixes.has(cell.source, session.kernel_gen):
            return
        self._due[key] = asyncio.get_running_loop().time()
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        self._wake.set()

    # -- the worker -------------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            if not self._due:
                await self._wake.wait()
                continue
            ran = False
            for key in sorted(self._due, key=self._due.__getitem__):
                session = self.host.sessions.get(key[0])
                if session is None or not self.applicable(session):
                    self._due.pop(key, None)
                    continue
                if session.attachment.busy:  # type: ignore[union-attr]
                    continue  # a user cell runs: wait until the kernel is idle
                self._due.pop(key, None)
                try:
                    await self._search(session, key)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("quick-fix search failed")
                ran = True
                break
            if not ran:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=BUSY_POLL_S)
                except asyncio.TimeoutError:
                    pass

    async def _search(self, session: NotebookSession, key: tuple[str, str]) -> None:
        from crane.lsp.llm_bridge import notebook_cells
        from crane.notebook.model import Notebook

        snap = snapshot(self.host.workspace, session.uri)
        cell = snap.cell(key[1]) if snap is not None else None
        if snap is None or cell is None or not cell.is_code:
            return
        gen, source = session.kernel_gen, cell.source
        verdict = session.sandbox_verdicts.get(source, gen)
        if verdict is None or verdict.verdict != "crash" or session.quick_fixes.has(source, gen):
            return
        att = session.attachment
        if att is None or not att.alive:
            return
        entry = FixEntry()
        session.quick_fixes.put(source, gen, entry)
        nb = Notebook(path=snap.path, cells=notebook_cells(snap))
        out = session.known(cell.uri).outcome
        pre = out.probe if out is not None and out.cell.source == source else None
        findings = list(session.known(cell.uri).rule_findings or [])
        cancel = threading.Event()
        self._running[key] = (source, cancel)
        budget_s = self.host.settings.speculative.budget_seconds
        started = asyncio.get_running_loop().time()

        def stop() -> bool:  # read on the search's thread: a set flag, ints and a float
            edited = session.known(cell.uri).last_edit > started
            return cancel.is_set() or edited or session.closed or session.kernel_gen != gen

        def on_fix(fix: VerifiedFix) -> None:  # on the sandbox thread
            self.host.call_soon_threadsafe(self._arrived, session, cell.uri, source, gen, fix)

        def work(conn: Any) -> SearchReport:
            from crane.fixes.sandbox import ForkFixSandbox
            from crane.fixes.search import SearchBudget, search_fixes

            sandbox = ForkFixSandbox(conn, budget_s=budget_s)
            try:
                return search_fixes(nb, cell.number, sandbox, pre=pre, findings=findings,
                                    budget=SearchBudget(max_seconds=SEARCH_SECONDS), on_fix=on_fix, should_stop=stop)
            finally:
                sandbox.close()

        self.searches += 1
        try:
            report = await self._thread.with_connection(att, work)
        except Exception as exc:  # no sandbox session (unavailable here): no quick fixes, said in the log
            log.info("no verified quick fixes for cell %d: %s", cell.number, exc)
            report = None
        finally:
            self._running.pop(key, None)
        if cancel.is_set() or session.known(cell.uri).last_edit > started:
            # moot (the text changed): the same text later gets a search of its own
            session.quick_fixes.discard(source, gen)
            return
        if session.kernel_gen != gen and not session.closed and session.known(cell.uri).findings:
            # the kernel's state changed meanwhile: the crash is verified again (speculation), then searched
            self.speculation.request(session, cell.uri)
        entry.done = True
        entry.report = report
        if report is not None:
            log.info("quick fixes for cell %d: %d verified of %d tried in %.1f s%s", cell.number, len(report.fixes),
                     report.tried, report.elapsed_s, f" ({report.reason})" if report.reason else "")

    def _arrived(self, session: NotebookSession, cell_uri: str, source: str, gen: int, fix: VerifiedFix) -> None:
        entry = session.quick_fixes.get(source, gen)
        if entry is None or session.closed or session.kernel_gen != gen:
            return  # the kernel's state changed meanwhile: discarded
        entry.fixes.append(fix)
        republish(self.host, session, cell_uri, source)

    # -- code actions -----------------------------------------------------------------------------------------
    def actions(self, session: NotebookSession, snap: NotebookSnapshot, cell: CellSnapshot,
                diagnostics: list[types.Diagnostic]) -> list[types.CodeAction]:
        """The verified fixes of the cell's current text as quick fixes (none while they are being searched)."""
        entry = self.entry(session, cell)
        if entry is None:
            return []
        out: list[types.CodeAction] = []
        for fix in list(entry.fixes):
            action = self._action(snap, cell, fix, diagnostics, preferred=not out)
            if action is not None:
                out.append(action)
        return out

    def _action(self, snap: NotebookSnapshot, cell: CellSnapshot, fix: VerifiedFix,
                diagnostics: list[types.Diagnostic], preferred: bool) -> types.CodeAction | None:
        from crane.agent.proposal import minimal_text_edit
        from crane.fixes.apply import changes

        if fix.old != cell.source:
            return None
        edited = {c.cell: c.old for c in fix.cell_edits}
        run = []
        for k, src in zip(fix.run_first, fix.run_first_sources, strict=False):
            other = snap.by_number(k)
            if other is None or not other.is_code or other.source != edited.get(k, src):
                return None  # a cell to run first changed since the fix was verified
            run.append(other.uri)
        doc_changes: list[types.TextDocumentEdit] = []
        for k, (old, new) in sorted(changes(fix).items()):
            target = snap.by_number(k)
            te = minimal_text_edit(old, new)
            if target is None or te is None or target.source != old:
                return None
            r = te["range"]
            doc_changes.append(types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=target.uri, version=target.version),
                edits=[types.TextEdit(range=types.Range(
                    start=types.Position(r["start"]["line"], r["start"]["character"]),
                    end=types.Position(r["end"]["line"], r["end"]["character"])), new_text=te["newText"])],
            ))
        edit = types.WorkspaceEdit(document_changes=list(doc_changes)) if doc_changes else None
        command = types.Command(title=fix.label, command=CLIENT_RUN_CELLS, arguments=[snap.uri, run]) if run else None
        return types.CodeAction(title=fix.label, kind=types.CodeActionKind.QuickFix, diagnostics=diagnostics or None,
                                is_preferred=preferred or None, edit=edit, command=command)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for _source, cancel in self._running.values():
            cancel.set()
        self._thread.close()
