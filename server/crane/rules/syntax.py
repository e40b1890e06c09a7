"""Rule `syntax-error`: a cell that does not compile raises SyntaxError (or IndentationError/TabError) before
any of it runs — the first crash for certain.

IPython compiles a cell with `codeop`'s flags, under which a cell that ends inside an open bracket, string or
block is "incomplete input" (not "'(' was never closed"): a SyntaxError on Python 3.11 and 3.12,
`_IncompleteInputError` on 3.13+ (the kernel's version: rulekit/python_versions.py)."""

from __future__ import annotations

import ast
import codeop
from collections.abc import Iterator

from crane import pyast
from crane.finding import Finding
from crane.rulekit.context import RuleContext
from crane.rulekit.python_versions import incomplete_input_ename, kernel_python
from crane.rulekit.registry import rule

INCOMPLETE = "incomplete input"


def incomplete_input_line(python_source: str) -> int | None:
    """The (transformed) line where IPython's compile finds the cell incomplete, or None: it is not."""
    try:
        pyast.parse(python_source, "<cell>", codeop.Compile().flags | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as exc:
        return (exc.lineno or 1) if exc.msg == INCOMPLETE else None
    except (ValueError, TypeError, RecursionError, MemoryError):
        return None
    return None


@rule("syntax-error")
def syntax_error(ctx: RuleContext) -> Iterator[Finding]:
    se = ctx.analysis.syntax_error
    if se is None:
        return
    ename, message, line, col, end_col = se.ename, se.message, se.line, se.col, se.end_col
    evidence = "the cell does not compile (checked with Python's own compiler after IPython's transforms)"
    incomplete = incomplete_input_line(ctx.analysis.python)
    if incomplete is not None:  # the kernel says where the cell ended; the open construct is where it began
        evidence = f"the cell ends inside an open construct: {se.message} (line {se.line})"
        ename, message = incomplete_input_ename(kernel_python(ctx)), INCOMPLETE
        line, col, end_col = ctx.analysis.original_line(incomplete), 0, None
    yield Finding(
        rule="syntax-error",
        ename=ename,
        message=f"{ename}: {message}",
        line=line,
        col=col,
        end_line=line,
        end_col=end_col,
        root_cause="implementation error",
        confidence=0.99,
        evidence=[evidence],
    )
