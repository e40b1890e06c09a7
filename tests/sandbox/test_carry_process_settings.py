"""Process-wide settings an earlier cell made are the copy's too (red team round 18, G1, G9, G10;
sandbox/shared/carry.py, kernel/environment._torch_settings, kernel/export._added_builtins).

A fresh worker had the defaults: a logger's level and `disabled` flag (`Logger.__reduce__` is `getLogger(name)`),
the default socket timeout, the file-mode mask, values the notebook put in the builtins (`if DEBUG:` a NameError),
torch's thread count and print options: each a certain false crash on the copy paths. The kernel's are read without
running the notebook's code and applied in the worker (the builtins' other values copied as the cell's names); the
fork (the kernel's own image) says the same. IPython 8 and 9, the six paths; the kernel and the files unchanged
(end_paths), each verdict checked against the cell's real run."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)

# (history, checked cell, reset): each checked cell passes in the kernel after its history, fails with the defaults
CASES = {
    "logging": ("import logging\ndlog = logging.getLogger('crane.t.debugger')\ndlog.setLevel(logging.DEBUG)\n"
                "logging.getLogger('crane.t.noisy').disabled = True\nROOT_LEVEL = logging.getLogger().level\n"
                "logging.getLogger().setLevel(logging.INFO)",
                "assert dlog.isEnabledFor(logging.DEBUG), 'debug off'\n"
                "assert logging.getLogger('crane.t.noisy').disabled, 'noisy on'\n"
                "assert logging.getLogger('crane.t.other').getEffectiveLevel() == logging.INFO",
                "dlog.setLevel(logging.NOTSET)\nlogging.getLogger('crane.t.noisy').disabled = False\n"
                "logging.getLogger().setLevel(ROOT_LEVEL)"),
    "socket": ("import socket\nsocket.setdefaulttimeout(7.0)",
               "assert socket.getdefaulttimeout() == 7.0, socket.getdefaulttimeout()",
               "socket.setdefaulttimeout(None)"),
    "umask": ("import os\nOLD_MASK = os.umask(0o077)",
              "import os, stat\nwith open('umask-probe.txt', 'w') as f:\n    f.write('x')\n"
              "mode = stat.S_IMODE(os.stat('umask-probe.txt').st_mode)\nos.remove('umask-probe.txt')\n"
              "assert mode == 0o600, oct(mode)",
              "os.umask(OLD_MASK)"),
    "builtins": ("import builtins\nbuiltins.DEBUG_LEVEL = 2\ndef _shout(s):\n    return s.upper() + '!'\n"
                 "builtins.shout = _shout\ndel _shout",
                 "if DEBUG_LEVEL > 1:\n    assert shout('hi') == 'HI!'",
                 "del builtins.DEBUG_LEVEL, builtins.shout"),
    "torch": ("import torch\nOLD_THREADS = torch.get_num_threads()\ntorch.set_num_threads(1)\n"
              "torch.set_printoptions(precision=2)",
              "assert torch.get_num_threads() == 1\nassert str(torch.tensor([1.23456])) == 'tensor([1.23])'",
              "torch.set_printoptions(profile='default')\ntorch.set_num_threads(OLD_THREADS)"),
}


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_kernels_setting_is_the_copys(pk, path, case):
    history, cell, reset = CASES[case]
    conn = pk["conn"]
    assert conn.run_cell(history, timeout=120).status == "ok"
    try:
        v = path_verdict(pk, path, cell, _served)
        truth = conn.run_cell(cell, timeout=60)
    finally:
        assert conn.run_cell(reset, timeout=60).status == "ok"
    assert truth.status == "ok", truth
    if path in ("fork session", "transplant session") and case == "umask":  # (these sessions refuse writes)
        assert v.verdict == "blocked" and "writing a file" in (v.evalue or ""), v
        return
    assert (v.verdict, v.ename, v.certain) == ("no-crash", None, True), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
@pytest.mark.parametrize("case", ["logging", "socket", "builtins"])
def test_the_defaults_stay_the_defaults(pk, path, case):
    """Set and reset in the kernel: the copy has the defaults again, and the checked cell crashes as the kernel's."""
    history, cell, reset = CASES[case]
    conn = pk["conn"]
    assert conn.run_cell(history + "\n" + reset, timeout=120).status == "ok"
    v = path_verdict(pk, path, cell, _served)
    truth = conn.run_cell(cell, timeout=60)
    assert truth.status == "error", truth
    assert (v.verdict, v.ename) == ("crash", truth.ename), v
