"""Portable sandbox, worker side (Linux): no process a run started outlives the run, whatever the cell did to
Python's view of it.

A fork child of the cell (multiprocessing's fork start, the one kind of process the portable run allows: a DataLoader's
workers, a pool's processes and joblib's under the Linux layer, worker/pools.py) can
leave every registry Python keeps: call `os.setsid` (out of the worker's process group and session, which the
daemon kills), drop out of `multiprocessing.process._children`, replace `os.getppid`/`os._exit` (what a Python
watcher thread would use). So the worker holds its descendants through the Linux kernel instead:
- `hold_descendants()` (before the cell runs): the worker becomes a **child subreaper**
  (`prctl(PR_SET_CHILD_SUBREAPER)`): a descendant whose parent ends is re-parented to the worker, never to init,
  so every process the run started is the worker's child or below one while the worker lives (the daemon's
  `children(recursive=True)` kill sees them all); and every fork child, in C at fork time, gets a **parent-death
  signal** (`prctl(PR_SET_PDEATHSIG, SIGKILL)`): it is killed by the Linux kernel when the thread that forked it
  ends, so however the worker ends (its record written, a refusal, the cell's own `os._exit`, a signal, the
  daemon's kill), its children end with it, and theirs with them. `setsid`, registries and rebound names change
  neither (only native code in the child could clear its own parent-death signal: `ctypes` is refused by the guard,
  and under Landlock the child still writes nothing outside and signals nothing outside the run);
- `end_descendants()` (after the cell, before the record is written): every child the Linux kernel lists for this
  process (`/proc/self/task/*/children`, re-parented orphans included) is killed, again until none is left running
  (left unreaped: multiprocessing may still signal its own as its children), with the platform's C functions bound when this module was built (before any cell ran).
- `kill_child(pid)`: CRANE's one way to kill a child of the run (the calls above, and multiprocessing's children
  the portable worker ends after the cell). A child can be reaped by the run's own code at any moment, also while
  CRANE ends it (a pool left open: its handler thread reaps a killed worker and forks another): so the child is
  named by a pidfd, not its number: one reaped before is found gone and never signalled, a number used again is
  never hit, and `pidfd_open`/`pidfd_send_signal` raise no audit event, so the run's audit hook, which judges the
  cell's `os.kill`, never takes CRANE's kill for the cell's (a `kill` of a pid reaped in between was refused:
  "signalling another process", the run `blocked`). Where there is no pidfd (Linux < 5.3, macOS): `kill` after a
  check that it is an unreaped child, as before.
Elsewhere (macOS, Windows) both do nothing: the job object (Windows) and the daemon's kill of the worker's tree
are what ends a run's processes there.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
import time
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_posix = sys.modules.get("posix")
# bound now, when the worker's module is built: a cell that rebinds `os.kill`, `os.getppid`, ... changes nothing
_KILL = getattr(_posix, "kill", None)
_WAITID = getattr(_posix, "waitid", None)
_P_PID, _WEXITED, _WNOWAIT = getattr(os, "P_PID", 1), getattr(os, "WEXITED", 4), getattr(os, "WNOWAIT", 0x1000000)
_OPEN = getattr(_posix, "open", None)
_READ = getattr(_posix, "read", None)
_CLOSE = getattr(_posix, "close", None)
_LISTDIR = getattr(_posix, "listdir", None)
_GETPID = getattr(_posix, "getpid", None)
_GETPPID = getattr(_posix, "getppid", None)
_EXIT = getattr(_posix, "_exit", None)
_MONOTONIC, _SLEEP = time.monotonic, time.sleep
_SIGKILL, _WNOHANG, _O_RDONLY = int(signal.SIGKILL), os.WNOHANG, os.O_RDONLY
# (the real ones: the portable run later wraps signal.pidfd_send_signal for the cell, kernel/audit.py)
_PIDFD_OPEN, _PIDFD_SEND = getattr(_posix, "pidfd_open", None), getattr(signal, "pidfd_send_signal", None)
_P_PIDFD = getattr(os, "P_PIDFD", None)
_REAP_SIGNAL, _REAP_SIGCHLD, _REAP_SIG_DFL = signal.signal, getattr(signal, "SIGCHLD", None), signal.SIG_DFL
_HELD: dict = {}  # what hold_descendants set up (once per process)


def _linux() -> bool:
    return sys.platform.startswith("linux") and None not in (_KILL, _WAITID, _OPEN, _READ, _LISTDIR, _GETPID)


def hold_descendants() -> dict[str, Any]:
    """Make this process a child subreaper and give each of its (and its descendants') fork children a
    parent-death SIGKILL (module docstring). Returns what it did (`ran`, or `why` not)."""
    if _HELD:
        return dict(_HELD)
    if not _linux():
        return {"ran": False, "why": f"{sys.platform}: no child subreaper"}
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
        if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            e = ctypes.get_errno()
            return {"ran": False, "why": f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(e)}"}
    except (OSError, AttributeError) as exc:
        return {"ran": False, "why": f"{type(exc).__name__}: {exc}"}
    forker = [0]
    getpid: Any = _GETPID
    getppid: Any = _GETPPID
    exit_: Any = _EXIT

    def before() -> None:
        forker[0] = getpid()

    def in_child() -> None:
        # killed when the forking thread ends; ended now if that happened before the signal was set
        if prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0 or getppid() != forker[0]:
            exit_(70)

    os.register_at_fork(before=before, after_in_child=in_child)
    _HELD.update(ran=True, subreaper=True, parent_death_signal="SIGKILL")
    return dict(_HELD)


def _children() -> list[int]:
    """This process's children as the Linux kernel lists them (every thread's; re-parented orphans included)."""
    assert _LISTDIR is not None and _OPEN is not None and _READ is not None and _CLOSE is not None
    assert _GETPID is not None
    me = _GETPID()
    out: list[int] = []
    try:
        tids = _LISTDIR(f"/proc/{me}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            fd = _OPEN(f"/proc/{me}/task/{tid}/children", _O_RDONLY)
        except OSError:
            continue
        try:
            data = b""
            while True:
                chunk = _READ(fd, 65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            data = b""
        finally:
            _CLOSE(fd)
        out.extend(int(p) for p in data.split() if p.isdigit())
    return out


def kill_child(pid: int) -> bool:
    """SIGKILL `pid` if it is a child of this process not yet reaped (a zombie counts); whether it was signalled.
    Through a pidfd where there is one, else `kill` (module docstring)."""
    if type(pid) is not int or pid <= 0 or _WAITID is None:
        return False
    if _PIDFD_OPEN is not None and _PIDFD_SEND is not None and _CLOSE is not None:
        try:
            fd = _PIDFD_OPEN(pid)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                return False  # reaped already: nothing to end
            fd = -1  # (no pidfd here: ENOSYS, or refused)
        if fd >= 0:
            try:  # the process the pidfd holds is an unreaped child of this one (else ChildProcessError)
                try:
                    if _P_PIDFD is None:
                        raise OSError(errno.EINVAL, "no P_PIDFD")
                    _WAITID(_P_PIDFD, fd, _WEXITED | _WNOHANG | _WNOWAIT)
                except ChildProcessError:
                    return False
                except OSError:  # (EINVAL: no P_PIDFD before Linux 5.4; the pid then, the signal by the pidfd)
                    _WAITID(_P_PID, pid, _WEXITED | _WNOHANG | _WNOWAIT)
                _PIDFD_SEND(fd, _SIGKILL)
                return True
            except OSError:
                return False
            finally:
                _CLOSE(fd)
    if _KILL is None:
        return False
    try:
        _WAITID(_P_PID, pid, _WEXITED | _WNOHANG | _WNOWAIT)
        _KILL(pid, _SIGKILL)
        return True
    except OSError:
        return False


def end_descendants(timeout_s: float = 5.0) -> int:
    """Kill (and leave unreaped) every child of this process (orphaned descendants re-parented here included), again until the
    Linux kernel lists none (a child's own children are re-parented here as it dies). Returns how many ended."""
    if not _HELD.get("ran") or not _linux():
        return 0
    assert _KILL is not None and _WAITID is not None
    if _REAP_SIGCHLD is not None:  # the cell's SIGCHLD handler (torch's DataLoader raises from it) is over with the cell
        try:
            _REAP_SIGNAL(_REAP_SIGCHLD, _REAP_SIG_DFL)
        except (OSError, ValueError):
            pass
    ended = 0
    dead: set[int] = set()  # ended, left unreaped (zombies): multiprocessing may still signal its own, as its child
    deadline = _MONOTONIC() + timeout_s
    while _MONOTONIC() < deadline:
        kids = [p for p in _children() if p not in dead]
        if not kids:
            break
        for pid in kids:
            kill_child(pid)
        for pid in kids:
            while _MONOTONIC() < deadline:
                try:
                    done = _WAITID(_P_PID, pid, _WEXITED | _WNOHANG | _WNOWAIT)
                except ChildProcessError:
                    done = True
                if done:
                    dead.add(pid)
                    ended += 1
                    break
                _SLEEP(0.002)
    return ended
