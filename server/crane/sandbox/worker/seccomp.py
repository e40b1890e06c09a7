"""Portable sandbox, worker side (Linux): a seccomp-bpf filter that keeps the worker's process controls to itself.

Landlock (worker/linux.py) has no rule for the calls that change ANOTHER process's scheduling, limits or memory
without a signal: a cell that switched the Python layers off (or reached libc through `ctypes`) could re-nice, pin,
re-schedule, re-limit or migrate the user's kernel, which runs as the same user. `confine_process_controls()` adds,
under Landlock and after no_new_privs, a filter that allows these calls only on the calling process (pid argument 0:
every process of the run, children included, names itself this way) or on the worker by its pid, and answers EPERM
otherwise:
- `setpriority` (PRIO_PROCESS; PRIO_PGRP only where the worker leads its own process group; PRIO_USER never: every
  process of the user), `ioprio_set` (the same three scopes), `sched_setaffinity`, `sched_setscheduler`,
  `sched_setparam`, `sched_setattr`, `migrate_pages`, `move_pages`, `process_vm_readv`/`writev`;
- `prlimit64` with a new limit (reading another process's limits stays allowed);
- `ptrace`, `pidfd_getfd` and `process_madvise` entirely (they name their target by a pidfd the filter cannot read,
  or are a debugger's), and the setters of the machine's clock and names (`settimeofday`, `clock_settime`,
  `sethostname`, `setdomainname`: a root kernel's worker reached them; its capabilities are also dropped);
- the other ABIs of the machine (i386 through `int 0x80`, x32 numbers, arm32 compat): every call refused, since
  their numbers differ from the table checked here.
Syscall tables for x86_64 and aarch64 (both little-endian). Elsewhere nothing is installed and the result says
why; the verdict names "seccomp" only when the filter was installed. Every thread the worker already runs gets the
filter too (SECCOMP_FILTER_FLAG_TSYNC through the seccomp() syscall); threads and processes started later inherit
it. What it cannot tell apart: a thread of the worker named by its thread id, and a child named by its pid (both
refused: honest code names itself with 0; glibc's pthread_setaffinity_np names the thread, so pinning a thread
other than the main one by that call gets EPERM). Signals are Landlock's (ABI 6 scopes them) and the Python layers'.
Standard library only (`ctypes`, `os`, `platform`, `struct`, `sys`); shipped in the transplant worker's module.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
from typing import Any

SECCOMP_LAYER = "seccomp"
_PC_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_PC_MACHINE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
# name -> number, per architecture (x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: asm-generic/unistd.h)
PC_SYSCALLS = {
    "x86_64": {"ptrace": 101, "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144,
               "sched_setaffinity": 203, "ioprio_set": 251, "migrate_pages": 256, "move_pages": 279,
               "prlimit64": 302, "process_vm_readv": 310, "process_vm_writev": 311, "sched_setattr": 314,
               "seccomp": 317, "pidfd_getfd": 438, "process_madvise": 440, "settimeofday": 164,
               "sethostname": 170, "setdomainname": 171, "clock_settime": 227},
    "aarch64": {"ioprio_set": 30, "ptrace": 117, "sched_setparam": 118, "sched_setscheduler": 119,
                "sched_setaffinity": 122, "setpriority": 140, "migrate_pages": 238, "move_pages": 239,
                "prlimit64": 261, "process_vm_readv": 270, "process_vm_writev": 271, "sched_setattr": 274,
                "seccomp": 277, "pidfd_getfd": 438, "process_madvise": 440, "clock_settime": 112,
                "sethostname": 161, "setdomainname": 162, "settimeofday": 170},
}
_PC_X32_BIT = 0x40000000  # x86_64's x32 ABI: the same arch value, numbers from this bit up
# which calls name their target how: the argument holding a pid, and for setpriority/ioprio_set the scope argument
_PC_BY_PID = ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "migrate_pages",
              "move_pages", "process_vm_readv", "process_vm_writev")
_PC_SCOPED = {"setpriority": (0, 1, 2), "ioprio_set": (1, 2, 3)}  # (PROCESS, PGRP, USER) values of the first arg
# (round 14, h4: the machine's clock and names, which a root kernel's worker set; its capabilities are dropped too,
# worker/linux.py, but a thread that existed before keeps them)
_PC_DENIED = ("ptrace", "pidfd_getfd", "process_madvise", "settimeofday", "clock_settime", "sethostname",
              "setdomainname")

# classic BPF
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_GET_NO_NEW_PRIVS = 22, 2, 39


def pc_arch() -> str | None:
    """The architecture whose table applies to this process (None: not Linux, big-endian, or not in the tables)."""
    if not sys.platform.startswith("linux") or sys.byteorder != "little" or struct.calcsize("P") != 8:
        return None
    return _PC_MACHINE.get(platform.machine().lower())


class _PcProgram:
    """A classic BPF program with forward jumps to labels (resolved by `code`)."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, Any, Any, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.ops.append((_BPF_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, yes: Any = 0, no: Any = 0) -> None:
        self.ops.append((op, yes, no, k))

    def ret(self, value: int) -> None:
        self.ops.append((_BPF_RET_K, 0, 0, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ops)

    def code(self) -> bytes:
        out = b""
        for i, (op, yes, no, k) in enumerate(self.ops):
            jt, jf = (self.labels[j] - i - 1 if isinstance(j, str) else j for j in (yes, no))
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise ValueError("a BPF jump out of range")
            out += struct.pack("=HBBI", op, jt, jf, k & 0xFFFFFFFF)
        return out


def _pc_arg_lo(i: int) -> int:
    return 16 + 8 * i  # struct seccomp_data: nr, arch, instruction_pointer, args[6] (little-endian: low word first)


def build_process_controls_filter(arch: str, pid: int, own_group: bool) -> bytes:
    """The filter (struct sock_filter[] bytes) for `arch`, allowing the calls on pid 0 and `pid`; `own_group`: the
    process leads its own process group (then PRIO_PGRP / IOPRIO_WHO_PGRP of 0 or `pid` are its own too)."""
    table = PC_SYSCALLS[arch]
    deny = _RET_ERRNO | errno.EPERM
    p = _PcProgram()
    p.load(4)  # arch
    p.jump(_BPF_JEQ_K, _PC_AUDIT_ARCH[arch], 0, "deny")
    p.load(0)  # nr
    if arch == "x86_64":
        p.jump(_BPF_JGE_K, _PC_X32_BIT, "deny", 0)
    for name in _PC_BY_PID:
        p.jump(_BPF_JEQ_K, table[name], f"pid:{name}", 0)
    for name in _PC_SCOPED:
        p.jump(_BPF_JEQ_K, table[name], f"scope:{name}", 0)
    p.jump(_BPF_JEQ_K, table["prlimit64"], "prlimit", 0)
    for name in _PC_DENIED:
        p.jump(_BPF_JEQ_K, table[name], "deny", 0)
    p.ret(_RET_ALLOW)

    def own_pid(arg: int) -> None:  # args[arg] is 0 or the worker's pid: allow, else deny
        p.load(_pc_arg_lo(arg))
        p.jump(_BPF_JEQ_K, 0, "allow", 0)
        p.jump(_BPF_JEQ_K, pid, "allow", "deny")

    for name in _PC_BY_PID:
        p.label(f"pid:{name}")
        own_pid(0)
    for name, (process, group, _user) in _PC_SCOPED.items():
        p.label(f"scope:{name}")
        p.load(_pc_arg_lo(0))
        if own_group:
            p.jump(_BPF_JEQ_K, process, f"who:{name}", 0)
            p.jump(_BPF_JEQ_K, group, f"who:{name}", "deny")
        else:
            p.jump(_BPF_JEQ_K, process, f"who:{name}", "deny")
        p.label(f"who:{name}")
        own_pid(1)
    p.label("prlimit")  # prlimit64(pid, resource, new_limit, old_limit): reading is allowed on any process
    p.load(_pc_arg_lo(2))
    p.jump(_BPF_JEQ_K, 0, 0, "prlimit_pid")
    p.load(_pc_arg_lo(2) + 4)
    p.jump(_BPF_JEQ_K, 0, "allow", 0)
    p.label("prlimit_pid")
    own_pid(0)
    p.label("allow")
    p.ret(_RET_ALLOW)
    p.label("deny")
    p.ret(deny)
    return p.code()


def confine_process_controls() -> dict[str, Any]:
    """Install the filter on this process and every thread it runs (see the module docstring), after no_new_privs
    (the caller's, worker/linux.py). Never raises: returns {"ran": True, ...} or {"ran": False, "why": ...}."""
    arch = pc_arch()
    if arch is None:
        return {"ran": False, "why": f"no syscall table for {platform.machine() or sys.platform} here: Landlock alone"}
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        if libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
            return {"ran": False, "why": "no_new_privs is not set"}
        pid = os.getpid()
        code = build_process_controls_filter(arch, pid, os.getpgrp() == pid)
        buf = ctypes.create_string_buffer(code, len(code))
        prog = struct.pack("=HxxxxxxQ", len(code) // 8, ctypes.addressof(buf))
        pbuf = ctypes.create_string_buffer(prog, len(prog))
        rc = libc.syscall(ctypes.c_long(PC_SYSCALLS[arch]["seccomp"]), ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                          ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), pbuf)
        threads = "all (TSYNC)"
        if rc < 0 and ctypes.get_errno() in (errno.ENOSYS, errno.EINVAL):  # no seccomp() or no TSYNC: this thread
            rc = libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, pbuf, 0, 0)
            threads = "the calling thread and those it starts"
        if rc != 0:
            e = ctypes.get_errno() if rc < 0 else 0
            why = os.strerror(e) if rc < 0 else f"thread {rc} could not take the filter"
            return {"ran": False, "why": f"seccomp: {why}"}
    except (OSError, AttributeError, ValueError) as exc:
        return {"ran": False, "why": f"seccomp: {exc}"}
    return {"ran": True, "arch": arch, "pid": pid, "threads": threads, "instructions": len(code) // 8,
            "controls": "setpriority, ioprio_set, sched_set*, prlimit64 (setting), migrate/move_pages, "
                        "process_vm_*: this process only; ptrace, pidfd_getfd, process_madvise, the clock's and "
                        "host names' setters refused"}
