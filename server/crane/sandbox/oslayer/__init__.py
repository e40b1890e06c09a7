"""The OS layer under a portable run (daemon side): one module per platform, chosen once by `sys.platform`.

A portable run's worker (crane.sandbox.transplant) is confined by CRANE's Python guard (worker/guard.py,
worker/portable.py) and, underneath it, by what the operating system offers:
- `linux`: the worker confines itself with Landlock and no_new_privs before it loads any state (worker side); the
  daemon adds nothing at launch, and the worker reports the layers that ran with its verdict;
- `macos`: the worker is started under `/usr/bin/sandbox-exec` with a Seatbelt profile (no network, no signal or
  process information to other processes, no reads of Jupyter's runtime folder, writes only in CRANE's folders,
  no new processes), used only once a trial start under the same profile has shown each denial holds;
- `windows`: the daemon puts the worker, before it gets any state, in a job object (no child processes, killed
  when the daemon's handle closes, a memory limit) and lowers its token to low integrity (no writes to the user's
  medium-integrity files; CRANE's folders are labelled low for it).

Each module answers `available(executable)` (None, or why its layer cannot run here), `launch(argv, env, home)`
(the command line, extra environment, and the `OsLayer` it will be), `started(launch, proc)` (the layer once the
process exists: what it confines and whether it ran), `prepare_folder(path)` for a run's folder and
`release(launch)` once the worker has ended. A layer that did not run says why (`OsLayer.why_not`); no run is ever
said to be confined by a layer that did not run (`OsLayer.names`).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from crane.sandbox.oslayer.layer import Launch, OsLayer, jupyter_runtime_dirs

__all__ = ["Launch", "OsLayer", "available", "jupyter_runtime_dirs", "launch", "prepare_folder", "release", "started"]


def _backend(platform: str) -> Any:
    if platform == "darwin":
        from crane.sandbox.oslayer import macos
        return macos
    if platform in ("win32", "cygwin"):
        from crane.sandbox.oslayer import windows
        return windows
    from crane.sandbox.oslayer import linux  # Linux on any machine, and other POSIX systems (described there)
    return linux


def available(executable: str = sys.executable, platform: str = sys.platform) -> str | None:
    """None when this platform's OS layer can confine a worker of `executable` here, else why not (for `auto`,
    which does not run the portable sandbox without one). Checked for real, once: Linux asks the kernel for
    Landlock, macOS runs the Seatbelt trial, Windows confines a trial process and reads its integrity back."""
    return _backend(platform).available(executable)


def launch(argv: list[str], env: dict[str, str], home: str, platform: str = sys.platform) -> Launch:
    """The worker's launch on `platform` (`env`: the kernel's environment, for where its secrets live; `home`: the
    worker's own folder)."""
    return _backend(platform).launch(list(argv), dict(env), home)


def started(how: Launch, proc: subprocess.Popen, platform: str = sys.platform) -> Launch:
    """Once the worker's process exists, before it is sent any state: the platform's remaining steps (Windows)."""
    return _backend(platform).started(how, proc)


def release(how: Launch, platform: str = sys.platform) -> None:
    """The worker has ended: what the daemon held for it is closed (Windows: its job's handle)."""
    _backend(platform).release(how)


def prepare_folder(path: str, platform: str = sys.platform) -> None:
    """A run's folder made writable for a confined worker (Windows: labelled low integrity; elsewhere nothing)."""
    _backend(platform).prepare_folder(path)
