"""The portable worker's seccomp filter (worker/seccomp.py): other processes' scheduling, limits and memory.

- The program for x86_64 AND aarch64, run through a classic-BPF interpreter written here against seccomp_data
  made up for each call (so the aarch64 table is checked on this x86_64 machine): pid 0 and the worker's own pid
  allowed, any other pid EPERM, PRIO_USER never, reading another process's limits allowed, setting them not,
  ptrace refused, a foreign ABI (i386, x32, arm32) refused, every other call allowed. The tables are compared
  with the kernel headers where the machine has them.
- For real (Linux with Landlock, this machine's architecture): a process that confined itself with
  `confine_worker` (Landlock + seccomp, NO Python layer) calls libc directly against a real ipykernel kernel:
  setpriority, sched_setaffinity, sched_setscheduler, sched_setparam, ioprio_set, prlimit64, process_vm_writev,
  ptrace — from its main thread, from a thread that existed before the filter (TSYNC), and from a fork child;
  the kernel's nice value, affinity, policy, I/O priority and limits are unchanged, while the same calls on the
  process itself (pid 0, its own pid: os.nice, os.sched_setaffinity(0, ...)) work.
- End to end: a portable run names "seccomp" in its layers and honest self-calls inside the cell still work.
"""

from __future__ import annotations

import errno
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from crane.sandbox.worker.linux import linux_layer_available
from crane.sandbox.worker.seccomp import (
    _PC_AUDIT_ARCH,
    PC_SYSCALLS,
    build_process_controls_filter,
    pc_arch,
)

ALLOW, DENY = 0x7FFF0000, 0x00050000 | errno.EPERM
OWN = 4242


def run_bpf(code: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """A classic-BPF interpreter for what seccomp filters use here (ld [k], jeq/jge #k, ret #k)."""
    full = list(args) + [0] * (6 - len(args))
    data = struct.pack("=iIQ6Q", nr, arch, 0, *[a & 0xFFFFFFFFFFFFFFFF for a in full])
    ops = [struct.unpack_from("=HBBI", code, i) for i in range(0, len(code), 8)]
    pc, acc = 0, 0
    for _ in range(10_000):
        op, jt, jf, k = ops[pc]
        if op == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif op in (0x15, 0x35):
            hit = acc == k if op == 0x15 else acc >= k
            pc += 1 + (jt if hit else jf)
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected BPF op {op:#x}")
    raise AssertionError("the program does not end")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
@pytest.mark.parametrize("own_group", [True, False])
def test_the_filter_allows_the_worker_itself_and_refuses_every_other_process(arch, own_group):
    code = build_process_controls_filter(arch, OWN, own_group)
    nr, a = PC_SYSCALLS[arch], _PC_AUDIT_ARCH[arch]
    assert len(code) % 8 == 0 and len(code) // 8 < 4096

    def call(name, *args):
        return run_bpf(code, nr[name], a, args)

    for name in ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "migrate_pages",
                 "move_pages", "process_vm_readv", "process_vm_writev"):
        assert call(name, 0) == ALLOW and call(name, OWN) == ALLOW, name
        assert call(name, 1) == DENY and call(name, OWN + 1) == DENY and call(name, -1) == DENY, name
        assert call(name, OWN + (1 << 32)) == ALLOW, name  # a pid_t is the low word: what the kernel reads
    for name, (process, group, user) in (("setpriority", (0, 1, 2)), ("ioprio_set", (1, 2, 3))):
        assert call(name, process, 0) == ALLOW and call(name, process, OWN) == ALLOW
        assert call(name, process, 77) == DENY
        assert call(name, group, 0) == (ALLOW if own_group else DENY)
        assert call(name, group, 77) == DENY
        assert call(name, user, 0) == DENY and call(name, user, os.getuid()) == DENY  # every process of the user
        assert call(name, 9, 0) == DENY
    assert call("prlimit64", 77, 7, 0, 0x1000) == ALLOW  # reading another process's limits
    assert call("prlimit64", 77, 7, 0x1000, 0) == DENY and call("prlimit64", 77, 7, 1 << 40, 0) == DENY
    assert call("prlimit64", 0, 7, 0x1000, 0) == ALLOW and call("prlimit64", OWN, 7, 0x1000, 0) == ALLOW
    for name in ("ptrace", "pidfd_getfd", "process_madvise"):
        assert call(name, 0) == DENY and call(name, OWN) == DENY
    for other in (0, 1, 3, 39, 57, 59, 62, 435):  # read, write, open-ish, getpid, fork, exec, kill, clone3 ...
        if other not in nr.values():
            assert run_bpf(code, other, a, (77, 77, 77)) == ALLOW
    foreign = {"x86_64": 0x40000003, "aarch64": 0x40000028}[arch]  # AUDIT_ARCH_I386, AUDIT_ARCH_ARM
    assert run_bpf(code, nr["setpriority"], foreign, (0, 0)) == DENY and run_bpf(code, 20, foreign) == DENY
    if arch == "x86_64":
        assert run_bpf(code, 0x40000000 + 141, a, (0, 77)) == DENY  # x32's setpriority
        assert run_bpf(code, 0x40000000 + 39, a) == DENY


HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_tables_agree_with_the_kernel_headers(arch):
    path = HEADERS[arch] if HEADERS[arch].exists() else Path("/usr/include/asm/unistd_64.h")
    if arch == "aarch64" and not HEADERS[arch].exists():
        pytest.skip("no asm-generic/unistd.h here")
    if not path.exists():
        pytest.skip(f"no {path} here")
    text = path.read_text()
    for name, number in PC_SYSCALLS[arch].items():
        m = re.search(rf"#define __NR(?:3264)?_{name}\s+(\d+)\b", text)
        assert m and int(m.group(1)) == number, (arch, name, m and m.group(0))


LINUX = linux_layer_available() is None and pc_arch() is not None

RAW = r"""
import ctypes, json, os, sys, threading
from crane.sandbox.worker.linux import confine_worker
run, kpid = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": {"ioprio_set": 251, "process_vm_writev": 311}, "aarch64": {"ioprio_set": 30, "process_vm_writev": 271}}
from crane.sandbox.worker.seccomp import pc_arch
nr = NR[pc_arch()]
def rc(v):
    return "ok" if v >= 0 else os.strerror(ctypes.get_errno())
class Param(ctypes.Structure):
    _fields_ = [("prio", ctypes.c_int)]
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
def at(pid):
    mask = (ctypes.c_ulong * 16)(1)
    new = (ctypes.c_ulong * 2)(64, 64)
    buf = ctypes.create_string_buffer(8)
    local, remote = Iov(ctypes.addressof(buf), 8), Iov(0x10000, 8)
    return {
        "setpriority": rc(libc.setpriority(0, pid, 19)),
        "sched_setaffinity": rc(libc.sched_setaffinity(pid, ctypes.sizeof(mask), mask)),
        "sched_setscheduler": rc(libc.sched_setscheduler(pid, 5, ctypes.byref(Param(0)))),  # SCHED_IDLE
        "sched_setparam": rc(libc.sched_setparam(pid, ctypes.byref(Param(0)))),
        "ioprio_set": rc(libc.syscall(ctypes.c_long(nr["ioprio_set"]), 1, pid, (3 << 13))),  # IDLE class
        "prlimit set": rc(libc.prlimit(pid, 7, ctypes.byref(new), None)),
        "process_vm_writev": rc(libc.syscall(ctypes.c_long(nr["process_vm_writev"]), pid, ctypes.byref(local), 1,
                                             ctypes.byref(remote), 1, 0)),
        "ptrace attach": rc(libc.ptrace(16, pid, None, None)),
    }
ready, go, early = threading.Event(), threading.Event(), {}
def before():  # a thread that exists before the filter: TSYNC must reach it
    ready.set()
    go.wait()
    early.update(at(kpid))
t = threading.Thread(target=before)
t.start()
ready.wait()
info = confine_worker([run], [])
go.set()
t.join()
out = {"info": {k: info[k] for k in ("layers", "seccomp")}, "main": at(kpid), "thread": early}
old = (ctypes.c_ulong * 2)()
out["prlimit read"] = rc(libc.prlimit(kpid, 7, None, ctypes.byref(old)))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, json.dumps(at(kpid)).encode())
    os._exit(0)
os.close(w)
out["child"] = json.loads(os.read(r, 65536))
os.waitpid(pid, 0)
os.nice(1)
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
out["self"] = {"nice": os.getpriority(os.PRIO_PROCESS, 0), "affinity": sorted(os.sched_getaffinity(0)),
               "own pid": rc(libc.setpriority(0, os.getpid(), 19)),  # (raising one's own nice needs no capability)
               "sched_setscheduler 0": rc(libc.sched_setscheduler(0, 0, ctypes.byref(Param(0)))),
               "ioprio 0": rc(libc.syscall(ctypes.c_long(nr["ioprio_set"]), 1, 0, (2 << 13) | 4)),
               "prlimit 0": rc(libc.prlimit(0, 7, None, ctypes.byref(old)))}
print(json.dumps(out))
"""


def _state(pid: int) -> tuple:
    import psutil
    p = psutil.Process(pid)
    return (os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid)), os.sched_getscheduler(pid),
            os.sched_getparam(pid).sched_priority, tuple(p.ionice()), p.rlimit(psutil.RLIMIT_NOFILE))


@pytest.fixture(scope="module")
def kpid(workdir):
    from crane.kernel.manager import start_kernel
    kernel = start_kernel(workdir)
    try:
        yield kernel.connection.evaluate("__import__('os').getpid()")
    finally:
        kernel.shutdown()


@pytest.mark.skipif(not LINUX, reason="Linux with Landlock on an architecture with a seccomp table")
def test_with_no_python_layer_the_kernel_is_neither_reniced_pinned_limited_nor_traced(tmp_path, kpid):
    run = tmp_path / "run"
    run.mkdir()
    before = _state(kpid)
    res = subprocess.run([sys.executable, "-c", RAW, str(run), str(kpid)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["info"]["layers"] == ["landlock", "seccomp"] and out["info"]["seccomp"]["ran"], out["info"]
    assert out["info"]["seccomp"]["threads"] == "all (TSYNC)", out["info"]
    for who in ("main", "thread", "child"):
        assert out[who] and set(out[who].values()) == {os.strerror(errno.EPERM)}, (who, out[who])
    assert out["prlimit read"] == "ok"
    assert _state(kpid) == before  # nice, affinity, policy, priority, I/O priority, limits
    me = out["self"]
    assert me["nice"] >= 1 and len(me["affinity"]) == 1, me
    assert {k: v for k, v in me.items() if k not in ("nice", "affinity")} == dict.fromkeys(
        ("own pid", "sched_setscheduler 0", "ioprio 0", "prlimit 0"), "ok"), me


@pytest.mark.skipif(not LINUX, reason="Linux with Landlock on an architecture with a seccomp table")
def test_a_portable_run_names_the_filter_and_honest_self_calls_work(conn):
    from crane.sandbox import speculate
    from crane.sandbox.options import SandboxOptions
    # (os.nice itself is refused to the cell by the call guard's table, worker/guard.py: not the filter's doing)
    src = ("import os\nn = os.getpriority(os.PRIO_PROCESS, 0) + 1\nos.setpriority(os.PRIO_PROCESS, 0, n)\n"
           "os.sched_setaffinity(0, os.sched_getaffinity(0))\n"
           "os.setpriority(os.PRIO_PROCESS, os.getpid(), n)\nprint('ok', os.getpriority(os.PRIO_PROCESS, 0) == n)")
    v = speculate(conn, src, 60.0, sandbox=SandboxOptions(confinement="portable"))
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "ok True"), v
    assert v.transplant is not None and v.transplant.layers[-2:] == ["landlock", "seccomp"], v.transplant


def test_no_table_no_filter(monkeypatch):
    import crane.sandbox.worker.seccomp as sc
    monkeypatch.setattr(sc.platform, "machine", lambda: "riscv64")
    assert sc.pc_arch() is None
    got = sc.confine_process_controls()
    assert got["ran"] is False and "riscv64" in got["why"] and "Landlock alone" in got["why"]
