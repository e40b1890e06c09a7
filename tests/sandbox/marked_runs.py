"""Marks of the notebook's code run where it must not be.

`speculate_unmarked`: a speculative run on a kernel whose notebook functions leave a marker file when called: the
verdict, after checking that the run left the kernel unchanged and ran none of the notebook's code in it.

`HIT`: kernel code (a set-up cell's text) defining `HITS` and `hit(what)`, which the notebook's functions call:
`what` is recorded only when CRANE's kernel-side code (a frame of one of its `<crane-kernel...>` modules) is on
the stack, so `HITS` empty after a verdict says the export ran none of them; no braces (set-ups that
`str.format` take it as it is)."""

from __future__ import annotations

import os
from typing import Any

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate


def speculate_unmarked(kernel: tuple[Any, str], source: str, **options: Any) -> Any:
    """`kernel`: (the connection, the marker file's path)."""
    conn, marker = kernel
    with Untouched(conn) as watch:
        v = speculate(conn, source, 120.0, **options)
    assert watch.unchanged, (watch.changes(), v)
    assert not os.path.exists(marker), (open(marker).read(), v)  # nothing of the notebook's ran in the kernel
    return v


HIT = r"""
HITS = []
def hit(what):
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_filename.startswith('<crane-kernel'):
            HITS.append(what)
            return
        f = f.f_back
"""
