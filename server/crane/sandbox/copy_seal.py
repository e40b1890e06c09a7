"""The seal on the copy paths (issue 41), daemon side: how a transplant worker the daemon started ended its run.

Runs in the daemon. A worker (worker/main.py) that runs a cell on Linux ends it as a forked child does: after its
record it blocks for good in CRANE's sealed `read(2)` (shared/seal.py: the mark, a code for how the cell ended, the
digest of every byte CRANE wrote on the channel; read here as the kernel side reads it, but for what a refused read
means: unchecked here). Its parent reads that from outside and ends it: a head's fork
child is the head's to check (worker/head.py, the word comes in its frame); a worker that ran the cell itself (an
OS-confined run in the blocking confinement, a portable run the worker did not fork for) is the daemon's, its
parent, checked here in `/proc/<pid>/syscall`; in the layered confinement the worker is A, which checks B and writes
how B ended into the private directory (kernel/layer.supervise), read here. The status made here is the daemon's
own: nothing of the run can write it. `assemble(expect_seal=True)` then takes a record only sealed over exactly
the channel's bytes. Where /proc does not exist (macOS, Windows: `seal_readable`) nothing is sealed and the run is
read as before (`checked: false`).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable

from crane.sandbox.shared.seal import SEAL_CLEAN, seal_digest
from crane.sandbox.shared.seal import read_seal as _read_seal
from crane.sandbox.verdict import ExitStatus

LOOK_S = 0.02  # how often a process that is not yet in its sealed wait is looked at again


def seal_readable() -> bool:
    """Whether a worker's parent can read its seal here (a /proc with per-task `syscall` files: Linux)."""
    return sys.platform.startswith("linux")


def read_seal(pid: int) -> tuple[int, int] | None | bool:
    """(code, digest) when a thread of process `pid` is in CRANE's sealed wait; None when none is (running, elsewhere,
    gone); False when this process may not read its /proc/<pid>/syscall (Yama, an LSM, or any other refusal: the
    daemon then says the run's end unchecked, where the kernel side takes it as not sealed: shared/seal.py)."""
    return _read_seal(pid, refused=False)


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


def at_end(pid: int, parent_word: Callable[[], ExitStatus | None]) -> bool:
    """The worker `pid` is in CRANE's sealed wait, or the process between (layered mode's A) wrote how the run's
    process ended: the run is over whoever still holds a copy of its channel (crane.sandbox.cell_deadline.read_fifo).
    Only looks: `settle` then reads the seal and ends the worker."""
    return parent_word() is not None or isinstance(read_seal(pid), tuple)


def sealed_code(pid: int, data: bytes, within_s: float, alive: Callable[[], bool]) -> int | bool | None:
    """A transplant session's worker (the daemon's child) is in CRANE's sealed wait over exactly `data`, the bytes
    the daemon read since its last command (worker/main._sealed_commands): the seal's code (SEAL_CLEAN: the command
    ended clean; SEAL_RAISED: it raised, so no reply of it says it ran clean); False when it is not within
    `within_s` (or ends, or waits sealed over other bytes); None when its /proc cannot be read here."""
    deadline = time.monotonic() + within_s
    pause = 0.0002
    while True:
        seal = read_seal(pid)
        if seal is False:
            return None
        if isinstance(seal, tuple):
            return seal[0] if seal[1] == seal_digest(data) and seal[0] > 0 else False
        if not alive() or time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, LOOK_S)


def clean_only(code: int | bool | None) -> bool:
    """Whether a reply sealed under `code` (`sealed_code`) may say its command ran clean: only under SEAL_CLEAN, or
    where the seal could not be read at all (None: the reply is then taken unchecked, as the Integrity says)."""
    return code is None or code == SEAL_CLEAN
