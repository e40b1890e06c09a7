"""Text edits of a cell's source at AST positions, keeping everything else of the cell byte for byte.

Positions come from `CellAnalysis` (the IPython-transformed Python the AST was parsed from); an edit is only
made on a line IPython did not rewrite (the Python line equals the original line), so columns are exact.
AST columns are UTF-8 byte offsets; they are converted to character offsets here.
"""

from __future__ import annotations

import ast

from crane.analysis.cell import CellAnalysis


class EditError(ValueError):
    """The edit cannot be made exactly (a line rewritten by IPython, overlapping edits)."""


class SourceEdit:
    """Accumulates non-overlapping replacements and insertions on one cell source, then `apply()`s them."""

    def __init__(self, analysis: CellAnalysis):
        self.analysis = analysis
        self.source = analysis.source
        self._orig_lines = self.source.split("\n")
        self._py_lines = analysis.python.split("\n")
        self._starts: list[int] = []
        pos = 0
        for ln in self._orig_lines:
            self._starts.append(pos)
            pos += len(ln) + 1
        self.changes: list[tuple[int, int, str]] = []

    # -- positions -------------------------------------------------------------------------------------------
    def _orig_line(self, py_line: int) -> int:
        line = self.analysis.original_line(py_line)
        py_text = self._py_lines[py_line - 1] if 0 < py_line <= len(self._py_lines) else None
        orig_text = self._orig_lines[line - 1] if 0 < line <= len(self._orig_lines) else None
        if py_text is None or orig_text is None or py_text.rstrip() != orig_text.rstrip():
            raise EditError(f"line {line} is rewritten by IPython: no exact edit")
        return line

    def offset(self, py_line: int, byte_col: int) -> int:
        line = self._orig_line(py_line)
        text = self._orig_lines[line - 1]
        col = len(text.encode("utf-8")[:byte_col].decode("utf-8", "ignore"))
        return self._starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        """(start, end) character offsets of `node` in the original source."""
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def text(self, node: ast.AST) -> str:
        s, e = self.span(node)
        return self.source[s:e]

    def line_start(self, py_line: int) -> int:
        return self._starts[self._orig_line(py_line) - 1]

    def indent_of(self, py_line: int) -> str:
        text = self._orig_lines[self._orig_line(py_line) - 1]
        return text[: len(text) - len(text.lstrip())]

    # -- changes ---------------------------------------------------------------------------------------------
    def replace(self, node: ast.AST, new_text: str) -> SourceEdit:
        s, e = self.span(node)
        return self.replace_span(s, e, new_text)

    def replace_span(self, start: int, end: int, new_text: str) -> SourceEdit:
        for s, e, _ in self.changes:
            if start < e and s < end or (start == end == s):
                raise EditError("overlapping edits")
        self.changes.append((start, end, new_text))
        return self

    def insert_before(self, stmt: ast.stmt, lines: list[str]) -> SourceEdit:
        """New lines before the statement `stmt`, at its indentation."""
        indent = self.indent_of(stmt.lineno)
        pos = self.line_start(stmt.lineno)
        return self.replace_span(pos, pos, "".join(f"{indent}{ln}\n" for ln in lines))

    def insert_after(self, stmt: ast.stmt, lines: list[str]) -> SourceEdit:
        """New lines after the statement `stmt` (at its indentation)."""
        end_line = self._orig_line(stmt.end_lineno or stmt.lineno)
        indent = self.indent_of(stmt.lineno)
        pos = self._starts[end_line - 1] + len(self._orig_lines[end_line - 1])
        return self.replace_span(pos, pos, "".join(f"\n{indent}{ln}" for ln in lines))

    def add_keyword(self, call: ast.Call, text: str) -> SourceEdit:
        """Append `name=value` as the call's last argument."""
        s, e = self.span(call)
        inner = self.source[s:e].rstrip()
        if not inner.endswith(")"):
            raise EditError("the call does not end with ')'")
        close = s + len(inner) - 1
        body = self.source[s:close].rstrip()
        sep = "" if body.endswith("(") else ", "
        if body.endswith(","):
            sep = " "
        return self.replace_span(close, close, sep + text)

    def remove_argument(self, call: ast.Call, arg: ast.AST) -> SourceEdit:
        """Remove one positional or keyword argument (`arg` is the positional expr or the ast.keyword)."""
        items: list[ast.AST] = sorted([*call.args, *call.keywords],
                                      key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
        i = items.index(arg)
        s, e = self.span(arg)
        if i + 1 < len(items):
            e = self.span(items[i + 1])[0]
        elif i > 0:
            s = self.span(items[i - 1])[1]
        return self.replace_span(s, e, "")

    def apply(self) -> str:
        out = self.source
        for s, e, new in sorted(self.changes, key=lambda c: (c[0], c[1]), reverse=True):
            out = out[:s] + new + out[e:]
        return out


def change_size(old: str, new: str) -> int:
    """How many characters an edit changes (the sum over the differing blocks of the larger side)."""
    import difflib

    if old == new:
        return 0
    sm = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal")


def quote_like(original: str, value: str) -> str:
    """`value` as a string literal in the quote style of the literal `original` ("x" stays double-quoted)."""
    text = original.lstrip("rRbBuUfF")
    if text.startswith('"') and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return repr(value)
