"""The process CPU clock is the sandbox process's own (red team round 18, G6; sandbox/cpu_clock.py).

`cpu_start = time.process_time()` in one cell, then `time.process_time() - cpu_start` in the next: a fork child's
clock starts at zero and a worker's counts its own time, so the difference came out negative and `assert cpu > 0`
was a certain false crash (a clean run there is no more the kernel's). A cell reading a process CPU clock, or (on
the copy paths) a notebook function it reaches that does, gets a likely verdict saying why. IPython 8 and 9, the six
paths, the kernel and files unchanged (end_paths); a cell reading no CPU clock keeps its certain verdict."""

from __future__ import annotations

import sys

import pytest

from crane.sandbox.cpu_clock import reads_cpu_clock

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
HISTORY = ("import time\ncpu_start = time.process_time()\nsum(i * i for i in range(3_000_000))\n"
           "def cpu_used():\n    return time.process_time() - cpu_start")


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
def test_a_cell_reading_the_cpu_clock_is_never_certain(pk, path):
    assert pk["conn"].run_cell(HISTORY, timeout=120).status == "ok"
    cell = "cpu = time.process_time() - cpu_start\nassert cpu > 0, cpu"
    v = path_verdict(pk, path, cell, _served)
    assert pk["conn"].run_cell(cell, timeout=60).status == "ok"
    assert v.verdict in ("crash", "no-crash") and not v.certain and "CPU time" in (v.reason or ""), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
def test_a_helper_reading_the_cpu_clock_counts_on_the_copy_paths(pk, path):
    assert pk["conn"].run_cell(HISTORY, timeout=120).status == "ok"
    v = path_verdict(pk, path, "assert cpu_used() > 0", _served)
    assert v.verdict in ("crash", "no-crash") and not v.certain and "CPU time" in (v.reason or ""), v


@pytest.mark.parametrize("path", PATHS)
def test_a_cell_reading_no_cpu_clock_stays_certain(pk, path):
    assert pk["conn"].run_cell(HISTORY, timeout=120).status == "ok"
    v = path_verdict(pk, path, "t = time.perf_counter()\nassert t > 0", _served)
    assert (v.verdict, v.certain) == ("no-crash", True), v


def test_what_reads_a_cpu_clock():
    for cell in ("time.process_time()", "from time import process_time_ns", "os.times()", "os . times ()",
                 "resource.getrusage(resource.RUSAGE_SELF)", "psutil.Process().cpu_times()", "p.cpu_percent()"):
        assert reads_cpu_clock(cell), cell
    for cell in ("time.perf_counter()", "time.time()", "df.times", "n_times = 3", "os.times"):
        assert not reads_cpu_clock(cell), cell
    assert reads_cpu_clock("f()", ["f", "process_time"]) and not reads_cpu_clock("f()", ["f", "times"])
