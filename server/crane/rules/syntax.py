"""Rule `syntax-error`: a cell that does not compile raises SyntaxError (or IndentationError/TabError) before
any of it runs — the first crash for certain."""

from __future__ import annotations

from collections.abc import Iterator

from crane.finding import Finding
from crane.rulekit.context import RuleContext
from crane.rulekit.registry import rule


@rule("syntax-error")
def syntax_error(ctx: RuleContext) -> Iterator[Finding]:
    se = ctx.analysis.syntax_error
    if se is None:
        return
    yield Finding(
        rule="syntax-error",
        ename=se.ename,
        message=f"{se.ename}: {se.message}",
        line=se.line,
        col=se.col,
        end_line=se.line,
        end_col=se.end_col,
        root_cause="implementation error",
        confidence=0.99,
        evidence=["the cell does not compile (checked with Python's own compiler after IPython's transforms)"],
    )
