#!/usr/bin/env python3
"""The attacks of ../shared/notes/sandbox-attacks.md (rounds 3 and 4) that apply to a Python-level sandbox, run in
the portable sandbox (`--sandbox portable`: the call guard and the audit hook, every OS confinement off).

For each attack, on a kernel CRANE owns (--python; default this interpreter, IPython 8): the verdict, whether a
file outside or in the working folder changed (hashed: contents, mode, size; a data folder outside every place,
the working folder), whether a loopback TCP listener or a UNIX socket service received anything, whether the
kernel is unchanged (`Untouched`) and alive. A false certain crash is a `crash` where the attack would not
raise in the real kernel. Prints one line per attack and a summary; exit 1 if anything escaped.

Usage: .venv/bin/python benchmarks/portable_attacks.py [--python PY] [--budget 20]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import sys
import tempfile
import threading
from pathlib import Path

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions

# name -> (expected verdicts, cell); {out}: the outside folder, {port}: the TCP listener, {sock}: the UNIX service
ATTACKS: dict[str, tuple[tuple[str, ...], str]] = {
    "write/append outside": (("blocked",), "open('{out}/target.txt', 'a').write('x')"),
    "mkdir outside": (("blocked",), "os.makedirs('{out}/newdir')"),
    "rename across": (("blocked",), "os.rename('{out}/target.txt', '{out}/moved.txt')"),
    "hard link": (("blocked",), "os.link('{out}/target.txt', 'hl')"),
    "chmod by path": (("blocked",), "os.chmod('{out}/target.txt', 0o600)"),
    "chmod through /proc/self/fd": (("blocked",), "fd = os.open('{out}/target.txt', os.O_RDONLY)\n"
                                                  "os.chmod(f'/proc/self/fd/{{fd}}', 0o600)"),
    "fchmod on a read-only descriptor": (("blocked",), "fd = os.open('{out}/target.txt', os.O_RDONLY)\n"
                                                       "os.fchmod(fd, 0o600)"),
    "utime with dir_fd": (("blocked",), "d = os.open('{out}', os.O_RDONLY)\nos.utime('target.txt', (0, 0), dir_fd=d)"),
    "FIFO outside": (("blocked",), "os.mkfifo('{out}/fifo')"),
    "sqlite INSERT outside": (("blocked",), "import sqlite3\nc = sqlite3.connect('{out}/db.sqlite')\n"
                                           "c.execute('create table t(x)')\nc.commit()"),
    "mmap r+ of a file outside": (("blocked",), "import mmap\nf = open('{out}/target.txt', 'r+b')\n"
                                               "m = mmap.mmap(f.fileno(), 0)\nm[:1] = b'X'"),
    "UNIX socket service": (("blocked",), "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('{sock}')"),
    "shell escape curl": (("blocked",), "!curl -s --unix-socket {sock} http://localhost/x"),
    "%%bash": (("blocked",), "%%bash\ntouch {out}/pwned"),
    "TCP to 127.0.0.1": (("blocked",), "import socket\nsocket.create_connection(('127.0.0.1', {port})).send(b'hi')"),
    "requests to localhost": (("blocked",), "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}')"),
    "daemon: setsid + double fork": (("blocked",), "import subprocess\nsubprocess.Popen(['setsid', 'sh', '-c', "
                                                   "'sleep 1; touch {out}/pwned'])"),
    "SIGKILL to the kernel": (("blocked",), "os.kill(kpid, 9)"),
    "F_SETOWN + F_SETSIG(SIGKILL) to the kernel": (("blocked",), "import fcntl, signal\nr, w = os.pipe()\n"
                                                                  "fcntl.fcntl(r, fcntl.F_SETOWN, kpid)"),
    "FIFREEZE ioctl": (("blocked",), "import fcntl, io\nf = io.FileIO('{out}/target.txt')\n"
                                    "fcntl.ioctl(f.fileno(), 0xC0045877, 0)"),
    "flock a file outside": (("blocked",), "import fcntl\nf = open('{out}/target.txt')\nfcntl.flock(f, fcntl.LOCK_EX)"),
    "sched_setaffinity on the kernel": (("blocked",), "os.sched_setaffinity(kpid, {{0}})"),
    "setrlimit": (("blocked",), "import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))"),
    "ctypes libc unlink": (("blocked",), "import ctypes\nctypes.CDLL('libc.so.6').unlink(b'{out}/target.txt')"),
    "at-fork handler writing outside + fork": (("blocked",), "os.register_at_fork(after_in_child=lambda: "
                                                            "open('{out}/pwned', 'w'))\nos.fork()"),
    "exec replacing the process": (("blocked",), "os.execv('/bin/true', ['true'])"),
    "sleep forever ignoring signals": (("blocked", "timeout"), "import signal, time\n"
                                                             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                                             "while True: time.sleep(1)"),
    "fork bomb": (("blocked",), "while True: os.fork()"),
    "os._exit(3)": (("crash",), "os._exit(3)"),
    "rmtree outside": (("blocked",), "import shutil\nshutil.rmtree('{out}')"),
    "absolute path into the working folder": (("blocked",), "open(os.path.join(wd, 'data.csv'), 'w').write('x')"),
    "input()": (("blocked",), "input('name? ')"),
    "real KeyError": (("crash",), "df['nope']"),
    "ordinary: /proc, tempfile, logging, chdir, print, await": (
        ("no-crash",), "import tempfile, logging\nopen('/proc/self/status').read()\n"
                       "with tempfile.NamedTemporaryFile() as t:\n    t.write(b'x')\n"
                       "logging.basicConfig(filename='run.log')\nlogging.warning('x')\n"
                       "os.makedirs('sub', exist_ok=True)\nos.chdir('sub')\nprint('x' * 100000)\n"
                       "import asyncio\nawait asyncio.sleep(0.01)"),
    "ordinary: pandas in the cwd": (("no-crash",), "df.to_csv('copy.csv')\nimport pandas as pd\n"
                                                   "assert pd.read_csv('copy.csv').shape[0] == len(df)"),
}
SETUP = "import os, pandas as pd\ndf = pd.read_csv('data.csv')\nkpid = os.getpid()\nwd = os.getcwd()\n"


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"{p.relative_to(root)}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}".encode())
            if p.is_file() and not p.is_symlink():
                h.update(p.read_bytes())
    return h.hexdigest()


class Services:
    """A loopback TCP listener and a UNIX socket service, recording what reaches them."""

    def __init__(self) -> None:
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.tcp.settimeout(0.1)
        self.port = self.tcp.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="crane-pattack-")
        self.path = os.path.join(self.dir, "api.sock")
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(self.path)
        self.unix.listen(8)
        self.unix.settimeout(0.1)
        self.received: list[str] = []
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for s, name in ((self.tcp, "tcp"), (self.unix, "unix")):
                try:
                    c, _ = s.accept()
                    self.received.append(name)
                    c.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.tcp.close()
        self.unix.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None)
    ap.add_argument("--budget", type=float, default=20.0)
    args = ap.parse_args()
    base = "/var/cache" if os.access("/var/cache", os.W_OK) else None
    out = Path(tempfile.mkdtemp(prefix="crane-pattack-out-", dir=base))
    work = Path(tempfile.mkdtemp(prefix="crane-pattack-work-"))
    (out / "target.txt").write_text("outside, keep me\n")
    (work / "data.csv").write_text("a,b\n1,2\n3,4\n")
    services = Services()
    kernel = start_kernel(work, python=args.python)
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    bad = 0
    try:
        for name, (expected, cell) in ATTACKS.items():
            src = cell.format(out=out, port=services.port, sock=services.path)
            before = (tree_hash(out), tree_hash(work))
            with Untouched(conn) as watch:
                v = speculate(conn, src, args.budget, sandbox=SandboxOptions(confinement="portable"))
            alive = conn.is_alive() and conn.evaluate("1 + 1") == 2
            changed = (tree_hash(out), tree_hash(work)) != before or (out / "pwned").exists()
            false_crash = v.verdict == "crash" and "crash" not in expected
            ok = v.verdict in expected and not changed and not services.received and watch.unchanged and alive
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} {name}: {v.verdict} ({(v.reason or v.ename or '')[:110]})"
                  f"{'; OUTSIDE CHANGED' if changed else ''}{'; SERVICE REACHED' if services.received else ''}"
                  f"{'; KERNEL CHANGED' if not watch.unchanged else ''}{'; KERNEL DEAD' if not alive else ''}"
                  f"{'; FALSE CRASH' if false_crash else ''}", flush=True)
            services.received.clear()
    finally:
        kernel.shutdown()
        services.close()
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(ATTACKS) - bad} / {len(ATTACKS)} as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
