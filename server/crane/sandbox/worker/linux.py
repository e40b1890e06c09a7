"""Portable sandbox, worker side: the Linux OS layer under the call guard (any architecture: x86_64, ARM).

`confine_worker(...)` runs in the transplant worker, once, after the run folder is made and BEFORE any of the
kernel's state or the notebook's code is loaded (worker/portable.prepare_portable). It asks the Linux kernel, not
Python, to hold the worker (and every thread and process it starts from then on), so native writers (pyarrow,
polars, sqlite, HDF5), `ctypes` and C intermediaries meet it too:
- **Landlock** (kernel/landlock.py): file writes, truncation, removal, renames, links, new files, FIFOs and device
  nodes only below the run's private folder (its view and scratch), the worker's own folder and `/dev/shm`
  (multiprocessing's semaphores), plus the null devices; programs cannot be executed (no `os.system` through
  `ctypes.pythonapi`, no `_posixsubprocess`); the files of Jupyter's runtime folder and the kernel's connection
  file cannot be read (they hold the HMAC key that signs requests to the user's kernel); TCP bind/connect refused
  (ABI >= 4); signals (`kill`, `pidfd_send_signal`, ...) and abstract UNIX sockets scoped to the worker's own
  processes (ABI >= 6); ptrace-type access to other processes (`/proc/<pid>/environ`, `/mem`) refused by Landlock
  itself;
- **no_new_privs**: no set-uid program can raise privileges (needed by Landlock for an unprivileged process).
- **capabilities** dropped but the file-permission ones (kernel/confine.drop_capabilities, as in the OS sandbox): a
  root kernel's worker can no longer set the clock or the host name, configure the network, load modules, ...
- **seccomp** (worker/seccomp.py, x86_64 and aarch64; every thread of the worker): `setpriority`, `sched_set*`,
  `ioprio_set`, `prlimit64`, `migrate_pages`/`move_pages`, `process_vm_*` only on the worker itself (pid 0 or its
  own), `ptrace`/`pidfd_getfd`/`process_madvise` refused: Landlock has no rule for them. Elsewhere Landlock alone,
  and `layers` says so.
What it does not confine (said in docs/sandbox.md): threads that existed before this call keep their
capabilities (they are per thread; the seccomp filter's setters of the clock and host name reach them), UDP sends, connecting to a path-named UNIX socket, reading
files elsewhere (reads are allowed everywhere but the hidden paths), those process controls on an architecture
without a seccomp table here (the call guard refuses them from Python, worker/guard.py), threads that existed
before this call for Landlock (native thread pools a preloaded library started: Landlock restricts the calling
thread and what it starts; their number is recorded; the seccomp filter reaches them).

`linux_layer_available()` says whether it can run here, and why not. The record says whether it ran
(`confinement.os_layer`); the verdict's layers name "landlock" only when it did.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from crane.sandbox.kernel.confine import drop_capabilities  # kernel: strip
from crane.sandbox.kernel.landlock import (  # kernel: strip
    apply_landlock,
    landlock_abi,
    prepare_reads,
    restrict_prepared,
)
from crane.sandbox.worker.seccomp import SECCOMP_LAYER, confine_process_controls  # kernel: strip

LINUX_LAYER = "landlock"
_PR_SET_NO_NEW_PRIVS = 38
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full")
_READ_RULES: dict = {}  # the read rules a head made ahead for its next run's process (`prepare_read_layer`)


def linux_layer_available() -> str | None:
    """None when the Linux layer can confine a worker here, else why not."""
    if not sys.platform.startswith("linux"):
        return f"{sys.platform}: Landlock is Linux's"
    abi = landlock_abi()
    if abi < 1:
        return "this Linux kernel offers no Landlock (5.13+ with Landlock enabled is needed)"
    return None


def runtime_dirs(env: dict) -> list[str]:
    """Where Jupyter keeps kernel connection files for a process with environment `env` (every candidate
    jupyter_core could pick: JUPYTER_RUNTIME_DIR, the data folder's `runtime`, the platform runtime folder)."""
    home = env.get("HOME") or os.path.expanduser("~")
    out = []
    if env.get("JUPYTER_RUNTIME_DIR"):
        out.append(env["JUPYTER_RUNTIME_DIR"])
    data = env.get("JUPYTER_DATA_DIR") or os.path.join(
        env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "jupyter")
    out.append(os.path.join(data, "runtime"))
    xdg_runtime = env.get("XDG_RUNTIME_DIR")
    if xdg_runtime:
        out.append(os.path.join(xdg_runtime, "jupyter"))
    try:  # jupyter_core's own answer for that environment, where the kernel's interpreter has it loaded
        paths = sys.modules.get("jupyter_core.paths")
        if paths is not None:
            saved = {k: os.environ.get(k) for k in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "XDG_DATA_HOME",
                                                    "XDG_RUNTIME_DIR", "JUPYTER_PLATFORM_DIRS", "HOME")}
            try:
                for k in saved:
                    if env.get(k) is not None:
                        os.environ[k] = env[k]
                out.append(str(paths.jupyter_runtime_dir()))
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
    except Exception:  # noqa: BLE001 - the candidates above stay
        pass
    return [os.path.realpath(os.path.expanduser(p)) for p in dict.fromkeys(out) if os.path.isabs(os.path.expanduser(p))]


def hidden_paths(facts: dict) -> list[str]:
    """What the worker must not read: Jupyter's runtime folders (for the kernel's environment `facts["env"]` and the
    worker's own) and the kernel's connection file (its HMAC key signs requests to the user's kernel), as the
    export recorded them (`facts`: the run's env.json)."""
    env = facts.get("env")
    hidden = runtime_dirs(env if isinstance(env, dict) else {}) + runtime_dirs(dict(os.environ))
    conn = facts.get("connection_file")
    if isinstance(conn, str) and os.path.isabs(conn):
        hidden.append(os.path.realpath(conn))
    return list(dict.fromkeys(hidden))


def prepare_read_layer(hidden: list[str]) -> None:
    """Make the Landlock read rules for `hidden` now, off the next verdict's way, in a head that stays unconfined
    (worker/head.py, after a run): its next run's process takes them in `confine_worker` (kernel/landlock.
    restrict_prepared: brought up to date there, used only for the same hidden paths, else made afresh). Replaces
    any earlier one; nothing where Landlock is not offered or refuses."""
    drop_prepared()
    if linux_layer_available() is None:
        try:
            _READ_RULES.update(prepare_reads(hidden, landlock_abi()))
        except OSError:
            pass


def drop_prepared() -> None:
    """Close the prepared read rules (a head after forking its run's process, or running a request itself)."""
    fd = _READ_RULES.pop("fd", None)
    _READ_RULES.clear()
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _own_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def confine_worker(writable: list[str], hidden: list[str]) -> dict[str, Any]:
    """Confine this process with Landlock (see the module docstring): writes only below `writable` (and the null
    devices, /dev/shm), no file below `hidden` readable. Raises OSError when it cannot (the caller then records
    that it did not run). Returns what it confined."""
    why = linux_layer_available()
    if why:
        raise OSError(why)
    threads = _own_thread_count()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(e)}")
    places = [p for p in dict.fromkeys(writable) if os.path.isdir(p)]
    if os.path.isdir("/dev/shm"):
        places.append("/dev/shm")
    abi, prepared = landlock_abi(), dict(_READ_RULES)
    _READ_RULES.clear()
    info = None
    if prepared:  # a head's, made ahead (closed there in any case: nothing the run loads can add to it)
        try:
            info = restrict_prepared(prepared, places, _DEVICES, hidden, abi)
        except OSError:
            info = None  # (then one whole ruleset, as without a head: stacked on a layer that already ran, no wider)
    if info is None:
        info = apply_landlock(places, abi, files=_DEVICES, handle_execute=True, hidden=hidden)
    controls = confine_process_controls()  # other processes' scheduling, limits, memory (worker/seccomp.py)
    # round 14 (h4): a worker of a root kernel kept every capability: `time.clock_settime` set the machine's clock and
    # `socket.sethostname` its name (no Landlock rule covers either). All but the file-permission ones go (the OS
    # sandbox's rule, kernel/confine.drop_capabilities), for this thread and every thread and process it starts.
    caps = drop_capabilities()
    info.update(layer=LINUX_LAYER, ran=True, no_new_privs=True, writable=places, hidden=list(hidden),
                threads_before=threads, record={"landlock_abi": info["abi"]}, seccomp=controls, capabilities=caps,
                layers=[LINUX_LAYER] + ([SECCOMP_LAYER] if controls["ran"] else []))
    return info
