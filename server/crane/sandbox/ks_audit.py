"""Fork sandbox, kernel side, part 2: the Python-level fence (an audit hook) in the child.

In front of the kernel-level confinement (`seccomp.py`): clear messages and a record of what the cell tried.
A refused operation raises `SandboxBlocked` (a PermissionError) before it starts.
"""

from __future__ import annotations

import errno
import os
import sys

from crane.sandbox.ks_common import _WRITE_FLAGS, SandboxBlocked, _Ctx  # kernel: strip

_PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
    "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,),
    "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (0, 1),
    "os.mkfifo": (0,), "os.mknod": (0,),
}
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


def _install_audit_hook(ctx: _Ctx) -> None:
    """A Python-level fence in front of the kernel-level one: clear messages and a record of what the cell
    tried. Raises SandboxBlocked (a PermissionError) so the operation never starts."""
    scratch = ctx.scratch
    inherited_max = ctx.inherited_max
    denied = ctx.denied
    realpath, fspath, exists = os.path.realpath, os.fsdecode, os.path.exists
    mypid = os.getpid()
    state = {"bypass": False}
    ctx.audit_state = state

    def inside(path) -> bool:
        if isinstance(path, int):
            return path > inherited_max or path in (1, 2)
        try:
            p = realpath(fspath(path))
        except Exception:
            return False
        return p == scratch or p.startswith(scratch + os.sep) or p == os.devnull

    def deny(what: str, target=None):
        msg = f"crane sandbox: {what} is blocked (the cell has side effects)"
        if target is not None:
            msg += f": {str(target)[:200]}"
        denied.append(msg)
        raise SandboxBlocked(errno.EPERM, msg)

    def hook(event, args):
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
            return
        what = _DENY_EVENTS.get(event)
        if what is not None:
            deny(what, args[0] if args and event not in ("os.fork", "os.forkpty") else None)
        elif event == "os.kill" and args and args[0] != mypid:
            deny("signalling another process", args[0])
        elif event == "sqlite3.connect" and args:
            db = args[0]
            name = fspath(db) if isinstance(db, (str, bytes, os.PathLike)) else ""
            if name and name != ":memory:" and "mode=memory" not in name and not name.startswith("file::memory:"):
                if not inside(name) and not exists(name):
                    deny("creating a database file", name)

    sys.addaudithook(hook)
