"""What a transplant or portable session's command answers when its worker ended by itself while running it (h9,
round 12): the fork session's answer for the same command (kernel/session._ended, which the head writes when a
command's process ends without a reply), so both kinds of session say the same.

- exited with `TAMPERED_EXIT` (the command rebound CRANE's own code or the builtins its reply is made with: the
  worker ends so, writing nothing, worker/main._serve_sealed): `blocked`;
- killed by SIGALRM, SIGXCPU or SIGKILL (its limits: worker/limits.py, the kernel's OOM killer): `timeout`;
- killed by SIGSYS (a refused system call): `blocked`;
- exited with `WORKER_FAILED` (an exception out of CRANE's own worker code: worker/boot.py), a transplant or portable
  session's alone (`worker_outcome`): `blocked`, the outcome cannot be trusted (what the command changed broke the
  code CRANE runs after it: a builtin exception class swapped for one of its own, so the standard library's `except`
  no longer catches), never a crash the kernel would have;
- any other end (the command's own `os._exit`, a finalizer or a signal that ends the process, a segfault): the crash
  the real kernel would have, `DeadKernelError` ("running this cell would end the kernel's process").

Never `no-crash`: how a process ended cannot say that its command ran clean. Daemon side (kernel/session.py is
kernel-side and never imported here: tests/architecture); tests/sandbox/test_copy_session_worker_end.py holds the
two answers equal.
"""

from __future__ import annotations

import signal

from crane.sandbox.shared.seal import TAMPERED_EXIT

WORKER_FAILED = 70  # a transplant worker whose own code raised (worker/boot.py)
WORKER_FAILED_REASON = ("CRANE's own code failed in the session's worker after the cell's code ran (the cell changed "
                        "what it runs on, as a builtin exception class swapped for one of its own): its outcome "
                        "cannot be trusted")
TAMPERED_REASON = ("the cell changed CRANE's own code or what it runs on (its functions, the standard functions or "
                   "builtins its outcome is made with): its outcome cannot be trusted")


def exit_status(returncode: int) -> str:
    """A `Popen.returncode` worded as the session's head words a command process's end: "exited (n)" or
    "killed (SIGNAME)"."""
    if returncode >= 0:
        return f"exited ({returncode})"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = str(-returncode)
    return f"killed ({name})"


def worker_outcome(returncode: int) -> dict:
    """The reply fields of a transplant or portable session's command whose worker ended by itself (`Popen`'s
    `returncode`) while running it."""
    if returncode == WORKER_FAILED:
        return {"verdict": "blocked", "reason": WORKER_FAILED_REASON}
    return ended_outcome(exit_status(returncode))


def ended_outcome(status: str) -> dict:
    """The reply fields (verdict, reason, ename, evalue) of a command whose process ended as `status` says (the fork
    session's head's words: kernel/session._ended)."""
    if status == f"exited ({TAMPERED_EXIT})":
        return {"verdict": "blocked", "reason": TAMPERED_REASON}
    if status in ("killed (SIGALRM)", "killed (SIGXCPU)", "killed (SIGKILL)"):
        return {"verdict": "timeout", "reason": f"the cell exceeded its budget ({status})"}
    if status == "killed (SIGSYS)":
        return {"verdict": "blocked", "reason": "the cell made a system call the sandbox forbids"}
    return {"verdict": "crash", "ename": "DeadKernelError", "reason": f"the sandbox process {status}",
            "evalue": f"the process ended ({status}): running this cell would end the kernel's process"}
