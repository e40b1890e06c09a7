"""`crane.notebook.json_positions`: a cell's source position -> line and UTF-16 column in the .ipynb JSON text.

The property: whatever the cell text (quotes, backslashes, tabs, non-ASCII, astral characters, CRLF) and
however the notebook was written (Jupyter's one-string-per-line list with indent=1 and raw UTF-8, ASCII
escapes, or one string), the raw JSON at the mapped position decodes to the source character there.
"""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from crane.notebook.json_positions import NotebookTextMap

_NL = re.compile(r"\r\n|\r|\n")


def _notebook_text(sources: list[str], style: str) -> str:
    cells: list[dict] = []
    for src in sources:
        if style == "string":
            value: str | list[str] = src
        else:
            value = src.splitlines(keepends=True) if style == "lines" else [src[i : i + 3] for i in range(0, len(src), 3)]
        cells.append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [{"x": "a\nb"}],
                      "source": value})
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# t\n", "x"]}, *cells],
          "metadata": {"k": [1, 2, {"source": "decoy"}]}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, ensure_ascii=style != "lines")


def _utf16_index(line: str, col1: int) -> int:
    """Python index in `line` of the 1-based UTF-16 column."""
    units = 0
    for i, ch in enumerate(line):
        if units == col1 - 1:
            return i
        units += 2 if ord(ch) > 0xFFFF else 1
    assert units == col1 - 1, (line, col1)
    return len(line)


def _token_at(file_lines: list[str], pos: tuple[int, int]) -> str:
    """The raw JSON text (one character or one escape) at a file position."""
    line = file_lines[pos[0] - 1]
    m = re.match(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\.|.",
                 line[_utf16_index(line, pos[1]) :], re.S)
    assert m, (line, pos)
    return m.group(0)


def _decoded(token: str) -> str:
    return json.loads('"' + token + '"')


pieces = st.sampled_from(list("ab x=_'\"\\\t()[]é€😀\u2028\x07") + ["\n", "\r\n", "\r"])
sources = st.lists(st.lists(pieces, min_size=1, max_size=30).map("".join), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(sources, st.sampled_from(["lines", "ascii-lines", "string", "chunks"]))
def test_every_character_maps_to_its_raw_json(srcs, style):
    if style == "ascii-lines":
        text = _notebook_text(srcs, "lines").encode().decode()  # raw UTF-8 ...
        text = json.dumps(json.loads(text), indent=1, ensure_ascii=True)  # ... then the same with \\u escapes
    else:
        text = _notebook_text(srcs, style)
    tm = NotebookTextMap.build(text)
    assert tm is not None
    file_lines = _NL.split(text)
    for number, src in enumerate(srcs, start=2):
        lines = _NL.split(src)
        assert tm.source_line_count(number) == len(lines)
        for i, line in enumerate(lines, start=1):
            for col, ch in enumerate(line):
                pos = tm.locate(number, i, col)
                assert pos is not None
                assert _decoded(_token_at(file_lines, pos)) == ch, (src, i, col, pos)
            if line:  # the exclusive end sits right after the raw text of the line's last character
                last = tm.locate(number, i, len(line) - 1)
                assert last is not None
                width = len(_token_at(file_lines, last).encode("utf-16-le")) // 2
                assert tm.locate(number, i, len(line), end=True) == (last[0], last[1] + width)


def test_jupyter_layout_maps_to_the_line_of_the_json_file():
    text = _notebook_text(["import pandas as pd\n", "x = 1\ndf['price']\n"], "lines")
    tm = NotebookTextMap.build(text)
    assert tm is not None
    pos = tm.locate(3, 2, 0)
    assert pos is not None
    line, col = pos
    assert text.split("\n")[line - 1].strip() == '"df[\'price\']\\n"'
    assert text.split("\n")[line - 1][col - 1 :].startswith("df['price']")


def test_columns_clamp_and_out_of_range_positions():
    tm = NotebookTextMap.build(_notebook_text(["ab\ncd"], "lines"))
    assert tm is not None
    assert tm.locate(2, 1, 99) == tm.locate(2, 1, 2)  # clamped to the end of the line (before the newline)
    assert tm.locate(2, 3, 0) is None  # no line 3
    assert tm.locate(9, 1, 0) is None  # no cell 9
    assert tm.locate(0, 1, 0) is None


def test_not_a_notebook_gives_no_map():
    assert NotebookTextMap.build("{not json") is None
    assert NotebookTextMap.build('{"metadata": {}}') is None
    assert NotebookTextMap.build("[1, 2]") is None
    assert NotebookTextMap.build('{"cells": [{"source": [1]}]}') is None  # a source that is not text
    tm = NotebookTextMap.build('{"cells": [7, {"cell_type": "code"}, {"source": ""}]}')
    assert tm is not None and tm.locate(1, 1) is None and tm.locate(2, 1) is None
    assert tm.locate(3, 1, 0) is not None  # an empty source still has its one empty line
