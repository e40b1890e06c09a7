"""Rule `syntax-error`: a cell that does not compile raises SyntaxError (or IndentationError/TabError) before
any of it runs — the first crash for certain."""

from __future__ import annotations

from crane.rules.finding import Finding
from crane.rules.registry import rule


@rule("syntax-error")
def syntax_error(ctx):
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
