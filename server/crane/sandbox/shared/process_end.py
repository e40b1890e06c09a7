"""What a session's command answers when the process running it ended without a reply (issue 41; h9, round 12): one
decision for every session path, read by the fork session's head in the kernel (kernel/session._in_fork, from the
command process's exit) and by the daemon for a transplant or portable session's worker (transplant_session, from
`Popen.returncode`), so every kind of session says the same. Shared (bundled into the kernel and the worker).

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

A cell that ends its process through Python (`os._exit(n)`, `os.abort()`, a signal that ends it sent or raised to
itself, also from a finalizer or a thread) is caught before it ends by kernel/audit._guard_process_end, on every path:
a one-shot run writes its record; a session's command ends at once with `cell_end_code(n)` (128 + the signal's
number for a signal, so a SIGKILL it sent itself is never read as the budget's kill, nor a code of its own as
CRANE's), which reads here as that crash; a signal's name is kept (`SIGNAL_EXITS`: "ended by the cell's own
SIGTERM", as a one-shot's record says it).

Never `no-crash`: how a process ended cannot say that its command ran clean. tests/sandbox/
test_copy_session_worker_end.py and test_process_end_matrix.py hold the answers of every path equal.
"""

from __future__ import annotations

import signal

from crane.sandbox.shared.seal import TAMPERED_EXIT  # kernel: strip

WORKER_FAILED = 70  # a transplant worker whose own code raised (worker/boot.py)
CELL_ENDED_EXIT = 86  # a session command's own end whose code CRANE reads otherwise (`cell_end_code`)
SIGNAL_EXITS = 88  # a session command's end by a signal of its own: this + the signal's number (89..119, 1..31)
_RESERVED = (11, 12, TAMPERED_EXIT, WORKER_FAILED)  # exits a session reads as its own (kernel/session._wait_child)
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


def cell_end_code(code: int) -> int:
    """The exit status a session's command process ends with where its cell ends it (kernel/audit._guard_process_end):
    the cell's own (as the OS truncates it) where the session reads it as an exit, else `CELL_ENDED_EXIT`: a signal
    (128 + its number, which the fork session's heads read as a death by that signal: SIGKILL as the budget's) and
    the codes the session reserves (kernel/session: 11 rollback, 12 close; `TAMPERED_EXIT`; `WORKER_FAILED`); a
    signal numbered 1 to 31 (128 + its number from the guard) exits `SIGNAL_EXITS` + its number, so the reply names
    it as a one-shot run's record does (before, every signal read "code 86"), and the cell's own exit status in that
    band is `CELL_ENDED_EXIT`."""
    code = int(code) & 0xFF
    if code > 128:  # a signal (128 + its number): its own band, so that its name is said (`ended_outcome`)
        return SIGNAL_EXITS + code - 128 if code - 128 < 32 else CELL_ENDED_EXIT
    return CELL_ENDED_EXIT if code in _RESERVED or SIGNAL_EXITS < code < SIGNAL_EXITS + 32 else code


def _named_signal(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


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
    if status == f"exited ({CELL_ENDED_EXIT})":
        status = "ended by the cell (a signal, or an exit status the session reserves)"
    elif status.startswith("exited (") and status.endswith(")") and status[8:-1].isdigit() \
            and SIGNAL_EXITS < int(status[8:-1]) < SIGNAL_EXITS + 32:
        status = f"ended by the cell's own {_named_signal(int(status[8:-1]) - SIGNAL_EXITS)}"
    return {"verdict": "crash", "ename": "DeadKernelError", "reason": f"the sandbox process {status}",
            "evalue": f"the process ended ({status}): running this cell would end the kernel's process"}
