"""Linux OS layer (daemon side), on any architecture: nothing to add at launch.

The portable worker confines itself, once its run folder exists and before it loads any of the kernel's state
(worker/linux.py, kernel/landlock.py: Landlock writes only in CRANE's folders, no program execution, Jupyter's
runtime folder unreadable, TCP and, where the kernel's ABI has them, signals and abstract UNIX sockets scoped;
no_new_privs; and on x86_64 and aarch64 a seccomp filter, worker/seccomp.py: other processes' priority, affinity,
scheduling, limits and memory out of reach). Only the worker knows whether that ran on this kernel: its record
says so and the verdict names "landlock" (and "seccomp") only then. So the daemon's layer here is a description that never claims a run. Also used for other
POSIX systems, where nothing is added either.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys

from crane.sandbox.oslayer.layer import Launch, OsLayer

NAME = "landlock"
CONFINES = ("file writes outside CRANE's run folders", "program execution", "reads of Jupyter's runtime folders",
            "TCP bind/connect (Landlock ABI 4+)", "signals and abstract UNIX sockets to other processes (ABI 6+)",
            "other processes' priority, affinity, scheduling, limits, memory, ptrace (seccomp: x86_64, aarch64)")
BY_THE_WORKER = ("applied by the worker itself before it loads any state (worker/linux.py); its record says "
                 "whether it ran")


_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture (x86_64, aarch64, ...)
_LANDLOCK_CREATE_RULESET_VERSION = 1


def landlock_abi() -> int:
    """The Landlock ABI the running kernel offers (0: none, or not Linux); the daemon's own question (worker/linux.py
    asks it again in the worker, through kernel/landlock.py, which the daemon does not import)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        rc = libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                          ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return int(rc) if rc > 0 else 0


def available(executable: str) -> str | None:
    """Whether the worker's Landlock layer can run on this kernel."""
    if not sys.platform.startswith("linux"):
        return f"{sys.platform}: Landlock is Linux's"
    if landlock_abi() < 1:
        return "this Linux kernel offers no Landlock (5.13+ with Landlock enabled is needed)"
    return None


def launch(argv: list[str], env: dict[str, str], home: str) -> Launch:
    if not sys.platform.startswith("linux"):
        return Launch(argv, {}, OsLayer(NAME, sys.platform, (), False, f"{sys.platform}: no OS layer for it"))
    return Launch(argv, {}, OsLayer(NAME, "linux", CONFINES, False, BY_THE_WORKER))


def started(how: Launch, proc: subprocess.Popen) -> Launch:
    return how


def release(how: Launch) -> None:
    """Nothing is held for the worker."""


def prepare_folder(path: str) -> None:
    """Nothing: the worker's Landlock ruleset names its folders itself."""
