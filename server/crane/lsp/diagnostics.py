"""Per-cell crash diagnostics: debounced scheduling, conversion of findings, publishing.

Each notebook has a `CellScheduler`: a cell asked for again before its delay runs out is pushed back
(debounce per cell); due cells are checked together in one worker-thread batch. Results are published to
each cell's URI exactly as the client sent it, always (an empty list clears stale squiggles), unless the
cell changed again meanwhile (its newer check will publish) or the notebook was closed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from lsprotocol import types

from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot, snapshot

if TYPE_CHECKING:
    from crane.lsp.analysis_service import CellOutcome
    from crane.lsp.server import CraneServer
    from crane.lsp.session import NotebookSession
    from crane.rules.finding import Finding

log = logging.getLogger(__name__)

SOURCE = "crane"


class CellScheduler:
    """Debounced, batched refresh of cells (keyed by cell URI) for one notebook."""

    def __init__(self, run_batch: Callable[[list[str]], Awaitable[None]]):
        self._run_batch = run_batch
        self._due: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def request(self, uris: Iterable[str], delay: float) -> None:
        now = asyncio.get_running_loop().time()
        for uri in uris:
            self._due[uri] = now + delay
        self._wake.set()

    def forget(self, uris: Iterable[str]) -> None:
        for uri in uris:
            self._due.pop(uri, None)

    def close(self) -> None:
        self._task.cancel()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            if not self._due:
                await self._wake.wait()
                continue
            now = loop.time()
            ready = [u for u, t in self._due.items() if t <= now]
            if not ready:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=min(self._due.values()) - now)
                except asyncio.TimeoutError:
                    pass
                continue
            for u in ready:
                del self._due[u]
            try:
                await self._run_batch(ready)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("refreshing %d cell(s) failed", len(ready))


# -- findings → LSP ---------------------------------------------------------------------------------
def _line_length(source: str, line0: int) -> int:
    lines = source.splitlines()
    return len(lines[line0]) if 0 <= line0 < len(lines) else 0


def to_diagnostic(finding: "Finding", cell: CellSnapshot, snap: NotebookSnapshot, mode: str) -> types.Diagnostic:
    line0 = max(finding.line - 1, 0)
    end_line0 = max((finding.end_line or finding.line) - 1, line0)
    col = max(finding.col, 0)
    end_col = finding.end_col if finding.end_col is not None else _line_length(cell.source, end_line0)
    if end_line0 == line0 and end_col <= col:
        end_col = max(_line_length(cell.source, line0), col + 1)
    message = finding.message
    if not message.startswith(finding.ename):
        message = f"{finding.ename}: {message}"
    related = []
    for rel in finding.related:
        target = snap.by_number(rel.cell) if rel.cell else None
        if target is None:
            continue
        rl = max((rel.line or 1) - 1, 0)
        related.append(
            types.DiagnosticRelatedInformation(
                location=types.Location(
                    uri=target.uri,
                    range=types.Range(types.Position(rl, 0), types.Position(rl, _line_length(target.source, rl))),
                ),
                message=rel.message,
            )
        )
    return types.Diagnostic(
        range=types.Range(types.Position(line0, col), types.Position(end_line0, end_col)),
        message=message,
        severity=types.DiagnosticSeverity.Error if finding.confidence >= 0.5 else types.DiagnosticSeverity.Warning,
        code=finding.rule,
        source=SOURCE,
        related_information=related or None,
        data={
            "ename": finding.ename,
            "rule": finding.rule,
            "rootCause": finding.root_cause,
            "confidence": finding.confidence,
            "facts": mode,
        },
    )


def publish(ls: "CraneServer", uri: str, diagnostics: list[types.Diagnostic], version: int | None = None) -> None:
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
    )


def clear(ls: "CraneServer", session: "NotebookSession | None", uris: Iterable[str]) -> None:
    for uri in uris:
        if session is not None:
            session.findings.pop(uri, None)
            session.rule_findings.pop(uri, None)
            session.outcomes.pop(uri, None)
            session.last_edit.pop(uri, None)
            session.exec_orders.pop(uri, None)
            session.stale_cells.discard(uri)
            if session.scheduler is not None:
                session.scheduler.forget([uri])
        publish(ls, uri, [])


# -- the refresh batch --------------------------------------------------------------------------------
async def refresh_cells(ls: "CraneServer", session: "NotebookSession", uris: list[str]) -> list["CellOutcome"]:
    """Check `uris` of `session`'s notebook against the current text and kernel, then publish."""
    snap = snapshot(ls.workspace, session.uri)
    if snap is None or session.closed:
        return []
    wanted = set(uris)
    targets = [c for c in snap.cells if c.uri in wanted]
    for c in targets:
        if not c.is_code:  # markdown, or a cell whose language is not Python
            clear(ls, session, [c.uri])
    code = [c for c in targets if c.is_code]
    if not code:
        return []
    outcomes = await ls.run_blocking(
        ls.analysis.check_cells,
        snap,
        code,
        session,
        ls.tuning.probe_timeout_ms / 1000,
    )
    publish_outcomes(ls, session, snap, outcomes)
    return outcomes


def publish_outcomes(ls: "CraneServer", session: "NotebookSession", snap: NotebookSnapshot, outcomes) -> None:
    if session.closed:
        return
    min_conf = ls.settings.diagnostics.min_confidence
    for out in outcomes:
        doc = ls.workspace.text_documents.get(_unquote(out.cell.uri))
        if doc is None or doc.version != out.cell.version:
            continue  # closed, or edited since: a newer check is on its way
        findings = [f for f in out.findings if f.confidence >= min_conf]
        session.findings[out.cell.uri] = findings
        if out.mode == "stale":
            session.stale_cells.add(out.cell.uri)
        else:
            session.stale_cells.discard(out.cell.uri)
        publish(ls, out.cell.uri, [to_diagnostic(f, out.cell, snap, out.mode) for f in findings], out.cell.version)
    any_stale = bool(session.stale_cells)
    if any_stale != session.used_stale:
        session.used_stale = any_stale
        ls.kernels.notify_status(session)


def _unquote(uri: str) -> str:
    from urllib.parse import unquote

    return unquote(uri)
