"""Fork sandbox, kernel side: the Python-level fence (an audit hook) in the child.

In front of the kernel-level confinement (`kernel/confine.py`): clear messages and a record of what the cell tried.
A refused operation raises `SandboxBlocked` (a PermissionError) before it starts.
- blocking mode: writes outside the scratch directory, programs, processes, sockets, signals to other
  processes and resource limits are refused;
- layered mode: writes inside the private layers, programs and processes are allowed (the kernel-level layer
  and namespaces absorb them); the network (any socket family but AF_UNIX, name resolution, URL and mail
  clients), UNIX sockets outside the layers, writes outside the layers, browsers, and an exec that would
  replace the process running the cell (in the real kernel it would end the kernel) stay refused.
The hook lives in this interpreter (and in forked workers); programs the cell execs have only the kernel-level
confinement.

Ending the kernel: a cell that signals its own process with a signal whose default action ends it
(`os.kill(os.getpid(), SIGKILL)`, SIGTERM, `signal.pthread_kill`, its own pidfd, ...) or calls `os._exit`,
`posix._exit` or `os.abort` would kill the user's kernel. The run's own process records that as the crash it is
(DeadKernelError) and seals it (kernel/common): in layered mode it is pid 1 of its namespace, which the Linux kernel
protects from its own signals, and in both modes a signal's exit status alone cannot be told from the budget's
kill. Any other way it ends itself ends it unsealed, which the daemon reports the same way. Worker processes of the cell are not concerned (their exits are the cell's business).
The same holds for a signal to its own process group (`os.killpg(0, SIGKILL)`, `os.kill(0, ...)`): in the kernel
that group is the kernel's. `os.getppid()` answers the kernel's parent, as in the kernel; a signal to it is
refused (it would reach the Jupyter server or the editor) and recorded in `denied`.

What the sandbox let happen where nothing real sees it (layered mode: a file deleted, renamed or truncated in the
private layer, a signal to every process that reached only the sandbox's) is recorded in `absorbed`.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import Any, NoReturn

from crane.sandbox.kernel.armed import watch_arming  # kernel: strip
from crane.sandbox.kernel.common import (  # kernel: strip
    _C_EXITS,
    _WRITE_FLAGS,
    SEAL_ENDS,
    SandboxBlocked,
    _close_channel,
    _Ctx,
    _seal_other,
    _write_json,
)
from crane.sandbox.shared.process_end import cell_end_code  # kernel: strip

_PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
    "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,),
    "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (0, 1),
    "os.mkfifo": (0,), "os.mknod": (0,),
}
_PROCESS_EVENTS = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
                   "pty.spawn", "os.killpg", "resource.setrlimit", "resource.prlimit"}
_SOCKET_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full")
_DENY_EVENTS = {
    "os.system": "running a shell command", "os.exec": "executing a program", "os.posix_spawn": "starting a program",
    "os.spawn": "starting a program", "os.fork": "creating a process", "os.forkpty": "creating a process",
    "subprocess.Popen": "starting a program", "os.startfile": "opening a file with another program",
    "pty.spawn": "starting a program", "webbrowser.open": "opening a web browser", "os.killpg": "signalling processes",
    "socket.connect": "a network connection", "socket.bind": "binding a network socket",
    "socket.sendto": "sending network data", "socket.sendmsg": "sending network data",
    "socket.getaddrinfo": "network name resolution", "socket.gethostbyname": "network name resolution",
    "socket.gethostbyname_ex": "network name resolution", "socket.gethostbyaddr": "network name resolution",
    "urllib.Request": "a URL request", "http.client.connect": "an HTTP connection", "ftplib.connect": "an FTP connection",
    "smtplib.connect": "an SMTP connection", "poplib.connect": "a POP connection", "imaplib.open": "an IMAP connection",
    "nntplib.connect": "an NNTP connection", "telnetlib.Telnet.open": "a telnet connection",
    "resource.setrlimit": "changing resource limits", "resource.prlimit": "changing resource limits",
}



def _local_file_url(url: Any) -> bool:
    """Is `url` (a URL request's text: the `urllib.Request` event's first argument) a `file:` URL of this machine
    (`file:///data/x.csv`, `file:/data/x.csv`; no host: `file://localhost/` asks for a name resolution, refused as
    such)? Its request reads a local file through `open` (urllib's FileHandler), which this hook vets as any open:
    `pd.read_csv('file://...')` is a read, not network (a certain verdict, not `blocked`). Text only, read here."""
    if type(url) is not str or url[:5].lower() != "file:":
        return False
    rest = url[5:]
    return not rest.startswith("//") or rest.startswith("///")

# file system events the private layer absorbs (layered mode): what the cell did, that nothing real saw
_DESTRUCTIVE = {"os.remove": "deleting", "os.rmdir": "removing the directory", "shutil.rmtree": "deleting the tree",
                "os.rename": "renaming", "shutil.move": "moving", "os.truncate": "truncating"}
# signals whose default action does not end a process
_HARMLESS = {int(getattr(signal, n)) for n in ("SIGCHLD", "SIGCONT", "SIGURG", "SIGWINCH", "SIGSTOP", "SIGTSTP", "SIGTTIN",
                                            "SIGTTOU") if hasattr(signal, n)}


def _ends_process(sig: Any) -> bool:
    """Would `sig`, delivered to this process as it is set up now, end it?"""
    try:
        sig = int(sig)
        if sig == signal.SIGKILL:
            return True
        return sig not in _HARMLESS and signal.getsignal(sig) == signal.SIG_DFL
    except (TypeError, ValueError, OSError):
        return False


def _guard_process_end(ctx: _Ctx, state: dict, mypid: int, handed_over: Any = None) -> None:
    """The run's own process ending itself (`os._exit`/`posix._exit`, `os.abort`, a signal that ends it raised,
    sent to itself, its own thread or its own pidfd) is the crash the real kernel would have: the run ends there
    as "the cell ends the kernel's process", sealed as such (kernel/common), with the record when the channel is
    still open. A session's command (issue 41) ends at once with `cell_end_code` of the cell's status (128 + the
    signal's number for a signal), which every session path reads as that crash (shared/process_end): a SIGKILL it
    sent itself is never read as its budget's, nor a guard's refusal of `posix._exit` said instead (portable). Its
    process is `state["pid"]` (a fork session's command runs in a fork of the head that set the hook). Any other
    way out (a C call, a new `posix` module's `_exit`) ends the process unsealed, which the daemon reports the same
    way.
    `handed_over` (the portable worker's `_children_refused`): a refusal a fork child of the run handed over before
    this end came first, and ends the run `blocked` as the child's (it never returns then): its notice waits for a
    listener thread and a signal handler, which a loaded machine may not have run yet when the cell ends."""
    session = ctx.args["mode"] == "session"
    if not session and (ctx.args["mode"] != "run" or ctx.result_fd < 0):
        return
    real_exit = os._exit
    _C_EXITS.append(real_exit)  # (kernel/common._real_exit: CRANE's own end, bound after this, is never the guard)
    state.setdefault("pid", mypid)

    def active() -> bool:
        return bool(state.get("running")) and not state["bypass"] and os.getpid() == state["pid"]

    def end(what: str, code: int = 0) -> NoReturn:
        if handed_over is not None:
            handed_over()
        # the run's end is decided: a refusal a fork child hands over meanwhile (worker/portable._children_refused,
        # run from a signal handler in the seal's wait) neither writes a second record nor seals over this one.
        # Not "own": the audit hook and the guard stay on for whatever of the cell's still runs (a finalizer)
        state["ended"] = state["bypass"] = True
        state["running"] = False
        if session:  # no record: the session reads the exit (shared/process_end); the hook's own end, not the cell's
            real_exit(cell_end_code(code))
        if ctx.result_fd >= 0:
            try:
                _write_json(ctx.result_fd, {
                    "verdict": "crash", "ename": "DeadKernelError",
                    "evalue": f"the cell {what}: running it would end the kernel's process",
                    "reason": f"the cell {what}", "displays": ctx.displays, "denied": ctx.denied[:20],
                    "absorbed": ctx.absorbed[:20], "confinement": ctx.confinement})
            except OSError:
                pass
        if ctx.args.get("confinement") in ("portable", "guard") and not ctx.args.get("sealed"):
            # a transplant worker whose parent reads no seal (macOS, Windows: no /proc; worker/main.py)
            # (the daemon takes the record from the pipe): the process ends now, and its fork children with it
            # (their parent-death signal, worker/reaper.py), so the pipe's end, which a child that left the
            # session still held, comes at once instead of at the deadline
            _close_channel(ctx)
            real_exit(code)
        _seal_other(ctx, SEAL_ENDS)
        raise SystemExit(code)  # (never reached: the parent ends this process)

    def guarded_exit(status: int) -> NoReturn:  # os._exit's own signature (a cell may name `status=`)
        if active():
            end(f"calls os._exit({status})", int(status) if isinstance(status, int) else 1)
        real_exit(status)

    os._exit = guarded_exit
    posix = sys.modules.get("posix")
    if posix is not None:
        posix._exit = guarded_exit  # type: ignore[attr-defined]
    real_abort = os.abort

    def guarded_abort() -> NoReturn:
        if active():
            end("calls os.abort()", 134)
        real_abort()

    os.abort = guarded_abort
    if posix is not None and hasattr(posix, "abort"):
        posix.abort = guarded_abort  # type: ignore[attr-defined]
    real_raise = getattr(signal, "raise_signal", None)
    if real_raise is not None:
        def guarded_raise(sig: Any) -> None:
            if active() and _ends_process(sig):
                end(f"raises {_signal_name(sig)} in its own process", 128 + int(sig))
            return real_raise(sig)

        signal.raise_signal = guarded_raise
    real_pidfd_send = getattr(signal, "pidfd_send_signal", None)
    if real_pidfd_send is not None:
        def guarded_pidfd_send(pidfd: int, sig: int, siginfo: Any = None, flags: int = 0) -> None:
            if active() and _ends_process(sig) and _pidfd_of(pidfd) == state["pid"]:
                end(f"sends {_signal_name(sig)} to its own process (pidfd)", 128 + int(sig))
            return real_pidfd_send(pidfd, sig, siginfo, flags)

        signal.pidfd_send_signal = guarded_pidfd_send
    _guard_shell_exit(getattr(ctx, "shell", None), active, end)
    watch_arming(state, active, ctx.args.get("confinement") in ("portable", "guard"))  # (kernel/armed)
    state["end"] = end


def _guard_shell_exit(shell: Any, active: Any, end: Any) -> None:
    """`exit()` / `quit()` (ipykernel's ZMQExitAutocall: `shell.ask_exit()`) ends the kernel's process once the cell's
    reply is sent (tested on IPython 8 and 9 kernels: the reply is `ok` with an `ask_exit` payload, then the process
    is gone); `exit(keep_kernel=True)` does not. The run ends there as any other end of its process (the worker's
    shell has the kernel's exiter: worker/main._shell)."""
    real_ask = getattr(shell, "ask_exit", None)
    if real_ask is None:
        return

    def guarded_ask_exit() -> Any:
        if active() and not getattr(shell, "keepkernel_on_exit", None):
            end("asks the kernel to exit (exit() or quit())", 0)
        return real_ask()

    shell.ask_exit = guarded_ask_exit


def _signal_name(sig: Any) -> str:
    try:
        return signal.Signals(int(sig)).name
    except (TypeError, ValueError):
        return str(sig)


def _pidfd_of(fd: Any) -> int:
    """The process a pidfd refers to (its fdinfo's Pid line), 0 when it is not one."""
    try:
        with open(f"/proc/self/fdinfo/{int(fd)}", "rb") as f:
            for line in f:
                if line.startswith(b"Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, TypeError, IndexError):
        pass
    return 0


def _install_audit_hook(ctx: _Ctx) -> None:
    """A Python-level fence in front of the kernel-level one: clear messages and a record of what the cell
    tried. Raises SandboxBlocked (a PermissionError) so the operation never starts."""
    layered = ctx.mode == "layered"
    roots = tuple(ctx.places) if layered else (ctx.scratch,)
    devices = _DEVICES + (("/dev/ptmx", "/dev/pts") if layered and ctx.layer.get("ptys") else ())
    denied = ctx.denied
    realpath, fspath, exists = os.path.realpath, os.fsdecode, os.path.exists
    mypid = os.getpid()
    state: dict[str, Any] = {"bypass": False}
    ctx.audit_state = state
    deny_events = {k: v for k, v in _DENY_EVENTS.items() if not (layered and k in _PROCESS_EVENTS)}
    _guard_process_end(ctx, state, mypid)

    def inside(path: Any) -> bool:
        if isinstance(path, int):
            return True  # every descriptor the child holds is private (kernel/fds.py)
        try:
            p = realpath(fspath(path))
        except Exception:
            return False
        return p in devices or p.startswith("/dev/pts/") and "/dev/pts" in devices or any(
            p == r or p.startswith(r.rstrip("/") + "/") for r in roots)

    def deny(what: str, target: Any = None) -> NoReturn:
        msg = f"crane sandbox: {what} is blocked (the cell has side effects)"
        if target is not None:
            msg += f": {str(target)[:200]}"
        denied.append(msg)
        raise SandboxBlocked(errno.EPERM, msg)

    def absorb(what: str) -> None:
        if len(ctx.absorbed) < 50:
            ctx.absorbed.append(f"crane sandbox: {what}")

    kernel_ppid = int(getattr(ctx, "kernel_ppid", 0) or 0)

    def signal_name(sig: Any) -> str:
        try:
            return signal.Signals(int(sig)).name
        except (TypeError, ValueError):
            return str(sig)

    def signalled(event: str, target: Any, sig: Any) -> None:
        """A signal the real kernel would have sent elsewhere than here (see the module docstring)."""
        if not isinstance(target, int):
            return
        try:
            group = os.getpgrp()
        except OSError:
            group = -1
        own_group = (event == "os.killpg" and target in (0, group)) or (event == "os.kill" and target in (0, -group))
        if own_group and _ends_process(sig) and state.get("running") and "end" in state:
            state["end"](f"sends {signal_name(sig)} to its own process group (in the kernel: the kernel's)",
                         128 + int(sig))
        if kernel_ppid > 1 and target in (kernel_ppid, -kernel_ppid):
            deny(f"signalling the kernel's parent process ({signal_name(sig)})", target)
        if target == -1:
            if layered:
                absorb(f"{signal_name(sig)} to every process reached only the sandbox's own processes")
            else:
                deny(f"signalling every process ({signal_name(sig)})", target)

    if kernel_ppid > 1:  # the cell sees the kernel's parent, as in the kernel (a namespace would show 0)
        real_getppid = os.getppid

        def getppid() -> int:
            return kernel_ppid if os.getpid() == state.get("pid", mypid) else real_getppid()

        os.getppid = getppid

    def local_socket(event: str, args: tuple[Any, ...]) -> bool:
        """Layered mode: AF_UNIX traffic between the sandbox's own processes is allowed."""
        sock = args[0] if args else None
        if getattr(sock, "family", None) != socket_family_unix:
            return False
        if event in ("socket.sendto", "socket.sendmsg"):
            return True
        addr = args[1] if len(args) > 1 else None
        if isinstance(addr, (bytes, bytearray)) and (not addr or addr[:1] == b"\0"):
            return True  # abstract namespace: scoped to the sandbox by Landlock (ABI >= 6)
        if isinstance(addr, str) and (not addr or addr[:1] == "\0"):
            return True
        return isinstance(addr, (str, bytes, os.PathLike)) and inside(addr)

    try:
        import socket as _socket
        socket_family_unix: int = int(_socket.AF_UNIX)
    except Exception:  # pragma: no cover - every Linux Python has it
        socket_family_unix = 1

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if state["bypass"]:
            return
        if event == "open":
            flags = args[2] if len(args) > 2 else 0
            if isinstance(flags, int) and flags & _WRITE_FLAGS and not inside(args[0]):
                deny("writing a file", args[0])
            return
        paths = _PATH_EVENTS.get(event)
        if paths is not None:
            for i in paths:
                if i < len(args) and not inside(args[i]):
                    deny(f"{event.split('.', 1)[1].replace('_', ' ')} on the file system", args[i])
            if layered and event in _DESTRUCTIVE and args:
                absorb(f"{_DESTRUCTIVE[event]} {str(args[0])[:200]} happened in the private layer only (the real "
                       "file is untouched)")
            return
        if layered and event in _SOCKET_EVENTS and local_socket(event, args):
            return
        me = state.get("pid", mypid)  # (a fork session's command: its own process, kernel/session._command_process)
        if layered and event == "os.exec" and os.getpid() == me:
            deny("replacing the kernel's process with a program", args[0] if args else None)
        if event in ("os.kill", "os.killpg") and len(args) > 1 and os.getpid() == me:
            signalled(event, args[0], args[1])
        if event == "signal.pthread_kill" and len(args) > 1 and os.getpid() == me and state.get("running") \
                and "end" in state and _ends_process(args[1]):
            state["end"](f"sends {signal_name(args[1])} to one of its own threads", 128 + int(args[1]))
        what = deny_events.get(event)
        if what is not None and not (event == "urllib.Request" and args and _local_file_url(args[0])):
            deny(what, args[0] if args and event not in ("os.fork", "os.forkpty") else None)
        elif event == "os.kill" and len(args) > 1 and args[0] == me and os.getpid() == me \
                and state.get("running") and "end" in state and _ends_process(args[1]):
            try:
                name = signal.Signals(args[1]).name
            except ValueError:
                name = str(args[1])
            state["end"](f"sends {name} to its own process", 128 + int(args[1]))
        elif event == "os.kill" and args and args[0] != me and not layered:
            deny("signalling another process", args[0])
        elif event == "sqlite3.connect" and args:
            db = args[0]
            name = fspath(db) if isinstance(db, (str, bytes, os.PathLike)) else ""
            if name and name != ":memory:" and "mode=memory" not in name and not name.startswith("file::memory:"):
                if not inside(name) and not exists(name):
                    deny("creating a database file", name)

    sys.addaudithook(hook)
