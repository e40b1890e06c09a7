"""matplotlib's rcParams are carried into the copy (red team round 17h, F10; sandbox/shared/carry.py
`_read_matplotlib`): `plt.rcParams.update({'savefig.format': 'pdf'})` or `plt.style.use(...)` in an earlier cell
left a fresh worker with matplotlib's defaults, so a cell checking the file `savefig` wrote, a figure's size or the
style's colours was a false crash on every copy path (and its doubt named the folder view, not the setting). The
kernel's rcParams that differ from the defaults (not the backend) are read from the dicts themselves, applied in
the worker and compared there. IPython 8 (matplotlib 3.7) and 9 (3.11), transplant and portable, one-shot and
session; the fork path (the kernel's own image) says the same."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
SETUP = ("import io, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.style.use('ggplot')\n"
         "plt.rcParams.update({'savefig.format': 'pdf', 'figure.figsize': (3, 2), 'lines.dash_joinstyle': 'bevel'})")
RESET = "plt.style.use('default')\nplt.close('all')"


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "buf = io.BytesIO()\nplt.plot([1, 2])\nplt.savefig(buf)\nassert buf.getvalue()[:4] == b'%PDF'",  # (no file:
    # the fork path without OS layers refuses writes)
    "assert plt.figure().get_size_inches().tolist() == [3.0, 2.0]",
    "assert plt.rcParams['axes.prop_cycle'].by_key()['color'][0] == '#E24A33'\n"
    "assert plt.rcParams['lines.dash_joinstyle'] == 'bevel'",
], ids=["savefig-format", "figsize", "style"])
def test_the_kernels_rcparams_are_the_copys(pk, path, cell):
    conn = pk["conn"]
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    try:
        v = path_verdict(pk, path, cell, _served)
    finally:
        assert conn.run_cell(RESET, timeout=60).status == "ok"
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", PATHS)
def test_the_default_rcparams_stay_the_default(pk, path):
    conn = pk["conn"]
    assert conn.run_cell(SETUP + "\n" + RESET, timeout=120).status == "ok"
    v = path_verdict(pk, path, "assert plt.rcParams['savefig.format'] == 'pdf'", _served)
    assert (v.verdict, v.ename, v.certain) == ("crash", "AssertionError", True), v
