"""Daemon side of a transplant run (issue 45): the cell's deadline counted from the cell's start, enforced from
outside the worker.

A worker's setup (imports, confinement, loading the copied state) has its own allowance (`transplant.LOAD_S` on
top of the budget); the cell then gets its budget from the moment the worker says it begins: its "cell" line
(kernel/run._cell_begins), which CRANE writes after its setup lines and before any of the cell's code runs. Only
the first such line after nothing but setup lines counts: the cell can neither write an earlier one nor move it.
`CELL_GRACE_S` after the budget the daemon kills the worker (its layered child and pid namespace go with it: a
parent-death signal): just after the worker's own timer (budget + 1.5 s, worker/main.py), which ends the cell
first where it can fire, so every path gives the cell what that timer gives it. It cannot fire where the cell runs
as pid 1 of its pid namespace (the layered worker's child: Linux drops a default-action signal sent to a
namespace's init from inside), nor where the cell ignores or blocks SIGALRM: those runs ended at the setup's whole
allowance before (a 2 s budget: 22.6 s). A head's fork child (worker/head.py), whose lines come framed after it
ended, is still ended by that timer (the call guard refuses the cell the signal module), else by the setup's
allowance.

Readers: `read_fifo` (the OS run's FIFO, crane.sandbox.channel.read_until_eof), and for the portable runs'
pipes `CellWatch` (the reader, read through) with `CellClock` (the stop event the pipe readers look at:
crane.sandbox.pipes.read_run, crane.sandbox.portable.read_forked). Runs in the daemon.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable

from crane.sandbox.assemble import _GRACE_S
from crane.sandbox.channel import ChildHandle, read_until_eof
from crane.sandbox.drain import has_record
from crane.sandbox.pipes import PipeReader

TIMER_S = 1.5  # the worker's own timer: the budget + 1.5 s (worker/main.py, kernel/run.py's twin)
CELL_GRACE_S = TIMER_S + _GRACE_S  # the daemon's kill after the cell's budget: once the timer had its chance
_PREFIX = ("setup", "denied")  # CRANE's lines before the cell's


def cell_began(data: bytes | bytearray) -> bool:
    """Whether the worker's "cell" line is among `data`'s complete lines, after nothing but CRANE's setup lines
    (never read past any other line: from there on, lines may be the cell's)."""
    for raw in bytes(data).split(b"\n")[:-1]:
        try:
            obj = json.loads(raw)
        except ValueError:
            return False
        event = obj.get("event") if isinstance(obj, dict) else None
        if event == "cell":
            return True
        if event not in _PREFIX:
            return False
    return False


def timeout_reason(budget_s: float) -> str:
    """The verdict's reason when the daemon's kill at the cell's deadline ended the run."""
    return (f"the cell did not finish within {budget_s:g} s (its budget counted from the cell's start; the daemon "
            f"ended the worker {CELL_GRACE_S:g} s after it)")


def setup_reason(allowance_s: float) -> str:
    """The verdict's reason when the run ended at the setup's allowance, the cell not begun."""
    return (f"the worker's setup (imports, confinement, loading the copied state) did not finish within "
            f"{allowance_s:g} s: the cell never began")


class CellClock(threading.Event):
    """A run's stop, as the pipe readers look at it (`is_set`): the caller's `cancel`, or the cell's deadline
    passed once `start` armed it (the worker's cell line came)."""

    def __init__(self, budget_s: float, cancel: threading.Event | None) -> None:
        super().__init__()
        self.budget_s, self.cancel = float(budget_s), cancel
        self.deadline: float | None = None

    def start(self) -> None:
        if self.deadline is None:  # (the first cell line only)
            self.deadline = time.monotonic() + self.budget_s + CELL_GRACE_S

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def is_set(self) -> bool:
        return super().is_set() or self.cancelled() or self.expired()

    def how(self, how: str) -> str:
        """A reader's word, the cell's deadline said as such ("cancelled" by this clock alone is "deadline")."""
        return "deadline" if how == "cancelled" and not self.cancelled() and self.expired() else how

    def until(self, deadline: float) -> float:
        """The run's deadline now: the cell's once it began, else `deadline` (the setup's allowance)."""
        return self.deadline if self.deadline is not None else deadline


class CellWatch:
    """A worker's result pipe read through, arming `clock` at the worker's cell line. `framed`: a head's answer
    (crane.sandbox.portable.read_forked): its first line says how the run goes, and only an `S` run's lines come
    live (a fork child's come framed after it ended: nothing to arm)."""

    def __init__(self, reader: PipeReader, clock: CellClock, framed: bool = False) -> None:
        self.reader, self.clock, self.framed = reader, clock, framed
        self.seen = bytearray()
        self.off = False

    @property
    def eof(self) -> bool:
        return self.reader.eof

    def read(self, timeout: float) -> bytes | None:
        if self.clock.deadline is not None:  # (armed: its caller looks at the clock after this wait)
            timeout = min(timeout, max(0.0, self.clock.deadline - time.monotonic()))
        chunk = self.reader.read(timeout)
        if chunk and self.clock.deadline is None and not self.off:
            self.seen += chunk
            if self.framed and b"\n" in self.seen:
                first, _, rest = bytes(self.seen).partition(b"\n")
                self.framed, self.off, self.seen = False, first != b"S", bytearray(rest)
            if not self.framed and not self.off and cell_began(self.seen):
                self.clock.start()
                self.seen = bytearray()
        return chunk


def read_fifo(fd: int, child: ChildHandle, deadline: float, clock: CellClock,
              sealed: Callable[[], bool] | None = None) -> tuple[bytes, str]:
    """An OS-confined worker's FIFO (crane.sandbox.channel.read_until_eof, `stop_at_record`) read line by line until
    its cell line (arming `clock`), within the setup's `deadline`; then to its end within the cell's. `sealed()`:
    the run's process is in CRANE's sealed wait, or its parent said how it ended (crane.sandbox.copy_seal.at_end):
    once a record came, that also ends the read (what the FIFO holds then is read at once), so a copy of the channel
    the cell keeps open — a dup over fd 1 in the sealed process, a socket or file object made on it, a child holding
    it — no longer makes the run wait for its deadline (`timeout`, where the kernel gives the cell's crash: issue 42,
    fixD). The seal, read after (`transplant._run_end`), still names exactly the bytes read: a line the cell wrote
    there before it makes the run `blocked`, and nothing written after the seal is the run's."""
    data = bytearray()
    while clock.deadline is None:
        chunk, how = read_until_eof(fd, child, deadline, stop_at_newline=True, cancel=clock.cancel)
        data += chunk
        if how != "line":
            return bytes(data), "record" if how == "eof" and has_record(data) else how
        if cell_began(data):
            clock.start()
    end = clock.until(deadline)
    while True:
        look = sealed is not None and has_record(data)  # (a cell's record-like line only costs a look)
        limit = min(end, time.monotonic() + SEAL_LOOK_S) if look else end
        rest, how = read_until_eof(fd, child, limit, stop_at_newline=sealed is not None, cancel=clock.cancel)
        data += rest
        if how == "line":
            continue
        if how == "deadline" and look and limit < end:
            if sealed is not None and sealed():
                data += _readable_now(fd)
                return bytes(data), "record"
            continue
        return bytes(data), "record" if how == "eof" and has_record(data) else how


SEAL_LOOK_S = 0.05  # how often a channel that has a record but has not ended is checked for its process's seal


def _readable_now(fd: int) -> bytes:
    """What the (non-blocking) FIFO holds now, read without waiting (bounded: a writer that keeps writing is not
    followed past 1 MiB, whose bytes the seal then does not name)."""
    out = bytearray()
    while len(out) < 1 << 20:
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)
