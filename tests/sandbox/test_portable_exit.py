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
    if child and v.verdict == "blocked" and v.refusal is not None and "setsid" in v.refusal.call:
        return  # the guard refuses the child's setsid itself (as in test_portable_round5): held earlier
    assert v.verdict == "crash" and v.ename == "DeadKernelError" and "os._exit(3)" in (v.evalue or ""), v
    if child:
        pid = int(v.stdout.split()[0])
        deadline = time.monotonic() + 60  # the parent-death signal: an event waited for; the bound ends a failing test
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(pid), pid


# a finalizer of the cell's that the collector runs while CRANE writes the process-end record and waits sealed
# (kernel/audit._guard_process_end's end()): the audit hook and the guard stay on then (a flag that turned the hook
# off for CRANE's own work let it write outside the run's folder under the guard alone). The collection's moment is
# swept over the allocations end() makes, so one of them falls inside it whatever end() allocates.
FINALIZER_AT_END = """
import gc
class _Late:
    def __del__(self):
        with open(os.path.join('@OUTSIDE@', 'late.txt'), 'w') as fh:
            fh.write('written during the end of the run')
_n = _Late(); _n.me = _n; del _n
gc.set_threshold(gc.get_count()[0] + @K@)
os._exit(0)
"""


@pytest.mark.parametrize("sandbox", [PORTABLE, GUARD], ids=["portable", "guard"])
def test_a_finalizer_that_runs_as_the_run_ends_is_still_confined(k5, sandbox):  # noqa: F811
    for k in range(10):
        v = run5(k5, FINALIZER_AT_END.replace("@K@", str(k)), sandbox, may_be_certain=True)  # (nothing outside)
        assert (v.verdict == "crash" and v.ename == "DeadKernelError") or (
            v.verdict == "blocked" and v.refusal is not None and "outside" in (v.reason or "")), (k, v)
