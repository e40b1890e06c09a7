"""The platform part of the sandbox's confinement, behind one small interface.

A sandbox run is confined by the operating system, so what exists depends on the platform (`current()`):
- `Linux` (x86_64): everything (docs/sandbox.md): fork runs (layered: user, mount, pid, IPC and network
  namespaces with private copy-on-write layers; blocking: Landlock + seccomp-BPF) and transplant runs (a worker
  process that confines itself with the same code, `kernel/isolation._prepare_child`, before any notebook code);
- `MacOS`: `sandbox_init` (Seatbelt profiles) could confine a transplant worker, and `Windows`: job objects
  plus an AppContainer could; neither is implemented, since neither can be built or tested here. Their
  `unavailable()` says so, naming the platform: every run there is `unavailable` with that reason, never an
  unconfined run passed off as a confined one.

Where this says `unavailable`, `auto` runs the portable sandbox instead (crane.sandbox.portable: a transplant worker
confined by a call guard and an audit hook, no OS part); `--sandbox os` keeps the `unavailable`.
The worker side has the same switch (`worker/main._confine`: Linux's `_prepare_child`, else the reason): a worker
started on a platform without confinement refuses before loading any state.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import ClassVar

RunMode = str  # "layered" | "blocking" | "transplant"


class Confinement:
    """What one platform can confine. `unavailable()`: None when sandbox runs can be confined here, else why not
    (the reason names the platform). `modes`: the run modes it implements."""

    name: ClassVar[str] = "unknown"
    modes: ClassVar[tuple[RunMode, ...]] = ()

    def unavailable(self) -> str | None:
        return (f"{self.name}: CRANE's sandbox confinement exists only for Linux (namespaces, Landlock, "
                f"seccomp); no sandbox run is started here")

    def runs(self, mode: RunMode) -> str | None:
        """None when `mode` runs here, else why not."""
        why = self.unavailable()
        if why is None and mode not in self.modes:
            why = f"{self.name}: the {mode} mode is not implemented"
        return why


class Linux(Confinement):
    name = "Linux"
    modes = ("layered", "blocking", "transplant")

    def unavailable(self) -> str | None:
        machine = platform.machine()
        if machine not in ("x86_64", "AMD64"):
            return f"Linux on {machine}: the seccomp filter is written for x86_64 only"
        if not hasattr(os, "pidfd_open"):
            return "Linux: this Python has no os.pidfd_open (3.9+ on Linux 5.3+ is needed to end runs safely)"
        return None


class MacOS(Confinement):
    name = "macOS"

    def unavailable(self) -> str | None:
        return ("macOS: the sandbox's confinement is Linux's (namespaces, Landlock, seccomp); confining a worker "
                "with sandbox_init is not implemented, so no sandbox run is started on macOS")


class Windows(Confinement):
    name = "Windows"

    def unavailable(self) -> str | None:
        return ("Windows: the sandbox's confinement is Linux's (namespaces, Landlock, seccomp); confining a worker "
                "with job objects and an AppContainer is not implemented, so no sandbox run is started on Windows")


def for_platform(system: str) -> Confinement:
    """The confinement of a platform by `sys.platform` name ("linux", "darwin", "win32", ...)."""
    if system.startswith("linux"):
        return Linux()
    if system == "darwin":
        return MacOS()
    if system in ("win32", "cygwin"):
        return Windows()
    other = Confinement()
    other.name = system  # type: ignore[misc]
    return other


def current() -> Confinement:
    """This machine's confinement (where the daemon starts transplant workers)."""
    return for_platform(sys.platform)
