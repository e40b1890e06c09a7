"""Resource limits of a portable run (worker side): memory, CPU time and file size, set in the worker itself just
before the cell runs (after the copied state is loaded), with nothing but the platform's own process limits.

- **Memory**: the run may allocate `memory_budget_bytes` more than the worker holds at that moment (its peak
  resident size, `ru_maxrss`: the interpreter, its libraries and the loaded state). The budget is the one the
  daemon asks for (`SandboxRequest.memory_mb`: 2 GiB plus the size of the copy), at most half of the machine's
  memory or of the memory a cgroup (v2) gives the worker. POSIX: the soft `RLIMIT_DATA` on Linux (private
  writable memory: malloc, anonymous mmap, thread stacks; shared libraries' code does not count) and `RLIMIT_AS`
  elsewhere; only the soft limit is lowered, so a session sets it again before each run (the cell cannot raise it:
  the guard and the audit hook refuse `resource.setrlimit`). An allocation past it raises `MemoryError`, which the
  run reports as the sandbox's memory budget exceeded (`timeout`, as the OS sandbox does): never a crash.
  macOS accepts these limits but does not enforce them for `mmap` (its memory is then bounded by the deadline only).
- **Processes of the run** (fork children: a pool's, a DataLoader's; worker/pools.py) inherit these soft limits at
  fork: each is held to the run's memory limit on its own (per process, not their sum: a run with n children may
  hold up to n + 1 times the budget while it lasts; no cgroup is used, where one exists it is not delegated), their
  number bounded by the guard (64 live children; joblib's pools at most the run's CPUs).
- **CPU time**: the soft `RLIMIT_CPU` at the CPU the worker has used plus the run's `cpu_s` (default: its budget
  plus one second): SIGXCPU ends it, reported as the CPU-time budget exceeded (`timeout`).
- **File size**: `RLIMIT_FSIZE` at the request's `layer_mb` (what the OS sandbox's private layer may hold): it
  bounds the private copies of written files and the output files; SIGXFSZ ends the run as `blocked`.
- **Windows**: a job object holding the worker (`windows_job_limits` builds the limits; `set_run_limits` creates
  the job and assigns the worker to it): per-process committed memory, per-process user time, one active process
  (no child processes), and the worker's end when the job's handle closes. It nests in the job the daemon put the
  worker in before it sent any state (crane.sandbox.oslayer.windows: one process, killed with the daemon, low
  integrity). Written for Windows and never run here: the structures' sizes and offsets are tested on Linux against
  the documented x64 layouts, the kernel32 calls run only in the CI matrix's windows job.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from crane.sandbox.shared.winjob import (  # kernel: strip
    JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
    JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOB_OBJECT_LIMIT_PROCESS_MEMORY,
    JOB_OBJECT_LIMIT_PROCESS_TIME,
    ExtendedLimitInformation,
)

MIB = 1024 * 1024


def machine_memory_bytes() -> int:
    """The machine's physical memory (0 when unknown), and a cgroup v2 limit below it when there is one."""
    total = 0
    try:
        total = int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        total = _windows_memory_bytes()
    cg = _cgroup_limit_bytes()
    return min(total, cg) if total and cg else (total or cg)


def _cgroup_limit_bytes() -> int:
    """A cgroup v2 memory limit of this process (0: none, or not Linux)."""
    try:
        with open("/sys/fs/cgroup/memory.max", "rb") as f:
            text = f.read().strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def _windows_memory_bytes() -> int:
    if sys.platform != "win32":
        return 0

    class MemoryStatus(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                    ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                    ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                    ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                    ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]

    st = MemoryStatus()
    st.dwLength = ctypes.sizeof(MemoryStatus)
    ok = ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(st))
    return int(st.ullTotalPhys) if ok else 0


def memory_budget_bytes(requested_mb: int, machine_bytes: int) -> int:
    """What a run may allocate: `requested_mb`, at most half of the machine's (or cgroup's) memory, at least
    256 MiB."""
    want = max(1, int(requested_mb)) * MIB
    if machine_bytes > 0:
        want = min(want, machine_bytes // 2)
    return max(256 * MIB, want)


def held_bytes() -> int:
    """What the worker holds now, without /proc: its peak resident size (KiB on Linux and the BSDs, bytes on
    macOS); 0 where the platform has no `resource` module."""
    try:
        import resource
    except ImportError:
        return 0
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024


def _cpu_used_s() -> float:
    t = os.times()
    return float(t.user + t.system)


def posix_limits(memory_bytes: int, cpu_s: float, file_bytes: int) -> dict[str, Any]:
    """Lower the soft limits (hard ones unchanged): memory `held_bytes() + memory_bytes`, CPU time used +
    `cpu_s`, files `file_bytes`. Returns what was set (name -> soft limit), and `failed` names."""
    import resource

    mem_name = "RLIMIT_DATA" if sys.platform.startswith("linux") else "RLIMIT_AS"
    wanted = {mem_name: held_bytes() + int(memory_bytes),
              "RLIMIT_CPU": int(_cpu_used_s() + max(1.0, float(cpu_s))) + 1,
              "RLIMIT_FSIZE": int(file_bytes), "RLIMIT_CORE": 0}
    done: dict[str, Any] = {}
    for name, soft in wanted.items():
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            _cur, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(which, (soft, hard))
            done[name] = soft
        except (OSError, ValueError):
            done.setdefault("failed", []).append(name)
    return done


def windows_job_limits(memory_bytes: int, cpu_s: float) -> ExtendedLimitInformation:
    """The job object's limits for a worker: committed memory `memory_bytes`, user time `cpu_s` (100 ns units),
    one active process (it starts none), the worker ended when the job's last handle closes, no error dialog on a
    crash."""
    info = ExtendedLimitInformation()
    basic = info.BasicLimitInformation
    basic.LimitFlags = (JOB_OBJECT_LIMIT_PROCESS_MEMORY | JOB_OBJECT_LIMIT_PROCESS_TIME
                        | JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
                        | JOB_OBJECT_LIMIT_ACTIVE_PROCESS)
    basic.ActiveProcessLimit = 1
    basic.PerProcessUserTimeLimit = int(max(1.0, float(cpu_s)) * 10_000_000)
    info.ProcessMemoryLimit = int(memory_bytes)
    return info


_JOB: dict[str, Any] = {}


def _windows_job(memory_bytes: int, cpu_s: float) -> dict[str, Any]:
    """Put the worker in a job object with `windows_job_limits` (Windows only; the handle is kept for the worker's
    life, so the job ends with it)."""
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    vp = ctypes.c_void_p
    k32.CreateJobObjectW.restype, k32.CreateJobObjectW.argtypes = vp, [vp, ctypes.c_wchar_p]  # handles: pointers
    k32.SetInformationJobObject.argtypes = [vp, ctypes.c_int, vp, ctypes.c_uint32]
    k32.AssignProcessToJobObject.argtypes = [vp, vp]
    k32.GetCurrentProcess.restype = vp
    job = _JOB.get("handle") or k32.CreateJobObjectW(None, None)
    if not job:
        return {"failed": ["CreateJobObjectW"]}
    _JOB["handle"] = job
    info = windows_job_limits(held_bytes() + memory_bytes, cpu_s)
    if not k32.SetInformationJobObject(job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS, ctypes.byref(info),
                                       ctypes.sizeof(info)):
        return {"failed": ["SetInformationJobObject"]}
    if not _JOB.get("assigned"):
        if not k32.AssignProcessToJobObject(job, k32.GetCurrentProcess()):
            return {"failed": ["AssignProcessToJobObject"]}
        _JOB["assigned"] = True
    return {"job": True, "memory": int(info.ProcessMemoryLimit), "cpu_s": float(cpu_s)}


def set_run_limits(memory_mb: int, cpu_s: float, file_mb: int) -> dict[str, Any]:
    """The run's limits on this platform (see the module docstring): what was set."""
    budget = memory_budget_bytes(memory_mb, machine_memory_bytes())
    if sys.platform == "win32":
        try:
            out = _windows_job(budget, cpu_s)
        except (AttributeError, OSError) as exc:
            out = {"failed": [f"job object: {exc}"]}
    else:
        out = posix_limits(budget, cpu_s, int(file_mb) * MIB)
    out["memory_budget_mb"] = budget // MIB
    return out


def lift_memory_limit() -> None:
    """The memory limit back to its hard value (a session loading more of the kernel's state between runs: the
    next run's limit is set again from what the worker then holds)."""
    try:
        import resource
    except ImportError:
        return
    name = "RLIMIT_DATA" if sys.platform.startswith("linux") else "RLIMIT_AS"
    which = getattr(resource, name, None)
    if which is None:
        return
    try:
        _soft, hard = resource.getrlimit(which)
        resource.setrlimit(which, (hard, hard))
    except (OSError, ValueError):
        pass
