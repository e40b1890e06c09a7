"""A portable run (OS layer under the guard, or the guard alone) whose cell ends its own process: the verdict is
the kernel's crash, taken when the run's process ends, and no process of the run outlives it, also when a fork
child left its session first and still holds the worker's pipe (kernel/audit.py: a transplant worker has no
parent that reads a seal, so it ends there; its children end by their parent-death signal, worker/reaper.py).
Before, the daemon read on until the run's deadline (60 s here) for the pipe's end."""

from __future__ import annotations

import os
import time

import pytest

from .test_portable_round5 import GUARD, P70_CHILD, PORTABLE, _running, k5, run5  # noqa: F401 (k5: the fixture)

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the portable worker's reaper needs Linux")


@pytest.mark.parametrize("sandbox", [PORTABLE, GUARD], ids=["portable", "guard"])
@pytest.mark.parametrize("child", [False, True], ids=["alone", "with a child that left its session"])
def test_a_cell_that_ends_its_process_gets_the_crash_and_leaves_nothing(k5, sandbox, child):  # noqa: F811
    v = run5(k5, (P70_CHILD if child else "") + "os._exit(3)", sandbox, may_be_certain=True)
    if child and sandbox is PORTABLE and v.verdict == "blocked" and v.refusal is not None and "setsid" in v.refusal.call:
        return  # the lean guard under Landlock refuses the child's setsid itself (as in test_portable_round5)
    assert v.verdict == "crash" and v.ename == "DeadKernelError" and "os._exit(3)" in (v.evalue or ""), v
    if child:
        pid = int(v.stdout.split()[0])
        deadline = time.monotonic() + 60  # the parent-death signal: an event waited for; the bound ends a failing test
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(pid), pid
