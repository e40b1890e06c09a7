"""A model's crash verdict as a `Finding` (source "llm"), placed on the target cell's lines."""

from __future__ import annotations

from crane.finding import Finding
from crane.llm.schema import LLMVerdict
from crane.notebook.model import Cell


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def verdict_to_finding(verdict: LLMVerdict, target: Cell | None = None, min_confidence: float = 0.0) -> Finding | None:
    """The model's crash verdict as a Finding (source "llm"); None for "no crash" or below `min_confidence`."""
    a = verdict.answer
    if not a.crash or a.confidence < min_confidence:
        return None
    lines = target.source.splitlines() if target is not None else []
    line = a.line if a.line is not None and (not lines or a.line <= len(lines)) else None
    text = lines[line - 1] if line and lines else ""
    ename = (a.exception or "Exception").strip() or "Exception"
    evidence = [f"{verdict.usage.model or 'LLM'}: {one_line(a.explanation, 600)}"]
    if a.suggested_fix:
        evidence.append(f"suggested fix: {one_line(a.suggested_fix, 400)}")
    return Finding(
        rule="llm",
        ename=ename,
        message=one_line(a.explanation),
        line=line or 1,
        col=len(text) - len(text.lstrip()) if text else 0,
        end_line=line or 1,
        end_col=len(text.rstrip()) if text else None,
        root_cause=a.root_cause,
        confidence=round(a.confidence, 3),
        evidence=evidence,
        source="llm",
    )
