"""Where a code cell's source text sits in the `.ipynb` file's own JSON text (lines and columns of the file).

SARIF consumers (GitHub code scanning, the codeql upload action's fingerprints) read a result's region as
lines and columns of the file as stored: for a notebook, the JSON. `NotebookTextMap.locate(cell, line, col)`
turns a position in a cell's source (1-based line, 0-based column, as in `Finding`) into the 1-based line and
1-based column (UTF-16 code units, SARIF's default `columnKind`) of that character inside the JSON string
literal that holds it, whether the cell's `source` is a list of lines (what Jupyter writes) or one string.

Invariants: only the `cells[*].source` values are scanned position by position; every other value is skipped
by the standard JSON decoder. Nothing here raises on text that is not a notebook: `build` returns None and
`locate` returns None where a position cannot be mapped.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

_WS = re.compile(r"[ \t\n\r]*")
_NEWLINE = re.compile(r"\r\n|\r|\n")
_DECODER = json.JSONDecoder()
# The C scanner json itself uses (not in the type stubs): (text, index after the quote) -> (value, end).
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class _Malformed(Exception):
    pass


@dataclass
class _Literal:
    """One JSON string literal of a cell's source: its decoded text and where its raw text starts."""

    text: str
    raw_start: int  # index in the file text of the first character after the opening quote
    raw_offsets: list[int]  # raw offset (from raw_start) of each decoded character, plus the end


@dataclass
class _CellSource:
    literals: list[_Literal]
    starts: list[int] = field(default_factory=list)  # decoded offset where each literal starts in the source

    def __post_init__(self) -> None:
        pos = 0
        for lit in self.literals:
            self.starts.append(pos)
            pos += len(lit.text)
        self.length = pos
        self.source = "".join(lit.text for lit in self.literals)
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(self.source)]


def _raw_offsets(raw: str) -> list[int]:
    """Offset in the raw literal of each character `json` decodes from it (a surrogate pair is one)."""
    out = []
    i, n = 0, len(raw)
    while i < n:
        out.append(i)
        if raw[i] != "\\":
            i += 1
        elif raw[i + 1 : i + 2] != "u":
            i += 2
        else:
            hi = int(raw[i + 2 : i + 6], 16)
            lo_ok = raw[i + 6 : i + 8] == "\\u" and 0xDC00 <= int(raw[i + 8 : i + 12] or "0", 16) <= 0xDFFF
            i += 12 if 0xD800 <= hi <= 0xDBFF and lo_ok else 6
    out.append(i)
    return out


class _Scanner:
    def __init__(self, text: str):
        self.text = text

    def ws(self, i: int) -> int:
        m = _WS.match(self.text, i)
        return m.end() if m else i

    def expect(self, i: int, ch: str) -> int:
        i = self.ws(i)
        if self.text[i : i + 1] != ch:
            raise _Malformed(f"expected {ch!r} at {i}")
        return i + 1

    def skip_value(self, i: int) -> int:
        try:
            _, end = _DECODER.raw_decode(self.text, self.ws(i))
        except json.JSONDecodeError as exc:
            raise _Malformed(str(exc)) from None
        return end

    def string(self, i: int) -> tuple[_Literal, int]:
        i = self.ws(i)
        if self.text[i : i + 1] != '"':
            raise _Malformed(f"expected a string at {i}")
        try:
            value, end = _scanstring(self.text, i + 1)
        except json.JSONDecodeError as exc:
            raise _Malformed(str(exc)) from None
        return _Literal(value, i + 1, _raw_offsets(self.text[i + 1 : end - 1])), end

    def members(self, i: int):
        """Yield (key, index of the value) for each member of the object at i; the caller consumes the value and
        sends back the index after it."""
        i = self.expect(i, "{")
        j = self.ws(i)
        if self.text[j : j + 1] == "}":
            return j + 1
        while True:
            key, i = self.string(i)
            i = self.expect(i, ":")
            i = yield key.text, i
            i = self.ws(i)
            ch = self.text[i : i + 1]
            if ch == "}":
                return i + 1
            if ch != ",":
                raise _Malformed(f"expected ',' or '}}' at {i}")
            i += 1

    def elements(self, i: int):
        """As `members`, for the array at i: yields the index of each element."""
        i = self.expect(i, "[")
        j = self.ws(i)
        if self.text[j : j + 1] == "]":
            return j + 1
        while True:
            i = yield i
            i = self.ws(i)
            ch = self.text[i : i + 1]
            if ch == "]":
                return i + 1
            if ch != ",":
                raise _Malformed(f"expected ',' or ']' at {i}")
            i += 1


def _drive(gen, handle):
    """Run a members/elements generator, calling handle(item) -> index after the value; return the end."""
    try:
        item = next(gen)
        while True:
            item = gen.send(handle(item))
    except StopIteration as stop:
        return stop.value


class NotebookTextMap:
    """Positions of every cell's source inside the notebook file's text (cells numbered from 1)."""

    def __init__(self, text: str, cells: list[_CellSource | None]):
        self.text = text
        self.cells = cells
        self._line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    @classmethod
    def build(cls, text: str) -> NotebookTextMap | None:
        """Scan a notebook's JSON text; None when it is not a JSON object with a `cells` array."""
        sc = _Scanner(text)
        cells: list[_CellSource | None] = []
        found = False

        def cell(i: int) -> int:
            literals: list[_Literal] | None = None

            def member(item) -> int:
                nonlocal literals
                key, j = item
                if key != "source":
                    return sc.skip_value(j)
                j = sc.ws(j)
                if text[j : j + 1] == '"':
                    lit, end = sc.string(j)
                    literals = [lit]
                    return end
                lits: list[_Literal] = []

                def element(k: int) -> int:
                    lit, end = sc.string(k)
                    lits.append(lit)
                    return end

                end = _drive(sc.elements(j), element)
                literals = lits
                return end

            if text[sc.ws(i) : sc.ws(i) + 1] != "{":
                cells.append(None)
                return sc.skip_value(i)
            end = _drive(sc.members(i), member)
            cells.append(_CellSource(literals) if literals is not None else None)
            return end

        def top(item) -> int:
            nonlocal found
            key, j = item
            if key != "cells":
                return sc.skip_value(j)
            found = True
            return _drive(sc.elements(j), cell)

        try:
            _drive(sc.members(0), top)
        except (_Malformed, ValueError, IndexError):
            return None
        return cls(text, cells) if found else None

    def _file_position(self, index: int) -> tuple[int, int]:
        """1-based line and 1-based UTF-16 column of the character at `index` of the file text."""
        line0 = bisect.bisect_right(self._line_starts, index) - 1
        prefix = self.text[self._line_starts[line0] : index]
        return line0 + 1, len(prefix.encode("utf-16-le")) // 2 + 1

    def line_text(self, cell: int, line: int) -> str | None:
        """The text of a 1-based line of the cell's source, without its line break."""
        src = self._cell(cell)
        if src is None or not 1 <= line <= len(src.line_starts):
            return None
        end = src.line_starts[line] if line < len(src.line_starts) else src.length
        return src.source[src.line_starts[line - 1] : end].rstrip("\r\n")

    def source_line_count(self, cell: int) -> int | None:
        src = self._cell(cell)
        return len(src.line_starts) if src else None

    def _cell(self, cell: int) -> _CellSource | None:
        return self.cells[cell - 1] if 1 <= cell <= len(self.cells) else None

    def locate(self, cell: int, line: int, col: int = 0, end: bool = False) -> tuple[int, int] | None:
        """File (line, column) of the character at (line, col) of the cell's source (col clamped to the line).

        With `end=True` the position is an exclusive end: a column just past the last character of a line
        maps to just past that character in the literal that holds it (not to the start of the next literal).
        """
        src = self._cell(cell)
        if src is None or not src.literals or not 1 <= line <= len(src.line_starts):
            return None
        line_start = src.line_starts[line - 1]
        next_start = src.line_starts[line] if line < len(src.line_starts) else src.length
        line_text = src.source[line_start:next_start]
        content = len(line_text.rstrip("\r\n"))
        offset = line_start + max(0, min(col, content))
        if end and offset > 0:
            k = bisect.bisect_left(src.starts, offset) - 1  # the literal holding the character before the end
            k = max(k, 0)
        else:
            k = bisect.bisect_right(src.starts, offset) - 1
        # Skip empty literals: a position must land inside a literal that holds text.
        while k < len(src.literals) - 1 and offset - src.starts[k] >= len(src.literals[k].text) and not end:
            k += 1
        lit = src.literals[k]
        within = min(max(offset - src.starts[k], 0), len(lit.text))
        return self._file_position(lit.raw_start + lit.raw_offsets[within])
