"""A cell runs as inside a Jupyter kernel's running event loop on every path (round 16, F10): ipykernel runs each
cell in its asyncio loop, so `asyncio.run(main())` is the kernel's RuntimeError ("cannot be called from a running
event loop", the classic notebook crash) and `get_event_loop().run_until_complete(...)` its "This event loop is
already running"; a copy's worker ran them clean (a false no-crash). kernel/run._kernel_like_loop: the statements
see a loop running in their thread; a top-level `await` still runs on a loop of its own. The six paths (the fork
path is the kernel's own loop), IPython 8 and 9."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
FETCH = "import asyncio\nasync def fetch():\n    await asyncio.sleep(0)\n    return 5\n"


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("cell", "message"), [
    ("result = asyncio.run(fetch())", "cannot be called from a running event loop"),
    ("result = asyncio.get_event_loop().run_until_complete(fetch())", "already running"),
], ids=["asyncio-run", "run-until-complete"])
def test_running_a_loop_in_a_cell_is_the_kernels_error(pk, path, cell, message):
    v = path_verdict(pk, path, FETCH + cell, _served)
    assert (v.verdict, v.ename, v.line) == ("crash", "RuntimeError", 5), v
    assert message in (v.evalue or "") and v.certain, v


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "assert asyncio.get_running_loop().is_running()",
    "r = await fetch()\nassert r == 5 and asyncio.get_running_loop().is_running()",
    "t = asyncio.get_event_loop().create_task(fetch())\nassert not t.done()",
], ids=["running-loop", "top-level-await", "task-scheduled"])
def test_what_runs_in_a_kernels_loop_runs(pk, path, cell):
    v = path_verdict(pk, path, FETCH + cell, _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v
