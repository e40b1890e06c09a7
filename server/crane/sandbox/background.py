"""Daemon side: a process started in the background so it never slows the user's kernel, and given back its
normal priority when it takes a foreground run (the prewarmed transplant worker: crane.sandbox.prewarm).

- `start_low(start)`: calls `start()` (which starts the process) at the lowest CPU priority (nice 19) and, on
  Linux, the idle I/O class. On Linux nice and I/O priority are per thread and a child inherits its creating
  thread's: `start()` runs on a short-lived thread that lowers only itself first, so the process and every thread
  it ever makes run low from their first instruction (no window, the daemon's own threads untouched). Elsewhere
  the process is lowered right after it starts (psutil: nice 19 on macOS, the idle priority class on Windows).
- `bounded(pid, data_bytes)`: the process is the first the kernel's OOM killer ends (`oom_score_adj` 1000:
  raising one's own child's score needs no privilege) and its soft `RLIMIT_DATA` (private writable memory) is at
  `data_bytes` until its run sets the run's own limit (worker/limits.py).
- `restore(pid)`: its threads back to the daemon's priority (best effort: lowering nice again needs the
  privilege a root daemon has; otherwise the run stays at nice 19, which only matters on a loaded machine).
Everything here is best effort: a refusal leaves the process as it was.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

LOW_NICE = 19
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_SHIFT = 13
_IOPRIO_IDLE = 3 << _IOPRIO_CLASS_SHIFT
_IOPRIO_NONE = 0  # "no class": the I/O priority follows the CPU nice value again
_SYS_IOPRIO_SET = {"x86_64": 251, "amd64": 251, "aarch64": 30, "arm64": 30, "riscv64": 30, "i686": 289,
                   "i386": 289, "armv7l": 314, "ppc64le": 273, "s390x": 282}


def _ioprio_set(tid: int, value: int) -> bool:
    nr = _SYS_IOPRIO_SET.get(platform.machine().lower())
    if nr is None or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syscall(nr, _IOPRIO_WHO_PROCESS, tid, value)) == 0
    except (OSError, AttributeError):
        return False


def start_low(start: Callable[[], T]) -> T:
    """`start()`'s result; the process it starts runs at the lowest CPU and I/O priority (module docstring)."""
    if not sys.platform.startswith("linux"):
        out = start()
        pid = getattr(getattr(out, "proc", out), "pid", None)
        if isinstance(pid, int):
            _lower_other(pid)
        return out
    box: dict = {}

    def run() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, LOW_NICE)  # this thread only (Linux: per-thread nice)
        except OSError:
            pass
        _ioprio_set(0, _IOPRIO_IDLE)
        try:
            box["out"] = start()
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            box["exc"] = exc

    t = threading.Thread(target=run, name="crane-low-start", daemon=True)
    t.start()
    t.join()
    if "exc" in box:
        raise box["exc"]
    return box["out"]


def _lower_other(pid: int) -> None:
    try:
        import psutil as ps

        proc = ps.Process(pid)
        proc.nice(getattr(ps, "IDLE_PRIORITY_CLASS", LOW_NICE))
    except Exception:  # noqa: BLE001 - best effort (an exotic platform, a process already gone)
        pass


def _tids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return [pid]


def bounded(pid: int, data_bytes: int) -> None:
    """`pid` is ended first under memory pressure and its private writable memory is capped (module docstring)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    try:
        import resource

        _soft, hard = resource.prlimit(pid, resource.RLIMIT_DATA)
        soft = data_bytes if hard == resource.RLIM_INFINITY else min(data_bytes, hard)
        resource.prlimit(pid, resource.RLIMIT_DATA, (soft, hard))
    except (OSError, ValueError, AttributeError):
        pass


def restore(pid: int) -> None:
    """`pid`'s threads back to the daemon's own CPU and I/O priority, where this process may (module docstring)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mine = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return
    for tid in _tids(pid):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, mine)
        except OSError:
            return  # not allowed here (no CAP_SYS_NICE): it stays low
        _ioprio_set(tid, _IOPRIO_NONE)


def priority(pid: int) -> tuple[int, int] | None:
    """(nice, I/O priority value) of `pid`'s main thread (tests, benchmarks); None where it cannot be read."""
    if not sys.platform.startswith("linux"):
        return None
    nr = {251: 252, 30: 31, 289: 290, 314: 315, 273: 274, 282: 283}.get(
        _SYS_IOPRIO_SET.get(platform.machine().lower(), -1))
    try:
        nice = os.getpriority(os.PRIO_PROCESS, pid)
        libc = ctypes.CDLL(None, use_errno=True)
        io = int(libc.syscall(nr, _IOPRIO_WHO_PROCESS, pid)) if nr else -1
    except (OSError, AttributeError):
        return None
    return nice, io


def data_cap() -> int:
    """The private memory a background worker may take before its run: half the machine's (worker/limits.py caps a
    run's budget at the same), psutil's total."""
    try:
        import psutil as ps

        return int(ps.virtual_memory().total) // 2
    except Exception:  # noqa: BLE001 - no reading: a cap that never binds
        return 1 << 62
