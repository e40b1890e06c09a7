"""IPython syntax (`%magic`, `!shell`, `x?`, `%%cell_magic`) to plain Python, with a line mapping back.

IPython's own input transformer does the rewriting, so the Python we analyse is the Python the kernel runs.
Cell magics whose body is Python run in the user namespace (`%%time`, `%%capture`, ...): for those the body
itself is analysed (shifted by the magic line), otherwise the cell is the single `run_cell_magic(...)` call.
"""

from __future__ import annotations

import difflib
import re

# Cell magics whose body is Python code run (at least once) by the kernel.
PYTHON_BODY_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}

_manager = None


def _transformer():
    global _manager
    if _manager is None:
        from IPython.core.inputtransformer2 import TransformerManager

        _manager = TransformerManager()
    return _manager


def transform(source: str) -> tuple[str, list[int], str | None]:
    """Return (python, line_map, cell_magic): `line_map[i]` is the original 1-based line of python line i+1."""
    cell_magic = None
    offset = 0
    body = source
    m = re.match(r"\s*%%(\w+)", source)
    if m:
        cell_magic = m.group(1)
        if cell_magic in PYTHON_BODY_CELL_MAGICS:
            first_nl = source.find("\n")
            body = "" if first_nl < 0 else source[first_nl + 1 :]
            offset = source[: len(source) - len(body)].count("\n")
    try:
        python = _transformer().transform_cell(body)
    except Exception:  # the transformer gave up: analyse the text as it is
        python = body
    return python, _line_map(body, python, offset), cell_magic


def _line_map(original: str, python: str, offset: int) -> list[int]:
    orig_lines = original.splitlines()
    py_lines = python.splitlines()
    n_orig = max(len(orig_lines), 1)
    if len(orig_lines) == len(py_lines):
        return [i + 1 + offset for i in range(len(py_lines))]
    mapping: list[int | None] = [None] * len(py_lines)
    sm = difflib.SequenceMatcher(a=py_lines, b=orig_lines, autojunk=False)
    for a, b, size in sm.get_matching_blocks():
        for k in range(size):
            mapping[a + k] = b + k + 1
    prev = 0
    out = []
    for v in mapping:
        if v is None:  # a rewritten line: the original line after the previous one
            v = min(prev + 1, n_orig)
        out.append(v + offset)
        prev = v
    return out
