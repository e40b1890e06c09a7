"""The portable sandbox's watch on the kernels its workers serve, through psutil on every platform (no pidfd, no
/proc of CRANE's own; psutil is the platform layer).

A kernel is known by its pid and its process's creation time (`ProcessRef`), which together survive pid reuse:
`process_ref` takes the pid the kernel reported in its export and reads the creation time from the daemon's
side, checking that the process is the one that answered (on Linux the kernel also reported its start time in
clock ticks, which must match; elsewhere the process must have existed before the export was asked for).
`ProcessWatch` polls the watched kernels from one daemon thread (every `POLL_S`; nothing while none is watched)
and calls `on_gone(ref)` once a kernel's process has ended (gone, reused or a zombie), so that the pool ends its
workers, idle or running. The OS sandbox keeps its pidfds (transplant._KernelWatch).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

POLL_S = 1.0  # how often the watched kernels are looked at: a dead kernel's workers end within about a second
_START_SLACK_S = 1.0  # creation times and the wall clock may disagree by this much (Linux rounds its boot time)


class ProcessRef(NamedTuple):
    """A kernel's process as psutil sees it: pid and creation time (seconds since the epoch)."""

    pid: int
    created: float


def process_ref(pid: int, start_ticks: int, asked_at: float) -> ProcessRef | None:
    """The kernel's process, when it can be identified and watched (else None: its workers then end only with
    their run, after idling or with the daemon). `pid`: what the kernel reported; `start_ticks`: its start time
    in clock ticks since boot (Linux kernels report it; 0 elsewhere); `asked_at`: `time.time()` before the
    export was asked for (a process made after that cannot be the kernel that answered)."""
    if pid <= 0:
        return None
    import psutil as ps  # a daemon dependency, imported on first use (its import costs ~40 ms)
    try:
        created = float(ps.Process(pid).create_time())
        boot = float(ps.boot_time()) if start_ticks > 0 else 0.0
    except (ps.Error, OSError, ValueError):
        return None
    if start_ticks > 0:  # the kernel is on Linux and said when it started: the same process, or another
        try:
            ticks = float(os.sysconf("SC_CLK_TCK"))
        except (AttributeError, ValueError, OSError):
            return None
        if abs(boot + start_ticks / ticks - created) > 2.0 / ticks:
            return None  # another process (the pid was reused, or the kernel lives in another pid namespace)
    elif created > asked_at + _START_SLACK_S:
        return None  # made after the kernel answered: the pid was reused
    return ProcessRef(pid, created)


def process_alive(ref: ProcessRef) -> bool:
    """Whether the process `ref` names still runs (not ended, not a zombie waiting for its parent, pid not reused)."""
    import psutil as ps  # a daemon dependency, imported on first use (its import costs ~40 ms)
    try:
        proc = ps.Process(ref.pid)
        if abs(float(proc.create_time()) - ref.created) > 0.01:
            return False  # the pid now names another process
        return proc.status() != ps.STATUS_ZOMBIE
    except ps.NoSuchProcess:
        return False
    except (ps.Error, OSError):
        return True  # cannot tell (access refused): assume it runs; its workers still end after idling


class ProcessWatch:
    """One daemon thread polling the kernels that have workers; `on_gone(ref)` once when one ends."""

    def __init__(self, on_gone: Callable[[ProcessRef], None], poll_s: float = POLL_S) -> None:
        self.on_gone = on_gone
        self.poll_s = poll_s
        self.cond = threading.Condition()
        self.refs: set[ProcessRef] = set()
        self.thread: threading.Thread | None = None

    def watch(self, ref: ProcessRef) -> bool:
        """Start watching `ref` (False: it has already ended)."""
        if not process_alive(ref):
            return False
        with self.cond:
            self.refs.add(ref)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="crane-portable-kernels", daemon=True)
                self.thread.start()
            self.cond.notify()
        return True

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.refs:
                    self.cond.wait()
                refs = list(self.refs)
            gone = [r for r in refs if not process_alive(r)]
            for ref in gone:
                with self.cond:
                    self.refs.discard(ref)
                try:
                    self.on_gone(ref)
                except Exception:  # the watch goes on for the other kernels
                    pass
            time.sleep(self.poll_s)
