"""A cell whose displayed value's rich formatter raises is that crash (issue 41, round 12, h7), on IPython 8 and 9.

IPython's display hook formats the cell's last value with every enabled formatter (`text/html`, `text/latex`, ...);
a formatter's exception is shown as a traceback (`catch_format_error`), and ipykernel marks the execute request
failed when that happens while the display hook runs (`_last_traceback_during_displayhook`): the kernel answers
`error`. CRANE's display hook formatted `text/plain` alone, so a `_repr_html_` or `_repr_latex_` that raises —
ordinary notebook code, a buggy rich repr of a notebook class — came back `no-crash` (certain) on every one-shot
path (fork blocking, transplant, portable). Now the value is formatted as IPython's hook formats it. The same value
not displayed (not last, or the cell ends with `;`) and a working rich repr stay `no-crash`, as in the kernel, and
a formatter the kernel switched off is off in the copy paths' worker too (its settings go with the environment)."""

from __future__ import annotations

import sys

import pytest

from .one_shot import each_kernel, one_shot  # noqa: F401 (each_kernel: the fixture conn)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's confinement is Linux's")

PATHS = ["blocking", "transplant", "portable"]
HTML = "class H:\n    def _repr_html_(self):\n        raise ValueError('html')\n    def __repr__(self):\n        return 'h'\n"
LATEX = "class L:\n    def _repr_latex_(self):\n        raise ValueError('latex')\n"
RAISING = {"a _repr_html_ that raises": HTML + "H()", "a _repr_latex_ that raises": LATEX + "L()"}
CLEAN = {
    "not the last value": HTML + "H()\ny = 1",
    "the cell ends with ;": HTML + "H();",
    "a working _repr_html_": "class G:\n    def _repr_html_(self):\n        return '<b>g</b>'\nG()",
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", list(RAISING))
def test_a_displayed_value_whose_rich_formatter_raises_is_that_crash(conn, cell, path):
    v = one_shot(conn, path, RAISING[cell])
    assert (v.verdict, v.ename) == ("crash", "ValueError"), v


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", list(CLEAN))
def test_a_value_not_displayed_or_formatted_cleanly_is_no_crash(conn, cell, path):
    v = one_shot(conn, path, CLEAN[cell])
    assert v.verdict == "no-crash", v


@pytest.mark.parametrize("path", PATHS)
def test_the_kernels_formatter_settings_hold_in_every_path(conn, path):
    """A kernel whose HTML formatter is off never calls `_repr_html_`: the raising one is no error there, nor here
    (the copy paths' worker takes the kernel's formatter settings with its environment)."""
    off = "get_ipython().display_formatter.formatters['text/html'].enabled = {}"
    assert conn.run_cell(off.format(False)).status == "ok"
    try:
        assert conn.run_cell(RAISING["a _repr_html_ that raises"]).status == "ok"
        v = one_shot(conn, path, RAISING["a _repr_html_ that raises"])
        assert v.verdict == "no-crash", v
        v = one_shot(conn, path, RAISING["a _repr_latex_ that raises"])
        assert (v.verdict, v.ename) == ("crash", "ValueError"), v
    finally:
        assert conn.run_cell(off.format(True)).status == "ok"


def test_the_kernels_own_word_on_those_cells(conn):
    """What the tests above hold CRANE to: the kernel's execute reply (its iopub shows the formatter's traceback)."""
    for source in RAISING.values():
        assert conn.run_cell(source).status == "error", source
    for source in CLEAN.values():
        assert conn.run_cell(source).status == "ok", source
