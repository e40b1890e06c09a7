"""The streams a cell sees in a run are CRANE's capture, not ipykernel's OutStream: what a cell can read of them
matches the kernel's (`name` 'stdout'/'stderr', `encoding` 'UTF-8', not a tty, writable), so a cell that checks
them is not a crash in the copy only (before: '<stdout>' and 'utf-8'), on every path, IPython 8 and 9."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)

CELL = """import sys
seen = [(s.name, s.encoding, s.isatty(), s.writable()) for s in (sys.stdout, sys.stderr)]
assert seen == [('stdout', 'UTF-8', False, True), ('stderr', 'UTF-8', False, True)], seen
"""


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


def test_the_kernel_shows_what_the_cell_expects(pk):
    assert pk["conn"].run_cell(CELL, timeout=60).status == "ok"


@pytest.mark.parametrize("path", PATHS)
def test_every_path_shows_the_kernels_streams(pk, path):
    v = path_verdict(pk, path, CELL, _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v
