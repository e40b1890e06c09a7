"""Kernel-enforced confinement of a forked sandbox child: Landlock, seccomp-BPF and resource limits.

Standard library only (`ctypes`, `os`, `resource`): this file's text is sent into the user's kernel as part
of the sandbox's kernel-side module (see `kernel/common.py`) and runs only inside the forked child, after the
fork and before any user code. Nothing here is ever called in the user's kernel process itself.

Two profiles, each enforced by the Linux kernel (not by Python, so C extensions and `ctypes` cannot bypass them):

* `layered` (the child lives in its own user, mount, pid and IPC namespaces, the file system is read-only
  except for private copy-on-write layers, see `kernel/layer.py`): processes and programs are allowed (fork, exec,
  clone without namespace flags), sockets only of the AF_UNIX family; still refused: new namespaces, mounts,
  ptrace and cross-process memory access, modules, kexec, bpf, perf, io_uring, keyrings, clock and host
  settings, changing identity. Landlock allows write-type rights only below the private layers and on a few
  harmless devices (execute stays allowed, so worker processes can exec), TCP bind/connect are denied (ABI >=
  4), signals and abstract UNIX sockets are scoped to the sandbox (ABI >= 6).
* `blocking` (the fallback where namespaces are unavailable): additionally refuses exec of programs, creation
  of processes (thread clones stay allowed for BLAS/OpenMP), every socket, signals to other processes,
  chmod/chown/utime/xattr, SysV IPC, setting resource limits; Landlock allows writes only below the private
  scratch directory (without Landlock the filter refuses every write-type open, unlink, rename, mkdir, ...).

Both: the architecture is checked inside the filter (x32 numbers refused), TIOCSTI/TIOCLINUX refused.
rlimits: CPU seconds, address space (what the process maps now plus a budget), file size, no core files, and
(layered) a bound on the number of processes.

Every error is returned as an `OSError`-raising Python exception from `confine()`; the caller must not run
user code when it raises.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import platform
import resource
import struct
from typing import Any

from crane.sandbox.kernel.landlock import apply_landlock, landlock_abi  # kernel: strip

# -- syscall numbers (x86_64) -----------------------------------------------------------------------------
_NR = dict(
    read=0, write=1, open=2, close=3, lseek=8, mmap=9, ioctl=16, pread64=17, pwrite64=18, readv=19, writev=20,
    shmget=29, shmat=30, shmctl=31, dup2=33, sendfile=40, socket=41, connect=42, accept=43, sendto=44,
    recvfrom=45, sendmsg=46, recvmsg=47, bind=49, listen=50, socketpair=53, clone=56, fork=57, vfork=58, execve=59, kill=62,
    semget=64, semop=65, semctl=66, msgget=68, msgsnd=69, msgrcv=70, msgctl=71, truncate=76, ftruncate=77,
    rename=82, mkdir=83, rmdir=84, creat=85, link=86, unlink=87, symlink=88, chmod=90, fchmod=91, chown=92,
    fchown=93, lchown=94, fcntl=72, flock=73, sched_setparam=142, sched_setscheduler=144, sched_setaffinity=203, sched_setattr=314, ptrace=101, syslog=103, setuid=105, setgid=106, setreuid=113, setregid=114,
    setgroups=116, setresuid=117, setresgid=119, setfsuid=122, setfsgid=123, capset=126,
    rt_sigqueueinfo=129, utime=132, mknod=133, setpriority=141, vhangup=153, pivot_root=155, adjtimex=159,
    setrlimit=160, chroot=161, acct=163, settimeofday=164, mount=165, umount2=166, swapon=167, swapoff=168,
    reboot=169, sethostname=170, setdomainname=171, iopl=172, ioperm=173, init_module=175,
    delete_module=176, quotactl=179, setxattr=188, lsetxattr=189, fsetxattr=190, removexattr=197,
    lremovexattr=198, fremovexattr=199, tkill=200, semtimedop=220, clock_settime=227, tgkill=234, utimes=235,
    mq_open=240, mq_unlink=241, mq_timedsend=242, mq_timedreceive=243, mq_notify=244, mq_getsetattr=245,
    kexec_load=246, add_key=248, request_key=249, keyctl=250, ioprio_set=251, migrate_pages=256, openat=257,
    mkdirat=258, mknodat=259, fchownat=260, futimesat=261, unlinkat=263, renameat=264, linkat=265,
    symlinkat=266, fchmodat=268, splice=275, tee=276, vmsplice=278, move_pages=279, unshare=272, utimensat=280,
    fallocate=285, accept4=288, dup3=292, preadv=295, pwritev=296, rt_tgsigqueueinfo=297,
    perf_event_open=298, recvmmsg=299, fanotify_init=300, fanotify_mark=301, prlimit64=302,
    name_to_handle_at=303, open_by_handle_at=304, clock_adjtime=305, sendmmsg=307, setns=308,
    process_vm_readv=310, process_vm_writev=311, kcmp=312, finit_module=313, renameat2=316, kexec_file_load=320,
    bpf=321, execveat=322, userfaultfd=323, copy_file_range=326, preadv2=327, pwritev2=328,
    pidfd_send_signal=424, io_uring_setup=425, io_uring_enter=426, io_uring_register=427, open_tree=428,
    move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, clone3=435, openat2=437,
    pidfd_getfd=438, process_madvise=440, mount_setattr=442, process_mrelease=448, fchmodat2=452,
)

# Refused (EPERM) in both profiles: other processes' memory, namespaces and mounts, the machine's state.
_DENY_ALWAYS = (
    "ptrace process_vm_readv process_vm_writev pidfd_getfd process_madvise process_mrelease kcmp "
    "mount umount2 pivot_root chroot setns unshare reboot init_module finit_module delete_module kexec_load "
    "kexec_file_load bpf perf_event_open swapon swapoff acct settimeofday clock_settime clock_adjtime adjtimex "
    "sethostname setdomainname iopl ioperm quotactl keyctl add_key request_key userfaultfd io_uring_setup "
    "io_uring_enter io_uring_register open_by_handle_at name_to_handle_at fanotify_init fanotify_mark "
    "open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr setuid setgid setreuid setregid "
    "setresuid setresgid setgroups setfsuid setfsgid capset migrate_pages move_pages syslog vhangup"
).split()
# Refused only in the blocking profile: programs, processes, networking, signals to other processes. (`socketpair`
# is refused there but for AF_UNIX: a connected pair inside the process, which reaches no one — the profile refuses
# `connect`, `bind`, named sockets and processes — and what every asyncio event loop makes for its self-pipe, so an
# awaited statement runs; issue 41.)
_DENY_BLOCKING = (
    "execve execveat fork vfork socket connect bind listen accept accept4 tkill pidfd_send_signal "
    "mknod mknodat shmget shmat shmctl semget semop semctl semtimedop msgget msgsnd msgrcv msgctl mq_open "
    "mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr setpriority ioprio_set setrlimit"
).split()
# Metadata writes Landlock does not cover: refused unless the rest of the file system is mounted read-only.
_DENY_METADATA = (
    "chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat utime utimes futimesat utimensat setxattr "
    "lsetxattr fsetxattr removexattr lremovexattr fremovexattr"
).split()
# Refused only when Landlock is not available to confine them to the scratch directory (blocking profile).
_DENY_WITHOUT_LANDLOCK = (
    "creat unlink unlinkat rename renameat renameat2 mkdir mkdirat rmdir truncate link linkat symlink symlinkat "
    "openat2"
).split()

AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
CLONE_THREAD = 0x00010000
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
AF_UNIX, AF_NETLINK = 1, 16
TIOCSTI, TIOCLINUX, TIOCCONS = 0x5412, 0x541C, 0x541D
# ioctl requests a cell may make (every other one is refused: freezing or shutting down a file system, file
# flags such as chattr +i, device and network configuration, setting a descriptor's signal owner): the
# terminal family 0x5401-0x5460 but for keystroke injection and console redirection, pseudo-terminal set-up,
# descriptor flags and queue sizes, reading file flags, extents and block sizes, reflink copies (their target
# is a descriptor open for writing, which Landlock and the layers govern), reading interface facts.
IOCTL_RANGE = (0x5401, 0x5460)
IOCTL_ALLOWED = (
    0x80045430, 0x40045431, 0x80045432, 0x802C542A, 0x402C542B, 0x402C542C, 0x402C542D,  # TIOCGPTN..TCSETS2
    0x2, 0x80086601, 0x80046601, 0xC020660B, 0x40049409, 0x4020940D, 0xC0189436,  # FIGETBSZ, FS_IOC_GETFLAGS,
    0x80081272, 0x1268, 0x4B33,  # FIEMAP, FICLONE(RANGE), FIDEDUPERANGE, BLKGETSIZE64, BLKSSZGET, KDGKBTYPE
    0x8910, 0x8912, 0x8913, 0x8915, 0x8921, 0x8927, 0x8933, 0x8906, 0x8907,  # SIOCGIF*, SIOCGSTAMP(NS)
)
# fcntl: record locks and flock() become no-ops that succeed (a lock the sandbox took would reach the real
# file: another process's lock, or the user's own INSERT through the kernel's sqlite connection, would fail
# while the run lasts); a descriptor's signal owner, signal, lease and directory notifications are refused
# (a signal routed to another process, the user's kernel included, where Landlock cannot scope signals).
F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW = 6, 7, 37, 38
F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY = 8, 10, 15, 1024, 1026
SCHED_FIFO, SCHED_RR, SCHED_DEADLINE, SCHED_RESET_ON_FORK = 1, 2, 6, 0x40000000
_WRITE_OPEN_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# BPF
_LD_W_ABS, _JEQ, _JGE, _JGT, _JSET, _RET, _ALU_AND_K = 0x20, 0x15, 0x35, 0x25, 0x45, 0x06, 0x54
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS, RET_USER_NOTIF = 0x7FFF0000, 0x00050000, 0x80000000, 0x7FC00000
_OFF_NR, _OFF_ARCH = 0, 4


def _arg_lo(i: int) -> int:
    return 16 + 8 * i  # low 32 bits of args[i] (little endian)


def _arg_hi(i: int) -> int:
    return 16 + 8 * i + 4


class _Prog:
    """A tiny BPF assembler: instructions with symbolic forward jump targets, resolved at the end."""

    def __init__(self) -> None:
        self.ins: list[list] = []  # [code, jt, jf, k]; jt/jf are ints or label strings
        self.labels: dict[str, int] = {}
        self._n = 0

    def label(self) -> str:
        self._n += 1
        return f"L{self._n}"

    def here(self, name: str) -> None:
        self.labels[name] = len(self.ins)

    def ld(self, off: int) -> None:
        self.ins.append([_LD_W_ABS, 0, 0, off])

    def jmp(self, code: int, k: int, jt: int | str, jf: int | str) -> None:
        self.ins.append([code, jt, jf, k])

    def ret(self, k: int) -> None:
        self.ins.append([_RET, 0, 0, k])

    def alu_and(self, k: int) -> None:
        self.ins.append([_ALU_AND_K, 0, 0, k])

    def assemble(self) -> bytes:
        out = []
        for idx, (code, jt, jf, k) in enumerate(self.ins):
            offs = []
            for j in (jt, jf):
                if isinstance(j, str):
                    j = self.labels[j] - idx - 1
                if not 0 <= j <= 255:
                    raise ValueError("seccomp filter jump out of range")
                offs.append(j)
            out.append(struct.pack("=HBBI", code, offs[0], offs[1], k & 0xFFFFFFFF))
        return b"".join(out)


def build_filter(
    *,
    profile: str = "blocking",
    own_pid: int | None = None,
    landlock: bool = True,
    metadata_ok: bool = False,
    fork_gate: int | None = None,
    errno_value: int = _errno.EPERM,
    notify_network: bool = False,
) -> bytes:
    """The seccomp-BPF program (raw `struct sock_filter` array) for a sandbox child.

    `profile`: "layered" (processes, programs and AF_UNIX sockets allowed; the child is in its own namespaces)
    or "blocking" (all of those refused, but for an AF_UNIX `socketpair`: asyncio's self-pipe).
    `own_pid`: blocking profile: the only process signals may target (besides what Landlock scopes allow).
    `landlock`: Landlock confines file-system writes; without it (blocking profile) they are refused here.
    `metadata_ok`: chmod/chown/utime/xattr allowed (the layered profile, when everything outside the private
    layers is mounted read-only, so they fail there with EROFS).
    `notify_network`: a socket of another family than AF_UNIX (and AF_NETLINK) goes to the filter's listener
    (SECCOMP_RET_USER_NOTIF: the supervising process — A in the layered profile, the daemon in the blocking
    one — records the attempt, whichever process or thread made it, and refuses it with EPERM) instead of
    being refused silently.
    `fork_gate`: blocking profile: if set, `clone(SIGCHLD, 0, fork_gate, ...)` is allowed (sandbox-session
    checkpoints; the kernel ignores the parent-tid argument without CLONE_PARENT_SETTID, so it can carry a
    secret).
    """
    layered = profile == "layered"
    if profile not in ("layered", "blocking"):
        raise ValueError(f"unknown seccomp profile {profile!r}")
    deny = RET_ERRNO | (errno_value & 0xFFFF)
    p = _Prog()
    p.ld(_OFF_ARCH)
    p.jmp(_JEQ, AUDIT_ARCH_X86_64, 1, 0)
    p.ret(RET_KILL_PROCESS)  # another architecture's syscall numbers: never interpret them
    p.ld(_OFF_NR)
    p.jmp(_JGE, _X32_BIT, 0, 1)
    p.ret(deny)  # x32 ABI

    def simple(names: list[str], action: int) -> None:
        for name in names:
            nxt = p.label()
            p.ld(_OFF_NR)
            p.jmp(_JEQ, _NR[name], 0, nxt)
            p.ret(action)
            p.here(nxt)

    simple(_DENY_ALWAYS, deny)
    if not layered:
        if notify_network:  # a network socket goes to the daemon, which records the attempt and refuses it
            nxt = p.label()
            p.ld(_OFF_NR)
            p.jmp(_JEQ, _NR["socket"], 0, nxt)
            p.ld(_arg_lo(0))
            quiet = p.label()
            p.jmp(_JEQ, AF_UNIX, quiet, 0)
            p.jmp(_JEQ, AF_NETLINK, quiet, 0)  # interface lookups by libc
            p.ret(RET_USER_NOTIF)
            p.here(quiet)
            p.ret(deny)
            p.here(nxt)
        nxt = p.label()  # socketpair: AF_UNIX only (asyncio's self-pipe; see _DENY_BLOCKING)
        p.ld(_OFF_NR)
        p.jmp(_JEQ, _NR["socketpair"], 0, nxt)
        p.ld(_arg_lo(0))
        pair = p.label()
        p.jmp(_JEQ, AF_UNIX, pair, 0)
        p.ret(deny)
        p.here(pair)
        p.ret(RET_ALLOW)
        p.here(nxt)
        simple(_DENY_BLOCKING, deny)
        if not landlock:
            simple(_DENY_WITHOUT_LANDLOCK, deny)
    if not (layered and metadata_ok):
        simple(_DENY_METADATA, deny)
    simple(["clone3"], RET_ERRNO | _errno.ENOSYS)  # glibc then falls back to clone(), whose flags we can see

    nxt = p.label()
    p.ld(_OFF_NR)
    p.jmp(_JEQ, _NR["clone"], 0, nxt)
    p.ld(_arg_lo(0))
    allow = p.label()
    if layered:  # processes allowed, new namespaces not
        p.jmp(_JSET, CLONE_NEW_ANY, 0, allow)
    else:  # threads allowed; processes refused unless gated
        p.jmp(_JSET, CLONE_THREAD, allow, 0)
        if fork_gate is not None:
            refuse = p.label()
            gate = fork_gate & 0xFFFFFFFFFFFFFFFF
            p.jmp(_JEQ, 17, 0, refuse)  # exactly SIGCHLD: a plain fork
            p.ld(_arg_lo(2))
            p.jmp(_JEQ, gate & 0xFFFFFFFF, 0, refuse)
            p.ld(_arg_hi(2))
            p.jmp(_JEQ, gate >> 32, allow, refuse)
            p.here(refuse)
    p.ret(deny)
    p.here(allow)
    p.ret(RET_ALLOW)
    p.here(nxt)

    if layered:  # sockets: the AF_UNIX family only (worker pipes, fd passing); the network stays closed
        for name in ("socket", "socketpair"):
            nxt = p.label()
            p.ld(_OFF_NR)
            p.jmp(_JEQ, _NR[name], 0, nxt)
            p.ld(_arg_lo(0))
            ok = p.label()
            p.jmp(_JEQ, AF_UNIX, ok, 0)
            if notify_network and name == "socket":  # netlink (interface lookups by libc) is refused quietly
                quiet = p.label()
                p.jmp(_JEQ, AF_NETLINK, quiet, 0)
                p.ret(RET_USER_NOTIF)
                p.here(quiet)
            p.ret(deny)
            p.here(ok)
            p.ret(RET_ALLOW)
            p.here(nxt)

    # Blocking profile: signals only to ourselves (sessions with Landlock >= 6 rely on its signal scoping
    # instead: their checkpoint children have other pids). The layered profile's pid namespace holds only the
    # sandbox's own processes.
    only = own_pid if own_pid is not None and not layered else None
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo") if only is not None else ():
        assert only is not None
        nxt = p.label()
        p.ld(_OFF_NR)
        p.jmp(_JEQ, _NR[name], 0, nxt)
        p.ld(_arg_lo(0))
        ok = p.label()
        p.jmp(_JEQ, only, ok, 0)
        p.ret(deny)
        p.here(ok)
        p.ret(RET_ALLOW)
        p.here(nxt)

    # ioctl: an allowlist (IOCTL_RANGE and IOCTL_ALLOWED; the request is the low 32 bits, as the kernel reads it).
    nxt = p.label()
    p.ld(_OFF_NR)
    p.jmp(_JEQ, _NR["ioctl"], 0, nxt)
    p.ld(_arg_lo(1))
    ok, bad = p.label(), p.label()
    for request in (TIOCSTI, TIOCLINUX, TIOCCONS):
        p.jmp(_JEQ, request, bad, 0)
    for request in IOCTL_ALLOWED:
        p.jmp(_JEQ, request, ok, 0)
    in_range = p.label()
    p.jmp(_JGE, IOCTL_RANGE[0], in_range, bad)
    p.here(in_range)
    p.jmp(_JGT, IOCTL_RANGE[1], bad, ok)
    p.here(bad)
    p.ret(deny)
    p.here(ok)
    p.ret(RET_ALLOW)
    p.here(nxt)

    # locks: no-ops that succeed; a descriptor's signal owner and friends: refused.
    simple(["flock"], RET_ERRNO | 0)
    nxt = p.label()
    p.ld(_OFF_NR)
    p.jmp(_JEQ, _NR["fcntl"], 0, nxt)
    p.ld(_arg_lo(1))
    noop, bad = p.label(), p.label()
    for cmd in (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW):
        p.jmp(_JEQ, cmd, noop, 0)
    for cmd in (F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE):
        p.jmp(_JEQ, cmd, bad, 0)
    p.jmp(_JEQ, F_NOTIFY, bad, nxt)
    p.here(noop)
    p.ret(RET_ERRNO | 0)
    p.here(bad)
    p.ret(deny)
    p.here(nxt)

    # scheduling: never a real-time policy; in the blocking profile (no pid namespace) only the calling thread
    # (pid 0, as os.sched_setaffinity(0, ...) and libraries say it) may be re-scheduled, so neither the user's
    # kernel nor another process can be (a thread naming itself by its id is refused: EPERM).
    nxt = p.label()
    p.ld(_OFF_NR)
    p.jmp(_JEQ, _NR["sched_setscheduler"], 0, nxt)
    p.ld(_arg_lo(1))
    p.alu_and(~SCHED_RESET_ON_FORK & 0xFFFFFFFF)
    bad = p.label()
    p.jmp(_JEQ, SCHED_FIFO, bad, 0)
    p.jmp(_JEQ, SCHED_RR, bad, 0)
    p.jmp(_JEQ, SCHED_DEADLINE, bad, nxt)
    p.here(bad)
    p.ret(deny)
    p.here(nxt)
    if not layered:
        for name in ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr"):
            nxt = p.label()
            p.ld(_OFF_NR)
            p.jmp(_JEQ, _NR[name], 0, nxt)
            p.ld(_arg_hi(0))
            bad, ok = p.label(), p.label()
            p.jmp(_JEQ, 0, 0, bad)
            p.ld(_arg_lo(0))
            p.jmp(_JEQ, 0, ok, bad)
            p.here(bad)
            p.ret(deny)
            p.here(ok)
            p.ret(RET_ALLOW)
            p.here(nxt)

    if not layered:  # prlimit64: reading limits is fine, setting them (new_limit != NULL) is not.
        nxt = p.label()
        p.ld(_OFF_NR)
        p.jmp(_JEQ, _NR["prlimit64"], 0, nxt)
        p.ld(_arg_lo(2))
        bad = p.label()
        p.jmp(_JEQ, 0, 0, bad)
        p.ld(_arg_hi(2))
        p.jmp(_JEQ, 0, nxt, bad)
        p.here(bad)
        p.ret(deny)
        p.here(nxt)

    if not layered and not landlock:  # write-type opens
        for name, argi in (("open", 1), ("openat", 2)):
            nxt = p.label()
            p.ld(_OFF_NR)
            p.jmp(_JEQ, _NR[name], 0, nxt)
            p.ld(_arg_lo(argi))
            p.jmp(_JSET, _WRITE_OPEN_FLAGS, 0, nxt)
            p.ret(deny)
            p.here(nxt)

    p.ret(RET_ALLOW)
    return p.assemble()


# -- ctypes plumbing ------------------------------------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38
SECCOMP_MODE_FILTER = 2


def _check(rc: int, what: str) -> int:
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return rc


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> str | None:
    """None when the seccomp layer can be built here, else the reason it cannot."""
    if not hasattr(os, "fork") or platform.system() != "Linux":
        return "the fork sandbox needs Linux"
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the seccomp filter is written for x86_64, not {platform.machine()}"
    return None


def set_no_new_privs() -> None:
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def set_parent_death_signal(sig: int) -> None:
    _check(_prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def install_filter(program: bytes, listener: bool = False) -> int:
    """Install the filter on the calling process; with `listener`, return its user-notification descriptor."""
    n = len(program) // 8
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(n, ctypes.cast(buf, ctypes.c_void_p))
    if listener:  # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog)
        return _check(_syscall(ctypes.c_long(317), ctypes.c_ulong(1), ctypes.c_ulong(8), ctypes.byref(prog)),
                      "seccomp filter with a listener")
    _check(_prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp filter")
    return -1


# -- capabilities --------------------------------------------------------------------------------------
# Kept where the process has them (a root kernel): the file-permission capabilities, so that opening, writing in
# the layers, chmod/chown there succeed exactly as in the real run (a root kernel writes into a directory without
# write bits). What they could reach is still confined: Landlock, read-only mounts, the layers, seccomp's
# metadata rules. Every other capability (SYS_ADMIN, SYS_NICE, LINUX_IMMUTABLE, NET_*, KILL, SETUID, ...) goes.
CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 0, 1, 2, 3
FILE_CAPS = (1 << CAP_CHOWN) | (1 << CAP_DAC_OVERRIDE) | (1 << CAP_DAC_READ_SEARCH) | (1 << CAP_FOWNER)
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


def _capabilities() -> tuple[int, int]:
    """(effective, permitted) of the calling thread."""
    data = (ctypes.c_uint32 * 6)()
    hdr = _CapHeader(0x20080522, 0)
    _check(_libc.capget(ctypes.byref(hdr), data), "capget")
    return data[0] | (data[3] << 32), data[1] | (data[4] << 32)


def drop_capabilities() -> str:
    """Every capability dropped from the bounding, ambient, inheritable, permitted and effective sets, but the
    file-permission ones (FILE_CAPS) where the process has them (a root kernel): file access then succeeds or
    fails as in the real run, inside the confinement; nothing privileged is left (no file-system freeze or
    shutdown, immutable flags, real-time scheduling, device or network configuration, signals to other users'
    processes, ...). Returns the effective set left, in hex."""
    eff, perm = _capabilities()
    keep = FILE_CAPS & eff & perm
    for cap in range(64):
        if not keep >> cap & 1:
            _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails past the last capability, or without CAP_SETPCAP
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    data = (ctypes.c_uint32 * 6)()
    data[0], data[1] = keep, keep  # effective, permitted (low word); inheritable and high words zero
    hdr = _CapHeader(0x20080522, 0)
    _check(_libc.capset(ctypes.byref(hdr), data), "dropping capabilities")
    return hex(_capabilities()[0])


# -- resource limits -----------------------------------------------------------------------------------
def _vm_size_bytes() -> int:
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def set_limits(cpu_s: float, memory_mb: int, file_mb: int, nproc: int | None = None, vm_floor_mb: int = 0) -> int:
    """CPU seconds (SIGXCPU, then SIGKILL one second later), address space = max(now, `vm_floor_mb`) + memory_mb
    (the floor: a transplant worker's kernel's size less the copy that `memory_mb` counts, so the worker gets what
    a fork of the kernel gets), file size,
    no core dumps, and (if given) at most `nproc` processes (counted per user namespace: the sandbox's own; not
    enforced for root, whose bound is the pid namespace's pid_max). Returns the address-space limit."""
    cpu = max(1, int(cpu_s + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    as_limit = max(_vm_size_bytes(), max(0, int(vm_floor_mb)) * 1024 * 1024) + int(memory_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    fsz = int(file_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsz, fsz))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return as_limit


_FILTERS: dict = {}  # build_filter's programs that do not depend on the child (no pid, no gate), by arguments


def cached_filter(**kw: Any) -> bytes:
    """`build_filter(**kw)`, kept for the next runs when it does not depend on the child (assembling a program
    in Python costs about a millisecond; the kernel builds the common ones once, before forking)."""
    if kw.get("own_pid") is not None or kw.get("fork_gate") is not None:
        return build_filter(**kw)
    key = tuple(sorted(kw.items()))
    prog = _FILTERS.get(key)
    if prog is None:
        prog = _FILTERS[key] = build_filter(**kw)
    return prog


def prebuild_filters() -> None:
    """In the kernel, before forking: the programs a child will most likely need (Landlock >= 6 scopes
    signals, so they do not name the child's pid)."""
    if supported() is not None or landlock_abi() < 6:
        return
    for notify in (True, False):
        cached_filter(profile="blocking", own_pid=None, landlock=True, metadata_ok=False, fork_gate=None,
                      notify_network=notify)
    for notify in (True, False):
        cached_filter(profile="layered", own_pid=None, landlock=True, metadata_ok=True, fork_gate=None,
                      notify_network=notify)


DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full")  # writable in every profile (no side effect)
PTY_FILES = ("/dev/ptmx",)  # layered profile with a private devpts instance (see kernel/layer.py)


def confine(
    *,
    writable: list[str],
    cpu_s: float,
    memory_mb: int,
    file_mb: int = 64,
    profile: str = "blocking",
    metadata_ok: bool = False,
    nproc: int | None = None,
    fork_gate: int | None = None,
    notify_network: bool = False,
    vm_floor_mb: int = 0,
) -> dict:
    """Apply every layer to the calling (single-threaded, forked) process. Raises OSError if any layer the
    sandbox relies on cannot be applied. `writable`: the directories where writes are allowed (the scratch
    directory; in the layered profile the private layers). `metadata_ok`: the rest of the file system is
    mounted read-only (layered), so chmod/chown/utime/xattr need no seccomp rule. Returns a summary."""
    why = supported()
    if why:
        raise OSError(_errno.ENOSYS, why)
    layered = profile == "layered"
    as_limit = set_limits(cpu_s, memory_mb, file_mb, nproc, vm_floor_mb)
    set_no_new_privs()
    abi = landlock_abi()
    if abi:
        files = DEVICE_FILES + (PTY_FILES if layered and "/dev/pts" in writable else ())
        apply_landlock(writable, abi, files=files, handle_execute=not layered)
    elif layered and not metadata_ok:
        raise OSError(_errno.ENOSYS, "neither Landlock nor a read-only file system confines writes")
    own_pid = None if abi >= 6 else os.getpid()  # Landlock >= 6 scopes signals to the sandbox already
    notify = notify_network
    caps = drop_capabilities()
    listener = install_filter(cached_filter(profile=profile, own_pid=own_pid, landlock=bool(abi),
                                            metadata_ok=metadata_ok, fork_gate=fork_gate, notify_network=notify),
                              listener=notify)
    return {"landlock_abi": abi, "seccomp": True, "as_limit": as_limit, "profile": profile, "listener": listener,
            "capabilities": caps}
