"""Per-cell crash diagnostics: debounced scheduling, conversion of findings, publishing.

Each notebook has a `CellScheduler`: a cell asked for again before its delay runs out is pushed back
(debounce per cell); due cells are checked together in one worker-thread batch. Results are published to
each cell's URI exactly as the client sent it, always (an empty list clears stale squiggles), unless the
cell changed again meanwhile (its newer check will publish) or the notebook was closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

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


def severity(finding: Finding) -> types.DiagnosticSeverity:
    if finding.source == "llm":  # a model's opinion: never an error squiggle
        return types.DiagnosticSeverity.Warning if finding.confidence >= 0.7 else types.DiagnosticSeverity.Information
    return types.DiagnosticSeverity.Error if finding.confidence >= 0.5 else types.DiagnosticSeverity.Warning


def to_diagnostic(
    finding: Finding, cell: CellSnapshot, snap: NotebookSnapshot, mode: str, sandbox: dict | None = None
) -> types.Diagnostic:
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
        severity=severity(finding),
        code=finding.rule,
        source=SOURCE,
        related_information=related or None,
        data={
            "ename": finding.ename,
            "rule": finding.rule,
            "rootCause": finding.root_cause,
            "confidence": finding.confidence,
            "facts": mode,
            "source": finding.source,
            **({"sandbox": sandbox} if sandbox else {}),
        },
    )


def publish(ls: CraneServer, uri: str, diagnostics: list[types.Diagnostic], version: int | None = None) -> None:
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
    )


def clear(ls: CraneServer, session: NotebookSession | None, uris: Iterable[str]) -> None:
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
async def refresh_cells(ls: CraneServer, session: NotebookSession, uris: list[str]) -> list[CellOutcome]:
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


def publish_outcomes(ls: CraneServer, session: NotebookSession, snap: NotebookSnapshot, outcomes) -> None:
    """Publish the rules' findings of checked cells, refined by what the sandbox and the model said about the
    same text against the same kernel state (cached), and ask them about the cells they have not seen yet."""
    if session.closed:
        return
    for out in outcomes:
        doc = ls.workspace.text_documents.get(_unquote(out.cell.uri))
        if doc is None or doc.version != out.cell.version:
            continue  # closed, or edited since: a newer check is on its way
        session.rule_findings[out.cell.uri] = list(out.findings)
        session.outcomes[out.cell.uri] = out
        if out.mode == "stale":
            session.stale_cells.add(out.cell.uri)
        else:
            session.stale_cells.discard(out.cell.uri)
        publish_cell(ls, session, snap, out.cell)
        ls.speculation.consider(session, out.cell)
    any_stale = bool(session.stale_cells)
    if any_stale != session.used_stale:
        session.used_stale = any_stale
        ls.kernels.notify_status(session)


def final_findings(ls: CraneServer, session: NotebookSession, cell: CellSnapshot) -> tuple[list[Finding], dict | None]:
    """What a cell's diagnostics say now: the sandbox's verdict for this text and kernel state when it is
    conclusive (crash: the real exception; no-crash: nothing), else the rules' findings, else (llm mode) the
    model's. Also the sandbox's verdict, for the diagnostics' data."""
    rules = session.rule_findings.get(cell.uri) or []
    verdict = ls.speculation.cached(session, cell)
    info = None
    if verdict is not None:
        info = {"verdict": verdict.verdict, "reason": verdict.reason, "elapsedMs": round(verdict.elapsed_ms, 1)}
        if verdict.verdict == "crash":
            from crane.modes import sandbox_finding

            return [sandbox_finding(verdict, rules)], info
        if verdict.verdict == "no-crash":
            return [], info
    if not rules:
        llm = ls.llm.cached(session, cell)
        if llm is not None:
            return [llm], info
    return rules, info


def publish_cell(ls: CraneServer, session: NotebookSession, snap: NotebookSnapshot, cell: CellSnapshot) -> None:
    """(Re)publish one checked cell's diagnostics from what is known about its current text."""
    if session.closed or cell.uri not in session.rule_findings:
        return
    out = session.outcomes.get(cell.uri)
    mode = out.mode if out is not None else "static"
    findings, sandbox = final_findings(ls, session, cell)
    session.findings[cell.uri] = findings
    publish(ls, cell.uri, [to_diagnostic(f, cell, snap, mode, sandbox) for f in findings], cell.version)


def republish(ls: CraneServer, session: NotebookSession, cell_uri: str, source: str) -> bool:
    """Republish a cell if its text is still `source` (a sandbox or model result arrived); False otherwise."""
    snap = snapshot(ls.workspace, session.uri)
    cell = snap.cell(cell_uri) if snap is not None else None
    if cell is None or cell.source != source or session.closed:
        return False
    publish_cell(ls, session, snap, cell)
    return True


def _unquote(uri: str) -> str:
    from urllib.parse import unquote

    return unquote(uri)
