"""Small text helpers shared across layers: terminal colours, IPython tracebacks, type names.

Pure functions on strings; no third-party imports.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL_LINE = re.compile(r"(?:Cell In\s*\[\d*\]|<ipython-input-[^>]*>|Input In \[\d*\]),? line (\d+)")
_SHORT_TYPES = {
    "pandas.core.frame.DataFrame": "DataFrame",
    "pandas.core.series.Series": "Series",
    "numpy.ndarray": "ndarray",
    "torch.Tensor": "Tensor",
}


def strip_ansi(text: str) -> str:
    """The text without terminal colour codes (IPython colours its tracebacks)."""
    return ANSI.sub("", text)


def clean_traceback(traceback: str | list[str], limit: int = 2500) -> str:
    """An IPython traceback (the `error` message's list or one string) as plain text, its end kept when long
    (the raising frame and the message matter most)."""
    text = strip_ansi("\n".join(traceback) if isinstance(traceback, list) else traceback).strip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


def cell_line(traceback: str | list[str]) -> int | None:
    """The line of the notebook cell's own frame (the last "Cell In[n], line N", or the older
    "<ipython-input-...>" / "Input In [n]" forms) in an IPython traceback."""
    text = "\n".join(traceback) if isinstance(traceback, list) else traceback
    found = _CELL_LINE.findall(strip_ansi(text))
    return int(found[-1]) if found else None


def short_type(t: str) -> str:
    """pandas.core.frame.DataFrame -> DataFrame, builtins.int -> int; the module is kept for estimators and
    user classes."""
    if t in _SHORT_TYPES:
        return _SHORT_TYPES[t]
    if t.startswith(("builtins.", "__main__.")):
        return t.split(".", 1)[1]
    return t
