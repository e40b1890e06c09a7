"""The seal on the copy paths (issue 41), daemon side: how a transplant worker the daemon started ended its run.

Runs in the daemon. A worker (worker/main.py) that runs a cell on Linux ends it as a forked child does: after its
record it blocks for good in CRANE's sealed `read(2)` (kernel/common: the mark, a code for how the cell ended, the
digest of every byte CRANE wrote on the channel). Its parent reads that from outside and ends it: a head's fork
child is the head's to check (worker/head.py, the word comes in its frame); a worker that ran the cell itself (an
OS-confined run in the blocking confinement, a portable run the worker did not fork for) is the daemon's, its
parent, checked here in `/proc/<pid>/syscall`; in the layered confinement the worker is A, which checks B and writes
how B ended into the private directory (kernel/layer.supervise), read here. The status made here is the daemon's
own: nothing of the run can write it. `assemble(expect_seal=True)` then takes a record only sealed over exactly
the channel's bytes. Where /proc does not exist (macOS, Windows: `seal_readable`) nothing is sealed and the run is
read as before (`checked: false`).
"""

from __future__ import annotations

import errno
import signal
import sys
import threading
import time
from collections.abc import Callable

from crane.sandbox.verdict import ExitStatus

SEAL_MAGIC = 0x4352414E45534541  # kernel/common's mark (the daemon does not import the kernel-side parts)
LOOK_S = 0.02  # how often a process that is not yet in its sealed wait is looked at again


def seal_readable() -> bool:
    """Whether a worker's parent can read its seal here (a /proc with per-task `syscall` files: Linux)."""
    return sys.platform.startswith("linux")


def read_seal(pid: int) -> tuple[int, int] | None | bool:
    """(code, digest) when a thread of process `pid` is in CRANE's sealed wait; None when none is (running, elsewhere,
    gone); False when this process may not read its /proc/<pid>/syscall (Yama, an LSM)."""
    import os
    found = _seal_at(f"/proc/{pid}/syscall")
    if found is not None:
        return found
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        if tid != str(pid):
            found = _seal_at(f"/proc/{pid}/task/{tid}/syscall")
            if found:
                return found
    return None


def _seal_at(path: str) -> tuple[int, int] | None | bool:
    try:
        with open(path, "rb") as f:
            fields = f.read().split()
    except PermissionError:
        return False
    except OSError as exc:  # gone (ENOENT, ESRCH), or /proc refused to this process: not ours to read
        return None if exc.errno in (errno.ENOENT, errno.ESRCH) else False
    try:
        if len(fields) >= 7 and int(fields[0]) == 0 and int(fields[6], 16) == SEAL_MAGIC:
            return int(fields[4], 16), int(fields[5], 16)
    except ValueError:
        pass
    return None


def settle(pid: int, returncode: Callable[[], int | None], kill: Callable[[], None],
           parent_word: Callable[[], ExitStatus | None], deadline: float,
           cancel: threading.Event | None = None) -> tuple[ExitStatus | None, str | None]:
    """After a worker's channel ended: how its run's process ended, as its parent saw it. `returncode()`: the worker's
    exit code once it has ended (negative: a signal; None while it runs); `kill()`: end the worker and what it
    started; `parent_word()`: the status a process between (layered mode's A) wrote, if any. Returns (the status,
    None), or (None, "deadline" | "cancelled") when the process neither sealed nor ended in time."""
    pause = 0.0002
    fast_until = time.monotonic() + 0.25  # (it closed the channel just before it entered its wait)
    while True:
        word = parent_word()
        if word is not None:
            return word, None
        seal = read_seal(pid)
        if seal is False:  # its /proc is not ours to read: its word is all there is (docs: unchecked)
            kill()
            return ExitStatus(signal=int(signal.SIGKILL), checked=False, by_parent=True), None
        if isinstance(seal, tuple):
            kill()
            return ExitStatus(signal=int(signal.SIGKILL), sealed=list(seal), checked=True, by_parent=True), None
        code = returncode()
        if code is not None:  # it ended unsealed (or, layered, A ended: its word is out before it exits)
            word = parent_word()
            if word is not None:
                return word, None
            return ExitStatus(exitcode=code if code >= 0 else None, signal=-code if code < 0 else None,
                              checked=True), None
        if cancel is not None and cancel.is_set():
            return None, "cancelled"
        now = time.monotonic()
        if now >= deadline:
            return None, "deadline"
        time.sleep(min(pause, max(0.0, deadline - now)) if now < fast_until else min(LOOK_S, deadline - now))
        pause = min(pause * 2, 0.002)


def digest_of(data: bytes) -> int:
    """The seal's digest of `data` (kernel/common: blake2b, 8 bytes, little-endian)."""
    import hashlib
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def sealed_over(pid: int, data: bytes, within_s: float, alive: Callable[[], bool]) -> bool | None:
    """A transplant session's worker (the daemon's child) is in CRANE's sealed wait over exactly `data`, the bytes
    the daemon read since its last command (worker/main._sealed_commands): True; False when it is not within
    `within_s` (or ends, or waits sealed over other bytes); None when its /proc cannot be read here."""
    deadline = time.monotonic() + within_s
    pause = 0.0002
    while True:
        seal = read_seal(pid)
        if seal is False:
            return None
        if isinstance(seal, tuple):
            return seal[1] == digest_of(data)
        if not alive() or time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, LOOK_S)
