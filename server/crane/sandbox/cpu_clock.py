"""The process CPU clock is the sandbox process's own (red team round 18, G6).

`cpu_start = time.process_time()` in one cell, `time.process_time() - cpu_start` in the next: in a fork, a worker
or a session the clock counts that process's CPU time, not the kernel's (a fork child's starts at zero), so the
difference came out negative and `assert cpu > 0` was a certain false crash. A cell that reads a process's CPU time
(`time.process_time`, `time.thread_time`, `os.times`, `resource.getrusage`, psutil's `cpu_times`/`cpu_percent`), or
a notebook function it reaches that does (a copy's `reach`, kernel/dynamic_reads), gets a likely verdict, saying
why. Used by the fork's one-shot runs and sessions (`cpu_clock_doubt`) and the copy paths (transplant.state_doubt).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from crane.sandbox.verdict import SandboxVerdict

_CPU_CLOCK = re.compile(r"\b(?:process_time(?:_ns)?|thread_time(?:_ns)?|getrusage|cpu_times|cpu_percent)\b|"
                        r"\bos\s*\.\s*times\s*\(")
_CPU_WORDS = frozenset({"process_time", "process_time_ns", "thread_time", "thread_time_ns", "getrusage", "cpu_times",
                        "cpu_percent"})
REASON = ("the cell reads the process's CPU time (process_time, os.times, getrusage, ...), which counts the sandbox "
          "process's, not the kernel's")


def reads_cpu_clock(source: str, reach: Iterable[object] = ()) -> bool:
    """Whether the cell's text, or the names the notebook functions it reaches read, read a process CPU clock."""
    return _CPU_CLOCK.search(source) is not None or any(type(w) is str and w in _CPU_WORDS for w in reach)


def cpu_clock_doubt(v: SandboxVerdict, source: str) -> None:
    """A fork's certain crash or clean run made likely when the cell reads a process CPU clock."""
    if v.verdict not in ("crash", "no-crash") or not v.certain or not reads_cpu_clock(source):
        return
    what = "the crash" if v.verdict == "crash" else "the clean run"
    v.certain, v.reason = False, f"{what} is only likely: {REASON}"
