"""The portable sandbox's Linux OS layer (worker/linux.py: Landlock + no_new_privs under the call guard), for real.

- The layer alone, with no Python guard at all: a process that confined itself with `confine_worker` makes the raw
  calls through libc (`ctypes`: nothing Python's audit hooks see) and the Linux kernel refuses them: a file written,
  truncated, removed or a FIFO made outside the writable folders, a program executed, a file of the hidden folder
  read, a TCP connection, a signal to its parent; its own folder stays writable.
- End to end (`speculate` with the portable sandbox, IPython 8 and 9 kernels): one cell tries the round-5 families
  the Python layers do not see (C intermediaries, native writers, `ctypes.pythonapi`, the kernel's connection file,
  ZeroMQ to the kernel, pidfd signals); nothing outside changes, the kernel is unchanged (state, execution count,
  nice value, CPU affinity) and alive, and the verdict names the Linux layer.
Skipped where Landlock is missing (the CI matrix's other platforms)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash

pytestmark = pytest.mark.skipif(linux_layer_available() is not None, reason=str(linux_layer_available()))

PORTABLE = SandboxOptions(confinement="portable")

RAW = r"""
import ctypes, json, os, socket, sys
from crane.sandbox.worker.linux import confine_worker
run, hidden, outside, port = sys.argv[1:5]
info = confine_worker([run], [hidden])
libc = ctypes.CDLL(None, use_errno=True)
def rc(v):
    return "ok" if v >= 0 else os.strerror(ctypes.get_errno())
out = {"info": info}
out["create outside"] = rc(libc.open(f"{outside}/new.txt".encode(), os.O_WRONLY | os.O_CREAT, 0o644))
out["truncate outside"] = rc(libc.truncate(f"{outside}/target.txt".encode(), 0))
out["remove outside"] = rc(libc.unlink(f"{outside}/target.txt".encode()))
out["fifo outside"] = rc(libc.mkfifo(f"{outside}/fifo".encode(), 0o600))
out["rename outside"] = rc(libc.rename(f"{outside}/target.txt".encode(), f"{run}/stolen.txt".encode()))
out["read hidden"] = rc(libc.open(f"{hidden}/kernel-1.json".encode(), os.O_RDONLY))
out["list hidden"] = sorted(os.listdir(hidden))
out["exec"] = libc.system(f"touch {outside}/pwned".encode())
s = socket.socket()
out["tcp"] = s.connect_ex(("127.0.0.1", int(port)))
out["signal parent"] = rc(libc.kill(os.getppid(), 0))
out["write inside"] = rc(libc.open(f"{run}/mine.txt".encode(), os.O_WRONLY | os.O_CREAT, 0o644))
out["read elsewhere"] = open(f"{outside}/target.txt").read()
print(json.dumps(out))
"""


def test_the_layer_alone_refuses_raw_calls_the_python_layers_never_see(tmp_path, outside, listener):
    run, hidden = tmp_path / "run", tmp_path / "runtime"
    run.mkdir()
    hidden.mkdir()
    (hidden / "kernel-1.json").write_text('{"key": "secret"}')
    before = tree_hash(outside)
    res = subprocess.run([sys.executable, "-c", RAW, str(run), str(hidden), str(outside), str(listener.port)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["info"]["ran"] and out["info"]["abi"] >= 1, out
    for what in ("create outside", "truncate outside", "remove outside", "fifo outside", "read hidden"):
        assert out[what] == os.strerror(13), (what, out)  # EACCES from Landlock
    assert out["rename outside"] != "ok", out
    assert out["list hidden"] == ["kernel-1.json"]  # names are visible, contents are not
    assert out["exec"] != 0, out  # the shell could not be executed
    if out["info"]["abi"] >= 4:
        assert out["tcp"] != 0 and listener.received == [], out
    if out["info"]["abi"] >= 6:
        assert out["signal parent"] == os.strerror(1), out  # EPERM: signals scoped to the sandbox
    assert out["write inside"] == "ok" and (run / "mine.txt").exists()
    assert out["read elsewhere"] == "outside, keep me\n"
    assert tree_hash(outside) == before and not (outside / "pwned").exists()


SETUP = "import os\nkpid = os.getpid()\nx = 41\n"

# the round-5 families the call guard and the audit hook do not see, each caught so that every one is tried
CELL = r"""
import ctypes, functools, itertools, json, os, signal, socket, sqlite3
tried = {}
def attempt(name, f):
    try:
        tried[name] = repr(f())[:120]
    except BaseException as e:
        tried[name] = f"{type(e).__name__}: {e}"[:160]
attempt("mkfifo via map", lambda: list(map(os.mkfifo, ['@OUTSIDE@/fifo'])))
attempt("mknod via starmap", lambda: list(itertools.starmap(os.mknod, [('@OUTSIDE@/node',)])))
attempt("pythonapi.system", lambda: ctypes.pythonapi.system(b'echo pwned > @OUTSIDE@/ct.txt'))
attempt("sqlite ATTACH", lambda: sqlite3.connect(':memory:').execute("ATTACH DATABASE '@OUTSIDE@/att.db' AS x").fetchall())
attempt("sqlite VACUUM INTO", lambda: sqlite3.connect(':memory:').execute("VACUUM INTO '@OUTSIDE@/vac.db'").fetchall())
argv = open(f'/proc/{kpid}/cmdline', 'rb').read().split(b'\0')
conn_file = next((a.split(b'=', 1)[-1] for a in argv if a.endswith(b'.json')), b'').decode()
attempt("connection file", lambda: open(conn_file).read())
def zmq_send():
    import zmq
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://127.0.0.1:@PORT@")
    s.send(b"hello", flags=zmq.NOBLOCK)
    s.poll(1000)
    s.close()
    ctx.term()
    return "sent"
attempt("zmq", zmq_send)
attempt("pidfd kill", lambda: list(map(signal.pidfd_send_signal, map(os.pidfd_open, [kpid]), [9])))
x = x + 1
print(json.dumps(tried))
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def lk(request, workdir, outside, listener):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP, timeout=120)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener,
           "kpid": conn.evaluate("kpid")}
    kernel.shutdown()


def _kernel_sched(pid: int) -> tuple:
    return os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid)), os.sched_getscheduler(pid)


def test_round5_families_hold_under_the_linux_layer(lk):
    conn, kpid = lk["conn"], lk["kpid"]
    before = (tree_hash(lk["work"]), tree_hash(lk["outside"]), _kernel_sched(kpid))
    src = CELL.replace("@OUTSIDE@", str(lk["outside"])).replace("@PORT@", str(lk["listener"].port))
    with Untouched(conn) as watch:
        v = speculate(conn, src, 60.0, sandbox=PORTABLE)
    assert watch.unchanged, (watch.changes(), v)
    assert conn.evaluate("x") == 41 and conn.evaluate("1 + 1") == 2
    assert (tree_hash(lk["work"]), tree_hash(lk["outside"]), _kernel_sched(kpid)) == before, v
    assert lk["listener"].received == []
    assert v.mode == "portable" and v.transplant is not None and "landlock" in v.transplant.layers, v
    assert not [p for p in lk["outside"].iterdir() if p.name != "target.txt"], v
    if v.verdict == "no-crash":  # every attempt ran and failed (none was refused early by the Python layers)
        tried = json.loads(v.stdout.strip().splitlines()[-1])
        assert "Permission" in tried["connection file"] or "Errno 13" in tried["connection file"], tried
        assert "Error" in tried["mkfifo via map"] and "Error" in tried["sqlite ATTACH"], tried
    else:
        assert v.verdict == "blocked", v  # a Python layer refused one first (the run ended there)
