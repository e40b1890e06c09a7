"""Round 16 (issue 42): a Python signal handler the notebook set (`signal.signal(SIGALRM, h)` with an interval
timer) was called by the interpreter in the middle of CRANE's private requests, with CRANE's frame: it could read
the export's locals and rebind the module's functions (/tmp/redteam41/f3b: a rebinding inside the install was taken
into the seal). kernel/hooks_off's guard now defers every notebook handler for the request (a C-level recorder in
its place) and a signal that came meanwhile is raised again after the trace call (raised inside the guard's frame,
the handler rewrote the export's reply there: the follow-up red team's F1): the handler runs after CRANE's work,
once, and is the notebook's again. Real kernels: IPython 8 and 9 (3.11), and the 3.12 and 3.13 kernels.

Not timing-sensitive: the request's own function sends the signal to its process and then works (the interpreter
runs a handler between two bytecodes); the transplant export is driven under a 1 ms interval timer.
"""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.private_module import KernelModule, ModuleClient

from ..kernel_envs import KERNEL_ENVS, PYTHON_KERNELS, kernel_python, python_kernel

# the request's function: it signals its own process, then runs Python code (where a handler would be called)
PART = """
def window():
    import os
    import signal
    import sys
    ns = sys.modules["__main__"].__dict__
    os.kill(os.getpid(), signal.SIGUSR1)
    n = 0
    for i in range(20000):
        n += i
    return len(ns["HITS"])
"""

NOTEBOOK = r"""
import signal, sys
HITS = []
def on_signal(signum, frame):
    HITS.append((signum, frame.f_code.co_filename, frame.f_code.co_name))
signal.signal(signal.SIGUSR1, on_signal)
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS + [f"py{v}" for v in PYTHON_KERNELS if v != "3.11"])
def kernel(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"hooks-signals-{request.param}")
    (work / "window.py").write_text(PART)
    python = python_kernel(request.param[2:]) if request.param.startswith("py") else kernel_python(request.param)
    with start_kernel(work, python=python) as k:
        assert k.connection.run_cell(NOTEBOOK, timeout=60).status == "ok"
        yield k, work


def test_a_notebooks_signal_handler_runs_after_the_request_not_inside_it(kernel):
    k, work = kernel
    conn = k.connection
    client = ModuleClient(conn, KernelModule("_crane_test_hooks_signals", "a test module", [work / "window.py"]))
    client.ensure_installed(timeout=30)
    assert conn.run_cell("HITS.clear()", timeout=60).status == "ok"
    during = client.call("window", timeout=120, what="demo")
    hits = conn.evaluate("HITS", timeout=30)
    assert during == 0  # not called while the request's function ran
    assert [h[0] for h in hits] == [10], hits  # called once, after it (SIGUSR1 is 10 on Linux)
    assert hits[0][2] not in ("window", "_guard"), hits  # (raised again by the trigger, after the trace call)
    assert conn.evaluate("signal.getsignal(signal.SIGUSR1) is on_signal", timeout=30) is True


def test_an_interval_timers_handler_never_sees_the_exports_frames(kernel):
    """The transplant export (its install, proofs and pickling: `<crane-kernel/...>` files) under a 1 ms timer."""
    from crane.sandbox.transplant import transplant

    k, _work = kernel
    conn = k.connection
    setup = ("import os\nFRAMES = []\n"
             "def on_alarm(signum, frame):\n"
             "    while frame is not None:\n"
             "        FRAMES.append((frame.f_code.co_filename, frame.f_code.co_name))\n"
             "        frame = frame.f_back\n"
             "signal.signal(signal.SIGALRM, on_alarm)\n"
             "df = {'a': list(range(20000))}\n"
             "signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)")
    assert conn.run_cell(setup, timeout=60).status == "ok"
    try:
        for _ in range(2):  # (the first installs the modules)
            v = transplant(conn, "print(len(df['a']))", 60.0)
            assert v.verdict == "no-crash", v
    finally:
        assert conn.run_cell("signal.setitimer(signal.ITIMER_REAL, 0)", timeout=60).status == "ok"
    frames = conn.evaluate("sorted(set(FRAMES))", timeout=30)
    # (the request's work — the install, the proofs, the pickling: CRANE's module files — never; the guard's own
    # frame swaps the handlers first and puts them back last, a few bytecodes at each end, and its `fire`, called
    # by the trigger after the trace call, raises what came)
    crane = [f for f in frames if f[0].startswith("<crane-kernel") and f[0] != "<crane-kernel/guard>"]
    assert crane == [], frames
    assert conn.evaluate("signal.getsignal(signal.SIGALRM) is on_alarm", timeout=30) is True
