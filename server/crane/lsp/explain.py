"""The explanation behind `crane.diagnoseCell`: one cell's predicted crash, with the evidence, as markdown.

Built from the rules' findings, their evidence and where the state came from, plus the runtime facts of the
names the cell uses. `diagnosis_context` also carries what a model needs to refine it
(`llm_bridge.diagnose_with_llm`; the command falls back to this explanation when there is no model or it
fails).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from crane.llm.settings import LLMOptions
from crane.lsp.facts_markdown import facts_markdown
from crane.lsp.messages import DiagnosisResult
from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot
from crane.pipeline import FactsMode

log = logging.getLogger(__name__)

MAX_FACT_NAMES = 8


@dataclass
class DiagnosisContext:
    snapshot: NotebookSnapshot
    cell: CellSnapshot
    findings: list[Any]  # Finding, the predicted first crash first
    probe: Any  # ProbeResult | None
    mode: FactsMode
    llm_settings: LLMOptions  # the `crane.llm` section
    rules_result: DiagnosisResult  # what the rules say, to refine



def rank(findings: list[Any]) -> list[Any]:
    """The predicted first crash first: by position (what `crane.predict` returns), confidence breaking ties."""
    return sorted(findings, key=lambda f: (f.line, f.col, -f.confidence))


def rules_markdown(ctx_cell: CellSnapshot, findings: list[Any], probe: Any, mode: str) -> str:
    out: list[str] = []
    facts_note = {
        "live": "facts read from the live kernel",
        "stale": "facts read before the cell the kernel is running (stale)",
        "static": "no kernel facts: static analysis only",
    }[mode]
    if findings:
        top = findings[0]
        out.append(f"### Cell {ctx_cell.number} will crash: `{top.ename}` on line {top.line}")
        out.append(f"> {top.message}")
        meta = [f"rule `{top.rule}`", f"confidence {top.confidence:.0%}"]
        if top.root_cause:
            meta.insert(0, f"root cause: {top.root_cause}")
        out.append(" · ".join(meta) + f" · {facts_note}")
        src_lines = ctx_cell.source.splitlines()
        if 1 <= top.line <= len(src_lines):
            out.append(f"```python\n{src_lines[top.line - 1]}\n```")
        if top.evidence:
            out.append("**Evidence**")
            out.extend(f"- {e}" for e in top.evidence)
        if top.related:
            out.append("**Where that state comes from**")
            for r in top.related:
                where = []
                if r.cell:
                    where.append(f"cell {r.cell}")
                if r.line:
                    where.append(f"line {r.line}")
                if r.execution_count is not None:
                    where.append(f"`In[{r.execution_count}]`")
                out.append(f"- {', '.join(where) or 'kernel'}: {r.message}")
        if len(findings) > 1:
            out.append("**Also**")
            out.extend(f"- line {f.line}: `{f.ename}`: {f.message}" for f in findings[1:])
    else:
        out.append(f"### Cell {ctx_cell.number}: no crash predicted")
        out.append(f"CRANE's rules found nothing that would crash ({facts_note}). They only speak when they can decide.")
    if probe is not None and getattr(probe, "facts", None):
        out.append("**Runtime facts of the names this cell uses**")
        for name in list(probe.facts)[:MAX_FACT_NAMES]:
            out.append(facts_markdown(probe.facts[name], stale=mode == "stale"))
        if getattr(probe, "undefined", None):
            out.append("Not defined in the kernel: " + ", ".join(f"`{n}`" for n in probe.undefined))
    return "\n\n".join(out)


def diagnosis_context(
    ctx_snapshot: NotebookSnapshot, outcome: Any, llm_settings: LLMOptions, sandbox: Any = None
) -> DiagnosisContext:
    """The diagnosis of one checked cell (`outcome` is an analysis_service.CellOutcome): the rules' findings,
    decided by the cell's speculative run when there is a conclusive one (`sandbox`, a SandboxVerdict for the
    cell's current text and kernel state), with what a model needs to refine it."""
    findings = rank(outcome.findings)
    if sandbox is not None and sandbox.verdict == "crash":
        from crane.policy import sandbox_finding

        findings = [sandbox_finding(sandbox, findings)]
    elif sandbox is not None and sandbox.verdict == "no-crash":
        findings = []
    markdown = rules_markdown(outcome.cell, findings, outcome.probe, outcome.mode)
    if sandbox is not None:
        from crane.sandbox.verdict import verdict_markdown

        markdown += "\n\n" + verdict_markdown(sandbox) + ("" if sandbox.conclusive else " The rules' verdict stands.")
    result = DiagnosisResult(
        notebook_uri=ctx_snapshot.uri,
        cell_uri=outcome.cell.uri,
        cell=outcome.cell.number,
        verdict=findings[0] if findings else None,
        markdown=markdown,
        findings=findings,
        mode=outcome.mode,
        source="rules",
    )
    return DiagnosisContext(ctx_snapshot, outcome.cell, findings, outcome.probe, outcome.mode, llm_settings, result)
