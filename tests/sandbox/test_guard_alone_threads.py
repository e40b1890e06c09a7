"""Threads the cell leaves running never signal the user's kernel under the guard alone (issue 40; `--sandbox guard`:
the call guard and the audit hook, no OS layer), on IPython 8 and 9 kernels and a Python 3.13 one.

Two ways a thread of the cell's (an executor's worker running the cell's function: library code starts it, so the
guard lets it start) got past the guard:
- **CRANE's own operation under way.** The audit hook and the replacements of the unaudited calls let every call
  through while CRANE's own operation was under way (a private copy made for a write, a refusal being written): a
  flag of the process's, not of the thread that ran it. A thread that called `os.kill` or
  `signal.pidfd_send_signal` the moment the main thread began writing a refusal signalled the kernel. Now the
  operation excuses its own thread only (worker/portable `_own_begin`).
- **After the cell.** The call guard went off for the whole process at the cell's end, and the epilogue freed every
  `sys.monitoring` tool, the guard's too: on 3.12+ a thread still running then called `ctypes`' `kill` unvetted.
  Now the guard goes off for CRANE's thread alone (worker/guard `CallGuard.uninstall`) and its tool is kept
  (kernel/run `_epilogue_begins`); a refused call of the thread ends the run `blocked`.
The kernel counts the SIGUSR1 it receives (a handler the test installs, checked to work first): never one."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions

from ..kernel_envs import KERNEL_ENVS, kernel_python, python_kernel

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfds (Linux)")

GUARD = SandboxOptions(confinement="guard")
SETUP = ("import os, signal\nkpid = os.getpid()\n_h6_hits = []\n"
         "signal.signal(signal.SIGUSR1, lambda *a: _h6_hits.append(1))\n")
TEARDOWN = "import signal\nsignal.signal(signal.SIGUSR1, signal.SIG_DFL)\n"

SEND = {
    "os.kill": "os.kill(kpid, signal.SIGUSR1)",
    "pidfd": "signal.pidfd_send_signal(os.pidfd_open(kpid), signal.SIGUSR1)",
    "ctypes": "import ctypes; ctypes.CDLL(None).kill(kpid, int(signal.SIGUSR1))",
}
# the main thread's refused call (signal 0: no signal) begins CRANE's refusal; the thread, woken by the event, sends
# once it sees the refusal under way: on 3.11, the guard's profile hook for new threads unset (what the refusal did
# before it wrote its record); on 3.12+ (no such sign) as soon as it gets the interpreter
DURING_A_REFUSAL = """
import os, signal, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
go = threading.Event()
def send():
    go.wait()
    while sys.version_info < (3, 12) and threading._profile_hook is not None:
        pass
    for _ in range(20000):
        try:
            {send}
        except BaseException:
            pass
ex = ThreadPoolExecutor(1)
ex.submit(send)
time.sleep(0.2)
go.set()
os.kill(kpid, 0)
"""
# the thread waits for the cell's last statement, then a few ms (the guard's end, the epilogue), then sends
AFTER_THE_CELL = """
import os, signal, threading, time
from concurrent.futures import ThreadPoolExecutor
done = threading.Event()
def send():
    done.wait()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.002:
        pass
    for _ in range(2000):
        try:
            {send}
        except BaseException:
            pass
ex = ThreadPoolExecutor(1)
ex.submit(send)
time.sleep(0.1)
done.set()
"""
CASES = {
    "os.kill during a refusal": DURING_A_REFUSAL.format(send=SEND["os.kill"]),
    "pidfd during a refusal": DURING_A_REFUSAL.format(send=SEND["pidfd"]),
    "ctypes after the cell": AFTER_THE_CELL.format(send=SEND["ctypes"]),
    "pidfd after the cell": AFTER_THE_CELL.format(send=SEND["pidfd"]),
}


@pytest.fixture(scope="module", params=[*KERNEL_ENVS, "3.13"])
def kernel(request, workdir):
    python = python_kernel(request.param) if request.param == "3.13" else kernel_python(request.param)
    k = start_kernel(workdir, python=python)
    conn = k.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    kpid = conn.evaluate("kpid")
    os.kill(kpid, signal.SIGUSR1)  # the handler counts what the kernel receives (a test that can fail)
    assert conn.evaluate("len(_h6_hits)") == 1
    assert conn.run_cell("_h6_hits.clear()").status == "ok"
    yield conn
    conn.run_cell(TEARDOWN)
    k.shutdown()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guard's Linux paths")
@pytest.mark.parametrize("case", list(CASES))
def test_a_thread_the_cell_left_never_signals_the_kernel(kernel, case):
    assert kernel.run_cell("_h6_hits.clear()").status == "ok"  # (each case counts its own)
    with Untouched(kernel) as watch:
        v = speculate(kernel, CASES[case], 60.0, sandbox=GUARD)
    # (a signal sent before the run's process ended is pending in the kernel: its handler runs before this answers)
    assert kernel.evaluate("len(_h6_hits)") == 0, v
    assert watch.unchanged, (watch.changes(), v)
    assert v.verdict == "blocked" or (case.endswith("after the cell") and v.verdict == "no-crash"), v
    assert kernel.run_cell("1 + 1").status == "ok"
