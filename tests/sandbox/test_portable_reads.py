"""The portable guard refuses what changes the process or reaches outside, not what only reads: a cell asking
`faulthandler.is_enabled()` (libraries and test helpers do, before they enable it) was `blocked` ("a call to
faulthandler ... is refused") on the portable paths; now it runs and sees the kernel's answer, while
`faulthandler.enable()` (signal handlers) and its dumps and watchdog stay refused. IPython 8 and 9."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
PORTABLE_PATHS = ["portable", "portable session"]


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PORTABLE_PATHS)
def test_a_read_of_faulthandler_runs(pk, path):
    kernel = pk["conn"].evaluate("__import__('faulthandler').is_enabled()")
    v = path_verdict(pk, path, f"import faulthandler\nassert faulthandler.is_enabled() == {kernel}", _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", PORTABLE_PATHS)
@pytest.mark.parametrize("call", ["enable()", "dump_traceback_later(1, exit=True)", "dump_traceback()"])
def test_what_faulthandler_changes_stays_refused(pk, path, call):
    v = path_verdict(pk, path, f"import faulthandler\nfaulthandler.{call}", _served)
    assert v.verdict == "blocked" and f"faulthandler.{call.split('(')[0]} is refused" in (v.reason or ""), v
