"""A carried setting that turns a computation into an exception, not carried (red team round 18, G11).

`warnings.simplefilter('error', DataWarning)` with a warning class of the notebook's made the whole filter list
unreadable for the copy (only library classes travel by name): the worker ran with the default filters, the
warning the kernel raises passed, and the clean run was certain. Now a copy's clean run is only likely where the
worker could not take the kernel's warnings filters, the decimal traps or the int-digits limit
(transplant.clean_doubt), saying which; the fork (the kernel's own state) keeps its certain crash. IPython 8
and 9, the six paths; the kernel and the files unchanged (end_paths)."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
HISTORY = ("import warnings\nclass DataWarning(UserWarning):\n    pass\n"
           "warnings.simplefilter('error', DataWarning)")


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
def test_a_warning_the_kernel_raises_is_never_a_certain_clean_run(pk, path):
    assert pk["conn"].run_cell(HISTORY, timeout=60).status == "ok"
    try:
        v = path_verdict(pk, path, "warnings.warn('bad rows', DataWarning)", _served)
        truth = pk["conn"].run_cell("warnings.warn('bad rows', DataWarning)", timeout=60)
    finally:
        assert pk["conn"].run_cell("warnings.resetwarnings()", timeout=60).status == "ok"
    assert (truth.status, truth.ename) == ("error", "DataWarning"), truth
    if path.startswith("fork"):
        assert (v.verdict, v.ename, v.certain) == ("crash", "DataWarning", True), v
    else:
        assert not v.certain and "warnings filters" in (v.reason or ""), v
