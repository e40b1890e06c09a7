"""Fork sandbox, kernel side: the private copy-on-write layer ("layered" mode).

The child forked from the kernel (call it A, single-threaded) creates the process that runs the cell (B) with
a raw clone(SIGCHLD | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET: no network
interface but a loopback that is down, and abstract UNIX sockets of its own), wrapped in CPython's
before/after-fork hooks. A writes B's uid/gid maps (root: the full identity map, so the sandbox is root as the
kernel is; another user: its own uid and gid), then lets B go and supervises it: it kills B at the wall-clock
deadline, ends B once it sees B's record sealed (kernel/common), writes how B ended into the private directory,
and exits. B is pid 1 of its own pid
namespace: when it ends (success, crash, deadline, or A's death through the parent-death signal) the Linux
kernel kills every process B started, so the whole process tree ends with the run.

B, with all capabilities in its own user namespace, builds the layer before any user code:
1. mounts private (nothing propagates back), the whole tree read-only (one recursive mount_setattr);
2. one size-bounded tmpfs (a detached mount: reachable only through the overlays) holds the upper layers;
3. an overlay over each writable place (the kernel's working directory and its top-level directory, $HOME,
   $TMPDIR, /tmp, /var/tmp, /dev/shm, $XDG_RUNTIME_DIR, extra places from the daemon), outer first, each with
   the real directory (an O_PATH descriptor opened before any mount) as its lower layer; mounts below a place
   are re-attached on top of its overlay (open_tree/move_mount), so the cell sees the same tree;
4. /dev/null bound over every UNIX socket bound outside the layers (listed by A from /proc/net/unix before the
   clone): a database server's, Docker's or D-Bus's socket cannot be reached by path, from Python or C;
5. a fresh /proc for the pid namespace with pid_max bounding the number of processes (read-only after), and
   a private devpts instance (pseudo-terminals for `!cmd`; the machine's terminals are out of reach).
Writes in those places succeed in the upper layer, later reads in the run see them, and the layer vanishes
with the namespace. Writes elsewhere fail with EROFS (and Landlock, see kernel/confine.py). Any failure: the caller
falls back to the blocking confinement and says why.
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import signal
import socket
import time
from collections.abc import Callable

from crane.sandbox.kernel.atfork import put_random_state, random_state  # kernel: strip
from crane.sandbox.kernel.common import await_seal  # kernel: strip
from crane.sandbox.kernel.shield import dumps  # kernel: strip
from crane.sandbox.shared.notify import answer_notification  # kernel: strip

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x08000000, 0x10000000, 0x20000000
CLONE_NEWNET = 0x40000000
_SIGCHLD = 17
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 16384, 1 << 18
_AT_FDCWD, _AT_EMPTY_PATH, _AT_RECURSIVE = -100, 0x1000, 0x8000
_OPEN_TREE_CLONE, _MOVE_MOUNT_F_EMPTY_PATH, _MOUNT_ATTR_RDONLY = 1, 0x4, 0x1
_FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE = 1, 6
_NR_OPEN_TREE, _NR_MOVE_MOUNT, _NR_FSOPEN, _NR_FSCONFIG, _NR_FSMOUNT, _NR_MOUNT_SETATTR = 428, 429, 430, 431, 432, 442
# The sandbox's pid namespace gets pid_max = RESERVED_PIDS + max_processes: after the first wrap Linux reuses
# pids from 300 (RESERVED_PIDS) up, so at most max_processes live processes and threads (before the first wrap,
# pid_max - 1); thread churn never exhausts it. Linux refuses a pid_max below 301.
RESERVED_PIDS = 300
MAX_PROCESSES = 1000


class LayerError(OSError):
    """The private layer could not be built (the caller falls back to blocking confinement)."""


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def _sys() -> tuple[Callable[..., int], Callable[..., int]]:
    libc = ctypes.CDLL(None, use_errno=True)
    sc = libc.syscall
    sc.restype = ctypes.c_long
    mount = libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return sc, mount


def _ok(rc: int, what: str) -> int:
    if rc < 0:
        e = ctypes.get_errno()
        raise LayerError(e, f"{what}: {os.strerror(e)}")
    return rc


def _top_level(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    return "/" + parts[0] if parts else "/"


def writable_places(cwd: str, extra: list[str] | tuple = ()) -> list[str]:
    """Directories that get a private layer, outer first: only existing directories the kernel itself may
    write to (the layer must not allow what the real run could not do)."""
    env = os.environ
    home = env.get("HOME") or os.path.expanduser("~")
    raw = [_top_level(cwd), cwd, *extra, home, env.get("TMPDIR"), "/tmp", "/var/tmp", "/dev/shm",
           env.get("XDG_RUNTIME_DIR")]
    out: list[str] = []
    for p in raw:
        if not p:
            continue
        rp = os.path.realpath(p)
        first = _top_level(rp)
        if rp == "/" or rp in out or (first in ("/proc", "/sys", "/dev") and not rp.startswith("/dev/shm")):
            continue
        if os.path.isdir(rp) and os.access(rp, os.W_OK):
            out.append(rp)
    return sorted(out, key=lambda p: (p.count("/"), p))


_TID_SCAN = 4096  # bytes of glibc's thread descriptor searched for the cached thread id


def _cached_tid_slot(libc: ctypes.CDLL) -> int | None:
    """The address of glibc's cached thread id in the calling (only) thread's descriptor: the one 4-byte slot
    of its first bytes holding the thread id (gettid), or None when it is not exactly one."""
    try:
        libc.pthread_self.restype = ctypes.c_void_p
        base = libc.pthread_self()
        tid = int(libc.syscall(186, 0, 0, 0, 0, 0))  # gettid
        if not base or tid <= 0:
            return None
        data = ctypes.string_at(base, _TID_SCAN)
    except (OSError, ValueError, AttributeError):
        return None
    want = tid.to_bytes(4, "little")
    hits = [off for off in range(0, _TID_SCAN - 3, 4) if data[off:off + 4] == want]
    return base + hits[0] if len(hits) == 1 else None


def clone_into_namespaces() -> int:
    """A raw clone into new user/mount/pid/IPC namespaces (the caller, A, must be single-threaded), wrapped
    in CPython's fork hooks. Returns the child's pid in A, 0 in the child (B).

    glibc's own fork updates the thread id it caches in the thread's descriptor; a raw clone does not, so in B
    it would still be A's (a number of no process in B's pid namespace): `pthread_getschedparam`,
    `pthread_setaffinity_np(pthread_self())` ... on B's main thread would fail (abseil logs "pthread_getschedparam
    failed" in every JAX run). The slot is found in A (the one that holds A's id) and set to B's id in B."""
    api = ctypes.pythonapi
    libc = ctypes.PyDLL(None, use_errno=True)
    sc = libc.syscall
    sc.restype = ctypes.c_long
    sc.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    slot = _cached_tid_slot(libc)
    rstate = random_state()  # (B draws what the kernel would: kernel/atfork.py)
    api.PyOS_BeforeFork()
    pid = sc(56, _SIGCHLD | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET, 0, 0, 0, 0)
    if pid == 0:
        if slot is not None:
            ctypes.c_int.from_address(slot).value = int(sc(186, 0, 0, 0, 0, 0))
        api.PyOS_AfterFork_Child()
        put_random_state(rstate)
        return 0
    err = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise LayerError(err, f"clone into new namespaces: {os.strerror(err)}")
    return pid


def write_id_maps(pid: int) -> None:
    """From A (outside B's user namespace): B's uid/gid maps."""
    uid, gid = os.geteuid(), os.getegid()
    maps: tuple[tuple[str, str], ...]
    if uid == 0:
        maps = (("uid_map", "0 0 4294967295\n"), ("gid_map", "0 0 4294967295\n"))
    else:
        maps = (("uid_map", f"{uid} {uid} 1\n"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1\n"))
    for name, text in maps:
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def supervise(pid: int, budget_s: float, result_fd: int, notif_sock: socket.socket | None = None,
              done_fd: int = -1, status_path: str | None = None) -> None:
    """A's life after the clone: wait for B, answer the sandbox's seccomp notifications (B sends the listener
    over `notif_sock`: network attempts are kept for the report), kill B at the deadline, and report how B ended in
    `status_path` (the private directory, where B cannot write: kernel/common's seal). A writes nothing on the
    channel (B's lines alone are there, as the seal names them) and closes its copy at once. When B says on
    `done_fd` that its record is out, A looks for B's seal in /proc and, when it is there, ends B itself."""
    if result_fd >= 0:
        os.close(result_fd)
    deadline = time.monotonic() + max(0.1, budget_s)
    killed = by_parent = False
    seal: tuple[int, int] | None = None
    checked: bool | None = None
    poll: float | None = None  # once B's wake-up pipe is gone: a look in /proc now and then
    denied: list[str] = []
    status = None
    listener = -1
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        pidfd = -1

    def report(info: dict) -> None:  # once: the first one written stands (a sealed B's, at once)
        if status_path is not None:
            try:
                fd = os.open(status_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, (dumps(info) + "\n").encode())
                finally:
                    os.close(fd)
            except OSError:
                pass  # the daemon already cleaned up, or the report is out already

    def look(within: float) -> None:
        nonlocal seal, checked, by_parent, poll
        found = await_seal(pid, within)
        if found is False:  # /proc/<B>/syscall is not ours to read: B's word is all there is (docs: unchecked)
            checked = False
        elif found is not None:
            checked, seal = True, found  # type: ignore[assignment]
        else:  # not in its wait yet (a loaded machine can hold it past the look): look again now and then
            checked = True if checked is None else checked
            poll = 0.02 if poll is None else poll
            return
        by_parent = True
        try:
            os.kill(pid, signal.SIGKILL)  # (B is not reaped yet: the pid is still B)
        except OSError:
            pass
        report({"deadline": False, "exitcode": None, "signal": int(signal.SIGKILL), "by_parent": True,
                "sealed": list(seal) if seal is not None else None, "checked": checked, "denied": denied})

    while True:
        left = deadline - time.monotonic()
        if pidfd >= 0:
            watch = [pidfd] + ([notif_sock] if notif_sock is not None else []) + ([listener] if listener >= 0 else []) \
                + ([done_fd] if done_fd >= 0 else [])
            try:
                ready = select.select(watch, [], [], max(0.0, min(left, poll) if poll is not None else left))[0]
            except InterruptedError:
                continue
            if notif_sock is not None and notif_sock in ready:
                try:
                    _, fds, _, _ = socket.recv_fds(notif_sock, 16, 1)
                except OSError:
                    fds = []
                listener = fds[0] if fds else -1
                notif_sock.close()
                notif_sock = None
            if listener >= 0 and listener in ready:
                answer_notification(listener, lambda what: denied.append(what) if len(denied) < 20 else None)
            if pidfd in ready:
                break
            if not by_parent and done_fd >= 0 and done_fd in ready:
                try:
                    word = os.read(done_fd, 64)
                except OSError:
                    word = b""
                if not word:  # closed (B's code may close it): look now and then until B ends
                    os.close(done_fd)
                    done_fd, poll = -1, 0.05
                look(0.25 if word else 0.0)
            elif poll is not None and not by_parent and not ready:
                look(0.0)
        else:
            got, st = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                status = st
                break
            time.sleep(min(0.02, max(0.0, left)))
        if time.monotonic() >= deadline and not killed and not by_parent:
            os.kill(pid, signal.SIGKILL)
            killed = True
    if status is None:
        _, status = os.waitpid(pid, 0)
    report({"deadline": killed, "exitcode": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, "sealed": None, "checked": checked,
            "by_parent": False, "denied": denied})


_OCTAL = re.compile(rb"\\([0-7]{3})")


def _mountpoints() -> list[str]:
    out = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split(b" ")
            if len(fields) > 4:
                point = _OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), fields[4])
                out.append(point.decode("utf-8", "surrogateescape"))
    return out


def _beneath(place: str, mounts: list[str]) -> list[str]:
    """The topmost mount points strictly below `place` (their own submounts travel with them)."""
    subs = sorted({m for m in mounts if m.startswith(place.rstrip("/") + "/")})
    top: list[str] = []
    for m in subs:
        if not any(m.startswith(t + "/") for t in top):
            top.append(m)
    return top


def _detached_tmpfs(sc: Callable[..., int], size_bytes: int) -> int:
    fs = _ok(sc(_NR_FSOPEN, b"tmpfs", 1), "fsopen(tmpfs)")
    try:
        for key, value in ((b"size", str(max(1 << 20, size_bytes)).encode()), (b"nr_inodes", b"262144"),
                           (b"mode", b"0755")):
            _ok(sc(_NR_FSCONFIG, fs, _FSCONFIG_SET_STRING, key, value, 0), "fsconfig(tmpfs)")
        _ok(sc(_NR_FSCONFIG, fs, _FSCONFIG_CMD_CREATE, None, None, 0), "fsconfig(create)")
        return _ok(sc(_NR_FSMOUNT, fs, 1, 0), "fsmount(tmpfs)")
    finally:
        os.close(fs)


def listening_unix_sockets() -> list[str]:
    """In A (still in the kernel's network namespace): the paths of the UNIX sockets bound on this machine
    (/proc/net/unix: a database server's, Docker's, D-Bus's, X11's), which B covers before any user code."""
    out: list[str] = []
    try:
        with open("/proc/net/unix", "rb") as f:
            next(f, None)
            for line in f:
                parts = line.split(None, 7)
                if len(parts) == 8 and parts[7].startswith(b"/"):
                    out.append(os.fsdecode(parts[7].rstrip(b"\n")))
    except OSError:
        pass
    return sorted(set(out))


def _cover_sockets(mount: Callable[..., int], sockets: list[str], places: list[str]) -> int:
    """Bind /dev/null over each socket path outside the private layers (inside one the overlay already hides
    the real socket: ECONNREFUSED), so connecting or sending to it by path from any process of the sandbox,
    a shell or a C library included, reaches nothing. Returns how many were covered."""
    covered = 0
    for path in sockets:
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in places):
            continue
        if mount(b"/dev/null", os.fsencode(path), None, 4096, None) == 0:  # MS_BIND
            covered += 1
    return covered


def build_layer(places: list[str], cwd: str, tmpfs_bytes: int, max_processes: int = MAX_PROCESSES,
                sockets: list[str] | tuple = ()) -> dict:
    """In B: the mounts described in the module docstring, then /dev/null over every UNIX socket bound outside
    the layers (`sockets`, listed by A). Returns what was built: the places that got a layer, whether the rest is
    read-only, whether pid_max bounds the processes, how many sockets were covered."""
    sc, mount = _sys()
    _ok(mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "making mounts private")
    lower = {p: os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for p in places}
    mounts = _mountpoints()
    attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    readonly = sc(_NR_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) == 0
    tmp = _detached_tmpfs(sc, tmpfs_bytes)
    layered: list[str] = []
    devs: set[int] = set()
    skipped: dict[str, str] = {}
    # A place inside another one's layer needs no layer of its own when every owner is mapped (root). For another
    # user, a write there would copy up the directories above it, owned by others (unmapped: EOVERFLOW), so each
    # place gets its own layer, whose root the user owns.
    share = os.geteuid() == 0
    try:
        for i, place in enumerate(places):
            try:
                st = os.stat(place)
                if share and st.st_dev in devs:
                    continue  # already inside one of our layers
                trees = [(m, _ok(sc(_NR_OPEN_TREE, _AT_FDCWD, m.encode(),
                                    _OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC), f"open_tree({m})"))
                         for m in _beneath(place, mounts)]
                up, work = f"/proc/self/fd/{tmp}/{i}u", f"/proc/self/fd/{tmp}/{i}w"
                os.mkdir(up, st.st_mode & 0o7777)
                os.mkdir(work, 0o700)
                os.chmod(up, st.st_mode & 0o7777)
                if os.geteuid() == 0:
                    os.chown(up, st.st_uid, st.st_gid)
                opts = f"lowerdir=/proc/self/fd/{lower[place]},upperdir={up},workdir={work},userxattr"
                _ok(mount(b"overlay", place.encode(), b"overlay", 0, opts.encode()), f"overlay on {place}")
                for m, tree in trees:
                    _ok(sc(_NR_MOVE_MOUNT, tree, b"", _AT_FDCWD, m.encode(), _MOVE_MOUNT_F_EMPTY_PATH),
                        f"re-attaching {m}")
                    os.close(tree)
                devs.add(os.stat(place).st_dev)
                layered.append(place)
            except OSError as exc:
                skipped[place] = str(exc)
    finally:
        os.close(tmp)
        for fd in lower.values():
            os.close(fd)
    if not layered:
        raise LayerError(0, "no private layer could be mounted: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    try:
        os.chdir(cwd)  # the working directory now resolves into its layer
    except OSError:
        pass  # a working directory this mount namespace cannot name: it keeps the real one (read-only)
    ptys = _private_ptys(mount)
    covered = _cover_sockets(mount, list(sockets), layered)
    pid_max = False
    if mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) == 0:
        try:
            with open("/proc/sys/kernel/pid_max", "w") as f:
                f.write(str(RESERVED_PIDS + max(1, int(max_processes))))
            pid_max = True
        except OSError:
            pass
        attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
        sc(_NR_MOUNT_SETATTR, _AT_FDCWD, b"/proc", 0, ctypes.byref(attr), ctypes.sizeof(attr))
    return {"places": layered, "readonly": readonly, "pid_max": pid_max, "ptys": ptys, "skipped": skipped,
            "sockets_covered": covered}


def _private_ptys(mount: Callable[..., int]) -> bool:
    """A new devpts instance on /dev/pts and its ptmx on /dev/ptmx: the cell's pseudo-terminals (IPython's
    `!cmd` runs through one) are its own, and the machine's terminals are out of reach."""
    if mount(b"devpts", b"/dev/pts", b"devpts", _MS_NOSUID | _MS_NOEXEC, b"newinstance,ptmxmode=0666,mode=0620") != 0:
        return False
    return mount(b"/dev/pts/ptmx", b"/dev/ptmx", None, 4096, None) == 0  # MS_BIND
