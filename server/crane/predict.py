"""The offline predictor: run every rule over a cell's static analysis and the kernel's facts.

`predict(analysis, probe, scope=None, target_cell=None)` returns all findings, the predicted first crash
first: sorted by position, and findings on the same simple statement merged (the most confident kept, its
evidence extended with the others'). `probe=None` means no kernel: only static rules speak. No LLM, and the
target cell is never executed.
"""

from __future__ import annotations

import ast

import msgspec

from crane.analysis.cell import CellAnalysis
from crane.analysis.scope import NotebookScope
from crane.finding import Finding
from crane.probe.facts import ProbeResult
from crane.rulekit.context import RuleContext
from crane.rulekit.registry import run_rules


def _statement_spans(analysis: CellAnalysis) -> list[tuple[int, int]]:
    """(first, last) original lines of every simple (non-compound) statement."""
    spans: list[tuple[int, int]] = []
    if analysis.tree is None:
        return spans
    for node in ast.walk(analysis.tree):
        if isinstance(node, ast.stmt) and not hasattr(node, "body"):
            first = analysis.original_line(node.lineno)
            last = analysis.original_line(node.end_lineno or node.lineno)
            spans.append((first, last))
    return spans


def _statement_key(line: int, spans: list[tuple[int, int]]) -> tuple[int, int]:
    best = None
    for first, last in spans:
        if first <= line <= last and (best is None or last - first < best[1] - best[0]):
            best = (first, last)
    return best or (line, line)


def merge(findings: list[Finding], analysis: CellAnalysis) -> list[Finding]:
    spans = _statement_spans(analysis)
    groups: dict[tuple[int, int], list[Finding]] = {}
    for f in findings:
        groups.setdefault(_statement_key(f.line, spans), []).append(f)
    out = []
    for group in groups.values():
        group.sort(key=lambda f: (-f.confidence, f.line, f.col))
        best = group[0]
        extra = [f"also: {f.ename} ({f.rule}): {f.message}" for f in group[1:]]
        if extra:
            best = msgspec.structs.replace(best, evidence=list(best.evidence) + extra)
        out.append(best)
    out.sort(key=lambda f: (f.line, f.col, -f.confidence))
    return out


def predict(
    analysis: CellAnalysis,
    probe: ProbeResult | None,
    scope: NotebookScope | None = None,
    target_cell: int | None = None,
    environment: ProbeResult | None = None,
) -> list[Finding]:
    """All predicted crashes of the target cell, the first one first. `environment`: without a kernel, the
    modules and files CRANE's own environment sees (`pipeline.StaticEnvironment`)."""
    annotate_defined_in(probe, scope)
    ctx = RuleContext(analysis, probe, scope, target_cell, environment)
    return merge(run_rules(ctx), analysis)


def annotate_defined_in(probe: ProbeResult | None, scope: NotebookScope | None) -> None:
    """Fill `Facts.defined_in`: the execution count of the cell that last bound each probed name."""
    if probe is None or scope is None:
        return
    for name, facts in probe.facts.items():
        if facts.defined_in is None:
            facts.defined_in = scope.defined_in(name)
