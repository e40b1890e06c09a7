"""Daemon side of the portable sandbox: which confinement a run gets, and the OS layer put under the guard where
the platform offers one cheaply.

`choose(pref)`: "os" or "portable", and why. `pref` is the resolved `SandboxOptions.confinement`:
- "os": the OS sandbox (Linux x86_64: namespaces, Landlock, seccomp); where it cannot run, runs stay
  `unavailable` naming the platform, as before;
- "portable": the portable run everywhere (a transplant worker confined by the call guard and the audit hook:
  worker/guard.py, worker/portable.py), so Linux measures exactly what macOS and Windows get;
- "auto": the OS sandbox where it runs, else the portable run (macOS, Windows, Linux on other machines than
  x86_64, Linux whose namespaces/Landlock/seccomp are refused: `confinement.Confinement.unavailable()`).
The kernel is never forked for a portable run: its state is exported (a private request) and the cell runs in a
worker of its own interpreter.

The OS layer put under a portable worker is chosen per platform in crane.sandbox.oslayer (linux, macos, windows:
Landlock in the worker, Seatbelt's sandbox-exec, a job object and a low-integrity token), each saying what it
confines and whether it ran.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from crane.sandbox.confinement import Confinement
from crane.sandbox.confinement import current as current_confinement

ASKED = "the portable sandbox was asked for (--sandbox portable / crane.sandbox)"
GUARD_ASKED = "the guard alone was asked for (--sandbox guard / crane.sandbox): no OS layer"
NO_OS_LAYER = "no speculative run: the rules decide"


def choose(pref: str, confinement: Confinement | None = None,
           os_layer: Callable[[], str | None] | None = None) -> tuple[str, str | None]:
    """("os" | "portable" | "guard" | "none", why) for a run under the `pref` confinement ("auto", "os", "portable",
    "guard"). `os_layer()`: None when this platform's OS layer can confine a portable worker, else why not
    (default: crane.sandbox.oslayer.available). A portable run is never started without its OS layer: "none" then,
    the reason saying why (and that `guard` runs the guard alone)."""
    if pref == "guard":
        return "guard", GUARD_ASKED
    if pref == "os":
        return "os", None
    if pref != "auto":
        return portable_or_none(ASKED, os_layer)
    why = (confinement or current_confinement()).unavailable()
    if why is None:
        return "os", None
    return portable_or_none(f"{why}: the portable sandbox runs instead", os_layer)


def portable_or_none(why_portable: str, os_layer: Callable[[], str | None] | None = None) -> tuple[str, str | None]:
    """("portable", `why_portable`) where the platform's OS layer can confine the worker, else ("none", why not)."""
    if os_layer is None:
        from crane.sandbox.oslayer import available
        os_layer = available
    missing = os_layer()
    if missing is None:
        return "portable", why_portable
    return "none", (f"{missing}: the portable sandbox needs this platform's OS layer under its guard, so "
                    f"{NO_OS_LAYER} (--sandbox guard / crane.sandbox \"guard\" runs the guard alone)")


# how an OS-sandbox run says that this machine refused its confinement (seccomp, Landlock, prctl: the fork child's
# setup, or a transplant worker's, failed before any user code)
_OS_SETUP_FAILED = ("sandbox setup failed", "the sandbox child failed during setup")


def os_refused(v) -> str | None:
    """Why the portable sandbox should run instead of this OS-sandbox verdict (auto mode), or None: the machine
    refused the OS confinement itself (a seccomp filter, Landlock, a prctl)."""
    reason = v.reason or ""
    if v.verdict == "unavailable" and reason.startswith(_OS_SETUP_FAILED):
        return f"the OS sandbox could not be set up here ({reason[:200]}): the portable sandbox runs instead"
    return None


HEADS = {"on": True}  # off: every portable run gets a fresh worker, as before heads (benchmarks/portable_bench.py)


def reuse_head(confinement: str) -> bool:
    """A portable run on Linux under its OS layer asks its worker to run it in a fork child and to stay a warm head
    for the next run (worker/head.py): the worker decides whether it can, and says so first (`read_forked`)."""
    import sys
    return HEADS["on"] and confinement == "portable" and sys.platform.startswith("linux")


class Forked(NamedTuple):
    """What a head sent for one run: the run's lines, how they ended ("record" | "eof" | "deadline" | "cancelled"),
    the run's exit status when it ran in a fork child ((exit code, signal)), and whether the head serves again (it
    says so: every process of the run is gone)."""
    data: bytes
    how: str
    status: tuple[int | None, int | None] | None
    again: bool
    # the head's look at the run's process (issue 41, worker/head.py): whether it could read its /proc (None: it
    # never looked), and the seal it found there ((code, digest)), when it ended the process after it
    checked: bool | None = None
    sealed: tuple[int, int] | None = None


def read_forked(reader: Any, deadline: float, cancel: threading.Event | None = None) -> Forked:
    """A run asked of a head (`reuse_head`): its first line says how it ran. `S`: in the head itself, a one-shot
    worker, read as before to the pipe's end (crane.sandbox.pipes.read_run); `F <length> <exit code> <signal> <again>`: in
    a fork child, whose lines (`length` bytes) follow, framed by the head, which then waits for the next request (and,
    on a head that reads its runs' seals, ` <checked> <seal code> <digest>` after `again`: worker/head.py).
    Anything else, or more bytes than the frame, and the head is not used again."""
    from crane.sandbox.drain import has_record
    from crane.sandbox.pipes import read_run
    buf = bytearray()
    while b"\n" not in buf:
        got = _chunk(reader, deadline, cancel)
        if isinstance(got, str):
            return Forked(bytes(buf), got, None, False)
        if not got:
            return Forked(bytes(buf), "eof", None, False)
        buf += got
    first, _, rest = bytes(buf).partition(b"\n")
    if first == b"S":
        data, how = read_run(reader, deadline, cancel)
        data = rest + data
        return Forked(data, "record" if how == "eof" and has_record(data) else how, None, False)
    parts = first.split()
    if len(parts) not in (5, 8) or parts[0] != b"F" or not all(p.lstrip(b"-").isdigit() for p in parts[1:]):
        return Forked(bytes(buf), "eof", None, False)
    size, code, sig, again = (int(p) for p in parts[1:5])
    looked, seal_code, digest = (int(p) for p in parts[5:]) if len(parts) == 8 else (-1, 0, 0)
    checked = None if looked < 0 else bool(looked)
    sealed = (seal_code, digest) if seal_code else None
    body = bytearray(rest)
    while len(body) < size:
        got = _chunk(reader, deadline, cancel)
        if isinstance(got, str):
            return Forked(bytes(body), got, None, False)
        if not got:
            return Forked(bytes(body), "eof", None, False)
        body += got
    data = bytes(body[:size])
    status = (None if code < 0 else code, sig or None)
    return Forked(data, "record" if has_record(data) else "eof", status,
                  bool(again) and len(body) == size and not reader.eof, checked, sealed)


def _chunk(reader: Any, deadline: float, cancel: threading.Event | None) -> bytes | str:
    """The next chunk of `reader` (b"" at its end), or "deadline" / "cancelled"."""
    from crane.sandbox.pipes import POLL_S
    while True:
        if cancel is not None and cancel.is_set():
            return "cancelled"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "deadline"
        chunk = reader.read(min(remaining, POLL_S))
        if chunk is not None:
            return chunk
