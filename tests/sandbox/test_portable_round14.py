"""Round 14 (issue 40, h4): the portable path's OS layer against a root kernel's privileges, and honest cells that
look at the view's links without following them.

- A worker of a kernel that runs as root kept every capability under Landlock: `time.clock_settime` set the
  machine's clock, `socket.sethostname` its name (no Landlock rule covers either, and no audit event or guard row
  refused them) and `sched_setscheduler(0, SCHED_FIFO, ...)` gave the worker real-time priority over the machine.
  The Linux layer now drops every capability but the file-permission ones (worker/linux.py, as the OS sandbox
  does) and its seccomp filter refuses the clock's and host names' setters to every thread, one that existed
  before the layer (and kept its capabilities) included; the call guard refuses `time.clock_settime(_ns)` to user
  code where it runs alone (`--sandbox guard`).
- `os.stat(f, follow_symlinks=False)`, `Path.stat(follow_symlinks=False)`: the view's files are links, so a cell
  filtering regular files this way found none and crashed (IndexError, KeyError) with a certain verdict where the
  kernel runs clean; such a crash is now only likely (worker/portable._VIEW_NAMES).
Each run on IPython 8 and 9 kernels, the kernel proved unchanged (one_shot).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from crane.sandbox.worker.linux import linux_layer_available
from crane.sandbox.worker.seccomp import pc_arch

from .one_shot import each_kernel, one_shot  # noqa: F401 (the fixture conn)

LINUX = linux_layer_available() is None
CAP_SYS_TIME, CAP_SYS_ADMIN = 25, 21


def _has_capabilities(*caps: int) -> bool:
    """This process holds each of `caps` in its effective set (a root test run: what a root kernel's worker gets)."""
    try:
        with open("/proc/self/status") as f:
            eff = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return False
    return all(eff >> c & 1 for c in caps)


PRIVILEGED = pytest.mark.skipif(not (LINUX and _has_capabilities(CAP_SYS_TIME, CAP_SYS_ADMIN)),
                                reason="Linux with Landlock, run as root (the capabilities a root kernel has)")

# each setter is given the value the machine has already (nothing changes if it goes through): the cell says so
MACHINE_SETTERS = {
    "clock_settime": "import time\ntime.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME))",
    "clock_settime_ns through map": "import time\nlist(map(time.clock_settime_ns, [time.CLOCK_REALTIME], "
                                    "[time.clock_gettime_ns(time.CLOCK_REALTIME)]))",
    "sethostname": "import socket\nsocket.sethostname(socket.gethostname())",
    # real-time priority for the worker itself (allowed: it names itself): a spinning cell would then starve the
    # machine's other processes, the user's kernel among them, for its whole budget
    "SCHED_FIFO for itself": "import os\nos.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))",
}


@PRIVILEGED
@pytest.mark.parametrize("setter", list(MACHINE_SETTERS))
def test_a_root_kernels_worker_cannot_set_the_machines_clock_or_name(conn, setter):
    host = socket.gethostname()
    v = one_shot(conn, "portable", MACHINE_SETTERS[setter] + "\nprint('REACHED')")
    assert "REACHED" not in v.stdout, v  # before: no-crash, the setter went through
    assert v.verdict in ("blocked", "crash") and not (v.verdict == "crash" and v.certain), v
    assert v.transplant is not None and "landlock" in v.transplant.layers, v
    assert socket.gethostname() == host


@pytest.mark.skipif(not _has_capabilities(CAP_SYS_TIME), reason="run as root (the capability a root kernel has)")
@pytest.mark.parametrize("setter", ["clock_settime", "clock_settime_ns through map"])
def test_the_guard_alone_refuses_the_clocks_setters(conn, setter):
    """`--sandbox guard` (no OS layer, opt-in): the call guard refuses `time.clock_settime(_ns)` to user code, called
    or handed to `map` (before: the clock was set)."""
    from crane.kernel.untouched import Untouched
    from crane.sandbox import speculate
    from crane.sandbox.options import SandboxOptions
    with Untouched(conn) as watch:
        v = speculate(conn, MACHINE_SETTERS[setter] + "\nprint('REACHED')", 60.0,
                      sandbox=SandboxOptions(confinement="guard"))
    assert watch.unchanged, watch.changes()
    assert v.verdict == "blocked" and "REACHED" not in v.stdout, v
    assert "clock_settime" in (v.reason or ""), v


RAW = r"""
import json, os, socket, sys, threading, time
from crane.sandbox.worker.linux import confine_worker
def tries():
    out = {}
    for name, call in (("clock_settime", lambda: time.clock_settime(time.CLOCK_REALTIME,
                                                                      time.clock_gettime(time.CLOCK_REALTIME))),
                       ("sethostname", lambda: socket.sethostname(socket.gethostname()))):
        try:
            call()
            out[name] = "ok"
        except OSError as e:
            out[name] = os.strerror(e.errno)
    return out
ready, go, early = threading.Event(), threading.Event(), {}
def before():  # a thread that exists before the layer keeps its capabilities (they are per thread)
    ready.set()
    go.wait()
    early.update(tries())
t = threading.Thread(target=before)
t.start()
ready.wait()
info = confine_worker([sys.argv[1]], [])
go.set()
t.join()
print(json.dumps({"main": tries(), "thread": early, "caps": info["capabilities"], "seccomp": info["seccomp"]["ran"]}))
"""


@PRIVILEGED
@pytest.mark.skipif(pc_arch() is None, reason="an architecture with a seccomp table")
def test_the_linux_layer_refuses_the_machines_setters_to_every_thread(tmp_path):
    """The layer alone, in a fresh process making the calls itself (no Python layer): the main thread has lost the
    capabilities, and a thread that existed before the layer (which keeps them) meets the seccomp filter."""
    p = subprocess.run([sys.executable, "-c", RAW, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["seccomp"] is True, out
    denied = {"clock_settime": "Operation not permitted", "sethostname": "Operation not permitted"}
    assert out["main"] == denied and out["thread"] == denied, out  # before: "ok" for each
    assert int(out["caps"], 16) & ~0xF == 0, out  # at most the file-permission capabilities are left


# honest cells the kernel runs clean: files that are links in the view, looked at without following links
NOT_FOLLOWING = {
    "stat follow_symlinks=False sizes": "sizes = {n: os.stat(n, follow_symlinks=False).st_size for n in "
                                        "['data.csv', 'log.txt']}\nsmall = [n for n, s in sizes.items() if s < 20]\n"
                                        "print(small[0], small[1])",
    "S_ISREG without following": "import stat\nfiles = [n for n in ('data.csv', 'log.txt') if "
                                 "stat.S_ISREG(os.stat(n, follow_symlinks=False).st_mode)]\nprint(files[0])",
    "Path.stat follow_symlinks=False": "import stat as S\nfrom pathlib import Path\n"
                                       "mode = Path('data.csv').stat(follow_symlinks=False).st_mode\n"
                                       "print({S.S_IFREG: 'file', S.S_IFDIR: 'dir'}[S.S_IFMT(mode)])",
}


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="the view is made of links")
@pytest.mark.parametrize("cell", list(NOT_FOLLOWING))
def test_a_crash_from_the_views_links_seen_unfollowed_is_never_certain(conn, cell):
    v = one_shot(conn, "portable", "import os\n" + NOT_FOLLOWING[cell])
    assert v.verdict in ("no-crash", "crash"), v
    assert not (v.verdict == "crash" and v.certain), v  # before: a certain IndexError / KeyError


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="the view is made of links")
def test_a_portable_sessions_crash_from_the_views_links_is_never_certain(conn):
    """The same rule in a portable session (`crane fix --offline --sandbox portable`, the agent, MCP): its crash was
    certain (the one-shot's view check ran only on one-shot records); a later command still runs on the state."""
    from crane.kernel.untouched import Untouched
    from crane.sandbox.options import SandboxOptions
    from crane.sandbox.session import open_session
    with Untouched(conn) as watch:
        s = open_session(conn, sandbox=SandboxOptions(confinement="portable"))
        try:
            v = s.run("import os\n" + NOT_FOLLOWING["S_ISREG without following"])
            after = s.run("print(base + 1)")
        finally:
            s.close()
    assert watch.unchanged, watch.changes()
    assert (v.verdict, v.ename, v.certain) == ("crash", "IndexError", False), v  # before: certain
    assert (after.verdict, after.stdout.strip()) == ("no-crash", "2"), after
