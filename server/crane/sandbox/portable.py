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

macOS: the worker starts under `/usr/bin/sandbox-exec -p PROFILE` (`seatbelt_profile`: every file write outside
CRANE's run and worker folders, all network and every fork denied), when the binary is there and a trial start
under the profile succeeds (`seatbelt_usable`); otherwise the guarded run goes on without it and the verdict's
layers say so. Never claimed for a run it did not confine. Windows (job objects, restricted tokens) has no OS
layer here. Neither can run on this Linux machine: the profile's text and the command line are tested as text.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable

from crane.sandbox.confinement import Confinement
from crane.sandbox.confinement import current as current_confinement

SANDBOX_EXEC = "/usr/bin/sandbox-exec"  # an absolute path: never one found on $PATH
ASKED = "the portable sandbox was asked for (--sandbox portable / crane.sandbox)"
SEATBELT_LAYER = "sandbox-exec"


def choose(pref: str, confinement: Confinement | None = None) -> tuple[str, str | None]:
    """("os" | "portable", why portable) for a run under the `pref` confinement ("auto", "os", "portable")."""
    if pref == "portable":
        return "portable", ASKED
    if pref == "os":
        return "os", None
    why = (confinement or current_confinement()).unavailable()
    if why is None:
        return "os", None
    return "portable", f"{why}: the portable sandbox runs instead"


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


def _sbpl_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seatbelt_profile(temp_dir: str) -> str:
    """The Seatbelt profile a worker starts under: reads and the interpreter's own work allowed; file writes only in
    CRANE's run and worker folders under `temp_dir` (crane-sbx-*, crane-tw-*) and the null devices; no network; no
    new processes (the worker itself is exec'd by sandbox-exec, so exec stays allowed for that one)."""
    real = os.path.realpath(temp_dir).rstrip("/")
    pattern = "^" + re.escape(real) + "/crane-(sbx|tw)-[^/]+(/|$)"
    return "\n".join([
        "(version 1)",
        "(allow default)",
        "(deny network*)",
        "(deny process-fork)",
        "(deny file-write*)",
        "(allow file-write*",
        f"    (regex #{_sbpl_string(pattern)})",
        '    (literal "/dev/null") (literal "/dev/zero") (literal "/dev/dtracehelper")',
        '    (regex #"^/dev/tty"))',
        "",
    ])


def seatbelt_argv(argv: list[str], temp_dir: str | None = None) -> list[str]:
    """`argv` started under sandbox-exec with the worker's profile."""
    return [SANDBOX_EXEC, "-p", seatbelt_profile(temp_dir or tempfile.gettempdir()), *argv]


_USABLE: dict[str, tuple[bool, str]] = {}


def seatbelt_usable(platform: str = sys.platform, exists: Callable[[str], bool] = os.path.exists,
                    trial: Callable[[list[str]], int] | None = None) -> tuple[bool, str]:
    """(usable, why not): macOS with /usr/bin/sandbox-exec whose trial start under the profile succeeds (once per
    daemon)."""
    if platform != "darwin":
        return False, f"{platform}: no sandbox-exec (macOS only)"
    if not exists(SANDBOX_EXEC):
        return False, f"{SANDBOX_EXEC} is not there"
    key = tempfile.gettempdir()
    if key in _USABLE and trial is None:
        return _USABLE[key]

    def run(cmd: list[str]) -> int:
        try:
            return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=20).returncode
        except (OSError, subprocess.SubprocessError):
            return -1

    code = (trial or run)(seatbelt_argv(["/usr/bin/true"]))
    out = (code == 0, "" if code == 0 else f"a trial start under sandbox-exec failed (exit {code})")
    if trial is None:
        _USABLE[key] = out
    return out


def worker_argv(argv: list[str], platform: str = sys.platform, exists: Callable[[str], bool] = os.path.exists,
                trial: Callable[[list[str]], int] | None = None) -> tuple[list[str], list[str]]:
    """(the command line a transplant worker starts with, the OS layers it adds): under sandbox-exec on macOS
    when usable, else `argv` unchanged and no layer."""
    ok, _why = seatbelt_usable(platform, exists, trial)
    if ok:
        return seatbelt_argv(argv), [SEATBELT_LAYER]
    return list(argv), []
