"""Which program a copy's worker is started as: the kernel's own interpreter, as the OS says its process runs it,
never a path the kernel's reply names alone (issue 42). Runs in the daemon.

The transplant export and the prewarm request report the kernel's `sys.executable`, and the daemon started that
path as the worker (`python -c BOOTSTRAP`), unconfined until the worker confines itself. The reply is the kernel's:
an earlier cell can set `sys.executable` (or rewrite the reply: docs/sandbox.md's threat model) to a program of its
own, and where the kernel lives in a container whose files the daemon shares (`_sees` passes) that program then ran
on the daemon's side of the container's wall. Now the path is started only when it is the program the kernel's
process runs, seen from the daemon: the same file (device and inode) as `/proc/<pid>/exe` (Linux, the kernel in
the daemon's pid namespace) or psutil's `Process.exe()` (every platform), the process the one that answered (its
start time, checked by the caller's reference and again here). A venv's interpreter is a link to its base (the
same file) or, with `--copies`, the program the process runs itself; on Windows a venv's `python.exe` is a
launcher that starts the base interpreter as the kernel's process, so there the launcher is taken when its
`pyvenv.cfg`'s `home` is the folder of the program the kernel runs. A kernel this daemon cannot see (another
machine, container or pid namespace) gets no worker.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from crane.sandbox.channel import _starttime
from crane.sandbox.process_watch import ProcessRef, process_alive


def untrusted_interpreter(exe: str, kernel: Any) -> str | None:
    """Why `exe` (the kernel's `sys.executable`, as its reply says) is not started as the copy's worker; None: it
    is the program the kernel's process runs. `kernel`: the caller's reference to that process (transplant's
    `KernelRef` — pid and /proc start time —, a `ProcessRef`, or None where the daemon cannot see it)."""
    if type(exe) is not str or not exe or not os.path.isabs(exe):
        return "the kernel named no interpreter by an absolute path"
    if kernel is None:
        return ("the kernel's process is not one this daemon can see (another machine, container or pid "
                "namespace): its interpreter is not started here")
    running = _running_program(kernel)
    if running is None:
        return "the program the kernel's process runs cannot be read"
    try:
        named, runs = os.stat(exe), os.stat(running)
    except OSError as exc:
        return f"the kernel's interpreter cannot be read ({exc.strerror or exc})"
    if not _same_process(kernel):
        return "the kernel's process ended (or its pid names another) while its interpreter was checked"
    if (named.st_dev, named.st_ino) == (runs.st_dev, runs.st_ino):
        return None
    if os.name == "nt" and stat.S_ISREG(named.st_mode) and venv_launcher_of(exe, running):
        return None
    return (f"the kernel names {exe!r} as its interpreter, but its process runs {running!r}: CRANE starts only "
            "the kernel's own interpreter")


def venv_launcher_of(exe: str, running: str) -> bool:
    """`exe` is a venv's launcher (`<venv>/Scripts/python.exe` or `<venv>/bin/python`) whose `pyvenv.cfg` says
    its base interpreter lives in the folder of `running` (what a Windows venv's launcher starts)."""
    cfg = os.path.join(os.path.dirname(os.path.dirname(exe)), "pyvenv.cfg")
    try:
        with open(cfg, encoding="utf-8") as f:
            lines = f.read(65536).splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "home":
            try:
                return os.path.samefile(value.strip(), os.path.dirname(running))
            except OSError:
                return False
    return False


def _running_program(kernel: Any) -> str | None:
    """The path of the program the kernel's process runs (`/proc/<pid>/exe`: stat follows it to the very file,
    deleted or not; psutil's answer elsewhere), or None."""
    if isinstance(kernel, ProcessRef):
        import psutil as ps  # a daemon dependency, imported on first use
        try:
            path = ps.Process(kernel.pid).exe()
        except (ps.Error, OSError):
            return None
        return path if path and os.path.isabs(path) else None
    return f"/proc/{int(kernel.pid)}/exe"


def _same_process(kernel: Any) -> bool:
    """The process `kernel` names still is the one the caller identified."""
    if isinstance(kernel, ProcessRef):
        return process_alive(kernel)
    return _starttime(int(kernel.pid)) == int(kernel.start)
