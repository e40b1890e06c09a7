"""Per-cell crash diagnostics: debounced scheduling, what decides them, conversion and publishing.

Each notebook's `scheduler.CellScheduler` debounces cells and checks due ones in one worker-thread batch
(`checks.refresh_cells`). What a cell's diagnostics say is `final_findings`: `crane.policy.decide` over the rules' findings, the
sandbox's verdict and the model's answer for the cell's current text and kernel state (the session keeps
them). Results are published to each cell's URI exactly as the client sent it, always (an empty list clears
stale squiggles), unless the cell changed again meanwhile (its newer check will publish) or the notebook was
closed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec
from lsprotocol import types

from crane.lsp.messages import DiagnosticData
from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot, snapshot, utf16_col
from crane.policy import LIKELY_CONFIDENCE, decide

if TYPE_CHECKING:
    from crane.finding import Finding
    from crane.lsp.host import Host
    from crane.lsp.notebook_session import CellOutcome, NotebookSession
    from crane.lsp.settings import Settings
    from crane.pipeline import FactsMode
    from crane.sandbox.verdict import SandboxVerdict

log = logging.getLogger(__name__)

SOURCE = "crane"


# -- findings → LSP ---------------------------------------------------------------------------------
def _line_length(source: str, line0: int) -> int:
    lines = source.splitlines()
    return len(lines[line0]) if 0 <= line0 < len(lines) else 0


def severity(finding: Finding) -> types.DiagnosticSeverity:
    if finding.source == "llm" or (finding.rule == "sandbox" and finding.confidence <= LIKELY_CONFIDENCE):
        # a model's opinion, or a likely crash of a copied run: never an error squiggle
        return types.DiagnosticSeverity.Warning if finding.confidence >= 0.7 else types.DiagnosticSeverity.Information
    return types.DiagnosticSeverity.Error if finding.confidence >= 0.5 else types.DiagnosticSeverity.Warning


def to_diagnostic(
    finding: Finding, cell: CellSnapshot, snap: NotebookSnapshot, mode: FactsMode,
    sandbox: SandboxVerdict | None = None,
    fixes: int | None = None,
) -> types.Diagnostic:
    line0 = max(finding.line - 1, 0)
    end_line0 = max((finding.end_line or finding.line) - 1, line0)
    col = max(finding.col, 0)
    end_col = finding.end_col if finding.end_col is not None else _line_length(cell.source, end_line0)
    if end_line0 == line0 and end_col <= col:
        end_col = max(_line_length(cell.source, line0), col + 1)
    lines = cell.source.splitlines()
    if 0 <= line0 < len(lines):  # Finding columns count characters; LSP positions count UTF-16 code units
        col = utf16_col(lines[line0], col)
    if 0 <= end_line0 < len(lines):
        end_col = utf16_col(lines[end_line0], end_col)
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
        data=msgspec.to_builtins(DiagnosticData(
            ename=finding.ename, rule=finding.rule, root_cause=finding.root_cause, confidence=finding.confidence,
            facts=mode, source=finding.source, sandbox=sandbox, fixes=fixes or None,
        )),
    )


def publish(host: Host, uri: str, diagnostics: list[types.Diagnostic], version: int | None = None) -> None:
    host.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
    )


def clear(host: Host, session: NotebookSession | None, uris: Iterable[str]) -> None:
    for uri in uris:
        if session is not None:
            session.cells.pop(uri, None)
            if session.scheduler is not None:
                session.scheduler.forget([uri])
        publish(host, uri, [])


def publish_outcomes(
    host: Host, session: NotebookSession, snap: NotebookSnapshot, outcomes: list[CellOutcome]
) -> list[CellSnapshot]:
    """Record and publish the rules' findings of checked cells, refined by what the sandbox and the model
    said about the same text against the same kernel state. Returns the cells published (still current)."""
    if session.closed:
        return []
    published = []
    for out in outcomes:
        doc = host.workspace.text_documents.get(host.key(out.cell.uri))
        if doc is None or doc.version != out.cell.version:
            continue  # closed, or edited since: a newer check is on its way
        rec = session.cell(out.cell.uri)
        rec.rule_findings, rec.outcome, rec.stale = list(out.findings), out, out.mode == "stale"
        publish_cell(host, session, snap, out.cell)
        published.append(out.cell)
    return published


def final_findings(
    settings: Settings, session: NotebookSession, cell: CellSnapshot
) -> tuple[list[Finding], SandboxVerdict | None]:
    """What a cell's diagnostics say now (`crane.policy.decide`: its findings, then the model's suspicions),
    and the sandbox's record for the diagnostics' data (or None)."""
    rules = session.known(cell.uri).rule_findings or []
    verdict = session.sandbox_verdicts.get(cell.source, session.kernel_gen) if settings.speculative_on else None
    model = session.model_answers.get(cell.source, session.kernel_gen) if settings.mode == "llm" else None
    d = decide(settings.mode, rules, verdict, model)
    return d.findings + d.suspicions, verdict  # a suspicion (source "llm", low confidence) is an Information


def publish_cell(host: Host, session: NotebookSession, snap: NotebookSnapshot, cell: CellSnapshot) -> None:
    """(Re)publish one checked cell's diagnostics from what is known about its current text."""
    rec = session.cells.get(cell.uri)
    if session.closed or rec is None or rec.rule_findings is None:
        return
    out = rec.outcome
    mode = out.mode if out is not None else "static"
    findings, sandbox = final_findings(host.settings, session, cell)
    rec.findings = findings
    entry = session.quick_fixes.get(cell.source, session.kernel_gen) if host.settings.speculative_on else None
    fixes = len(entry.fixes) if entry is not None else None
    publish(host, cell.uri, [to_diagnostic(f, cell, snap, mode, sandbox, fixes) for f in findings], cell.version)


def republish(host: Host, session: NotebookSession, cell_uri: str, source: str) -> bool:
    """Republish a cell if its text is still `source` (a sandbox or model result arrived); False otherwise."""
    snap = snapshot(host.workspace, session.uri)
    cell = snap.cell(cell_uri) if snap is not None else None
    if snap is None or cell is None or cell.source != source or session.closed:
        return False
    publish_cell(host, session, snap, cell)
    return True
