"""A speculative run on a kernel whose notebook functions leave a marker file when called: the verdict, after
checking that the run left the kernel unchanged and ran none of the notebook's code in it."""

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
