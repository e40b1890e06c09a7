"""`crane check` text report: one line per checked cell, prefixed by its notebook, then the totals."""

from __future__ import annotations

from crane.commands.output import CheckReport, NotebookReport
from crane.engine import CellResult
from crane.llm.cost import SessionTotals
from crane.sandbox.layer_choice import AUTO_BLOCKING_REASON
from crane.sandbox.verdict import SandboxVerdict, miniature_text


def located(path: str, message: str) -> str:
    """An error message that names its notebook (most already do: "cannot read a.ipynb: ...")."""
    return message if path in message else f"{path}: {message}"


def render_text(report: CheckReport, totals: SessionTotals | None = None) -> str:
    """`totals`: the run's LLM ledger (crane.llm.cost.SESSION), which counts only real requests, failed ones
    included, and the answers served from CRANE's cache apart."""
    lines: list[str] = []
    for nb in report.notebooks:
        lines.extend(_notebook_lines(nb))
    if totals is not None and (totals.requests or totals.failed_requests or totals.cache_hits):
        lines.append("LLM: " + totals.describe())
    if len(report.notebooks) > 1:
        crashing = sum(1 for nb in report.notebooks if nb.predicted_crashes)
        total = f"{len(report.notebooks)} notebooks: {report.predicted_crashes} cell(s) predicted to crash"
        total += f" in {crashing} notebook(s)" if crashing else ""
        if report.errors:
            total += f"; {report.errors} could not be checked"
        lines.append(total)
    return "\n".join(lines)


def _notebook_lines(nb: NotebookReport) -> list[str]:
    path = nb.notebook
    if nb.error:
        return [f"error: {located(path, nb.error)}"]
    if not nb.cells:
        return [f"{path}: nothing to check: every code cell has run (use --cell N to pick one)"]
    lines = []
    failed = [h for h in nb.history if h.status == "error"]
    if failed:
        lines.append(f"{path}: history: {len(failed)} of {len(nb.history)} replayed cells raised:")
        for h in failed:
            lines.append(f"  cell {h.cell} [{h.execution_count}]: {h.ename}: {h.evalue}")
    for r in nb.cells:
        if r.error:
            lines.append(f"{path}: cell {r.cell}: {r.error}")
        how = _how(r)
        for s in r.suspicions:  # shown apart, predicting nothing: a model's unchecked claim, a likely crash
            what = ("a likely crash (a copied run whose failing frames rest on library state the copy rebuilt"
                    if s.source == "sandbox" else "the model's suspicion (unchecked")
            lines.append(f"{path}: cell {r.cell}, line {s.line}: {what}, confidence {s.confidence:.2f}): "
                         f"{s.ename}: {s.message}")
        if not r.findings and r.prediction == "unknown":
            lines.append(f"{path}: cell {r.cell}: unknown: neither the kernel's facts nor a sandbox run decided{how}")
            continue
        if not r.findings:
            lines.append(f"{path}: cell {r.cell}: no crash predicted{how}")
            continue
        first = r.findings[0]
        lines.append(f"{path}: cell {r.cell}, line {first.line}: {first.ename}: {first.message}  [{first.rule}]{how}")
        for e in first.evidence:
            lines.append(f"    evidence: {e}")
        for rel in first.related:
            where = f"cell {rel.cell}" if rel.cell else "notebook"
            lines.append(f"    related: {where}: {rel.message}")
        for other in r.findings[1:]:
            lines.append(f"    also line {other.line}: {other.ename}: {other.message}  [{other.rule}]")
    lines.append(f"{path}: {nb.predicted_crashes} of {len(nb.cells)} checked cell(s) predicted to crash")
    return lines


def _scale(v: SandboxVerdict) -> str:
    """', miniature run: kept ...' / ', side effects blocked (...)': how the sandbox ran, when it matters (an
    ordinary cell run in the cheaper blocking confinement by choice is not worth a word on the summary line)."""
    if not v.ran:
        return ""
    out = ""
    if v.scale == "miniature":
        out += f", miniature run: {miniature_text(v.kept)}"
    if v.mode == "blocking" and v.mode_reason != AUTO_BLOCKING_REASON:  # not by choice: say why
        out += ", side effects blocked" + (f" ({v.mode_reason})" if v.mode_reason else "")
    t = v.transplant
    if v.mode == "transplant":  # not forked: a separate process on a copy (and why it was shrunk)
        out += ", in a separate process on a copy of the state" + (f", shrunk first: {t.shrunk}" if t and t.shrunk
                                                                    else "")
    if v.mode == "portable":  # the portable sandbox: say which layers ran (and whether an OS layer did)
        names = list(t.layers) if t and t.layers else ["call guard", "audit hook"]
        os_layers = [x for x in names if x not in ("call guard", "audit hook")]
        out += f", in the portable sandbox ({', '.join(names)}; " + (
            f"OS layer: {', '.join(os_layers)})" if os_layers else "no OS confinement)") + (
            f", shrunk first: {t.shrunk}" if t and t.shrunk else "")
    return out


def _how(r: CellResult) -> str:
    """How the verdict was reached, for auto and llm modes."""
    v = r.sandbox
    if v is not None and v.conclusive:
        extra = f"; {len(r.cleared)} rule finding(s) disproved" if r.cleared else ""
        return f"  (sandbox: {v.verdict}{_scale(v)}{extra})"
    if v is not None:
        return f"  (sandbox {v.verdict}{_scale(v)}: {v.reason or 'inconclusive'}; rules' verdict)"
    if r.llm:
        return "  (LLM)"
    return ""
