"""Worker processes in the sandbox (layered mode) are bounded in number and end with the run: after a
success, a crash, a timeout or a stop, no process the run started is left (counted: descendants of the kernel
process, and processes carrying the run's marker wherever they were re-parented)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from crane.sandbox import speculate

from ..sacred import kernel_state


def _ppid(pid: str) -> int | None:
    try:
        data = open(f"/proc/{pid}/stat", "rb").read()
        return int(data[data.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            pp = _ppid(p)
            if pp is not None:
                children.setdefault(pp, []).append(int(p))
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def with_marker(marker: str) -> set[int]:
    out = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if marker.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                    out.add(int(p))
            except OSError:
                pass
    return out


def left_behind(kernel_pid: int, marker: str, wait_s: float = 5.0) -> set[int]:
    """Processes of the run still there after `wait_s` (the kernel reaps its child in a thread)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = descendants(kernel_pid) | with_marker(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def where(root: int) -> dict[int, str]:
    """Each process under `root`: its command line, state and kernel wait channel (what a failing test shows)."""
    out = {}
    for pid in sorted(descendants(root)):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")[:120].decode(errors="replace")
            state = [ln for ln in open(f"/proc/{pid}/status").read().splitlines() if ln.startswith("State")]
            wchan = open(f"/proc/{pid}/wchan").read()
            call = open(f"/proc/{pid}/syscall").read().split(" ", 1)[0]
            out[pid] = f"{cmd} | {state[0] if state else '?'} | {wchan} | syscall {call}"
        except OSError as exc:
            out[pid] = f"({exc})"
    return out


def spawner(marker: str) -> str:
    """A cell prologue starting three kinds of processes: a program, a forked Python worker, and an orphan
    (double fork) that execs a program."""
    return f"""
import os, subprocess, sys, time, multiprocessing as mp
prog = subprocess.Popen(['sh', '-c', 'sleep 1234.5; true', '{marker}'])
def linger():
    time.sleep(600)
w = mp.Process(target=linger)
w.start()
fr, fw = os.pipe()  # (close-on-exec: the orphan's end closes when it execs; a failure is written on it)
def retried(what, call):  # (a loaded machine may refuse a process for a moment: EAGAIN, ENOMEM)
    for attempt in range(5):
        try:
            return call()
        except OSError as exc:
            if attempt == 4:
                os.write(fw, f"the orphan's {{what}} failed: {{exc!r}}".encode())
                os._exit(1)
            time.sleep(0.2)
pid = os.fork()
if pid == 0:
    os.close(fr)
    if retried("fork", os.fork) == 0:
        retried("exec", lambda: os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)',
                                                          '{marker}']))
    os._exit(0)
os.close(fw)
os.waitpid(pid, 0)
failed = os.read(fr, 4096)  # (the orphan's end of the pipe: closed by its exec, or a failure written)
if failed:  # (the run then ends as this crash: a test that expected the orphan says why it is not there)
    raise RuntimeError(failed.decode())
time.sleep(0.3)
"""


@pytest.fixture(scope="module")
def kpid(conn):
    return conn.evaluate("__import__('os').getpid()")


@pytest.fixture(scope="module")
def ready(conn, kpid):
    assert descendants(kpid) == set()
    return kernel_state(conn)


@pytest.mark.parametrize("ending", ["success", "crash", "timeout", "sigsegv"])
def test_process_tree_ends_with_the_run(ending, conn, kpid, ready):
    marker = f"crane-marker-{uuid.uuid4().hex}"
    tail = {"success": "print('done')", "crash": "1 / 0", "timeout": "while True:\n    pass",
            "sigsegv": "import ctypes\nctypes.string_at(0)"}[ending]
    v = speculate(conn, spawner(marker) + tail, budget_s=4.0, layer="layered")
    assert v.mode == "layered", v
    expected = {"success": "no-crash", "crash": "crash", "timeout": "timeout", "sigsegv": "crash"}[ending]
    assert v.verdict == expected, v
    assert left_behind(kpid, marker) == set()
    assert kernel_state(conn) == ready


def test_stop_ends_the_tree_at_once(conn, kpid, ready):
    marker = f"crane-marker-{uuid.uuid4().hex}"
    cancel = threading.Event()
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault(
        "v", speculate(conn, spawner(marker) + "time.sleep(600)", budget_s=600.0, layer="layered", cancel=cancel)))
    th.start()
    deadline = time.monotonic() + 120  # an event waited for; the bound ends a failing test
    while len(with_marker(marker)) < 2 and time.monotonic() < deadline and th.is_alive():
        time.sleep(0.05)
    started, processes = len(with_marker(marker)) == 2, where(kpid)
    t = time.monotonic()
    cancel.set()  # (a failing start too: the next tests count the processes left)
    th.join(240)
    v = box.get("v")
    assert started, f"the run's processes did not start: {processes}; the run: {v}"
    # "at once": the stop ends the run, not the cell's 600 s sleep (its budget); a bound of 2 s measured the
    # machine's load, this one only tells the stop from the cell's own end
    assert not th.is_alive() and time.monotonic() - t < 240
    assert v is not None and v.verdict == "unavailable" and "stopped" in (v.reason or ""), v
    assert left_behind(kpid, marker) == set()
    assert kernel_state(conn) == ready


def test_timeout_in_blocking_mode_leaves_nothing(conn, kpid, ready):
    v = speculate(conn, "while True:\n    pass", budget_s=1.0, layer="blocking")
    assert v.verdict == "timeout" and v.mode == "blocking", v
    assert left_behind(kpid, "no-marker") == set()


def test_number_of_processes_is_bounded(conn, kpid, ready):
    """A program-starting loop runs into the sandbox's bound (here 100 live processes after the pid namespace's
    first wrap, pid_max 400; RLIMIT_NPROC for a user other than root): the run is "blocked", and every
    process ends with it."""
    src = """
import subprocess
procs = []
try:
    while len(procs) < 5000:
        procs.append(subprocess.Popen(['sleep', '600']))
finally:
    print(len(procs))
"""
    v = speculate(conn, src, budget_s=60.0, layer="layered", max_processes=100)
    assert v.verdict == "blocked" and "bound" in (v.reason or ""), v
    assert 50 <= int(v.stdout.split()[-1]) < 400, v.stdout
    assert left_behind(kpid, "no-marker", wait_s=10.0) == set()
    assert kernel_state(conn) == ready
