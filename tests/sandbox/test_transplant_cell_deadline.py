"""Issue 45: a transplant run's timeout ends at the cell's budget, counted from the cell's start, not after the
worker's whole setup allowance (crane.sandbox.cell_deadline).

A real kernel of today's environment with JAX loaded (it cannot be forked: `speculate` takes the transplant path).
The layered worker's cell runs as pid 1 of its pid namespace, where its own SIGALRM timer cannot fire; a cell can
also ignore and block SIGALRM. Either way the daemon kills the worker at the cell's deadline, and the verdict's
reason says that deadline ended it (never the setup's allowance, which ended such runs before: 22 s for a 2 s
budget). Where the worker's own timer (budget + 1.5 s) can fire (the blocking confinement, portable runs) it ends
the cell first, the daemon's kill 0.5 s behind it. No assertion on wall-clock speed: the verdict says which
mechanism ended the run."""

from __future__ import annotations

import os
import threading

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.cell_deadline import CellClock, cell_began, setup_reason, timeout_reason
from crane.sandbox.transplant import LOAD_S, transplant

from ..kernel_envs import require_today_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = "import numpy as np, jax\nX = np.arange(6.0)\n"
TIMER = "the cell exceeded its wall-clock budget"  # the worker's SIGALRM (crane.sandbox.assemble)
BUDGET = 1.0

BUSY = "import os\nprint('pid', os.getpid(), flush=True)\nn = X.sum()\nwhile True:\n    pass\n"
DEAF = ("import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\nn = X.sum()\nwhile True:\n    time.sleep(0.05)\n")


@pytest.fixture(scope="module")
def jax_kernel(tmp_path_factory):
    python = require_today_python()
    work = tmp_path_factory.mktemp("cell-deadline")
    kernel = start_kernel(work, python=python)
    run = kernel.connection.run_cell(SETUP, timeout=180)
    assert run.status == "ok", run
    yield kernel.connection
    kernel.shutdown()


def test_a_busy_cell_ends_at_its_budget_from_its_start(jax_kernel):
    v = speculate(jax_kernel, BUSY, BUDGET)
    assert v.verdict == "timeout", v
    assert v.mode == "transplant" and v.transplant is not None, v
    if v.transplant.confinement == "layered":  # pid 1 of its namespace: its own timer cannot fire
        assert "pid 1\n" in v.stdout, v.stdout
        assert v.reason == timeout_reason(BUDGET), v
    else:  # the blocking confinement: the worker's timer, the daemon's kill behind it
        assert v.reason in (TIMER, timeout_reason(BUDGET)), v
    assert v.reason != setup_reason(BUDGET + LOAD_S)


def test_a_cell_that_ignores_and_blocks_its_timer_is_ended_from_outside(jax_kernel):
    v = speculate(jax_kernel, DEAF, BUDGET)
    assert v.verdict == "timeout", v
    assert v.mode == "transplant", v
    assert v.reason == timeout_reason(BUDGET), v  # the daemon's kill at the cell's deadline, not the setup's


def test_a_portable_run_ends_at_its_budget(jax_kernel):
    """The portable worker's cell is not pid 1 (no pid namespace) and the call guard refuses it the signal
    module: its timer fires, the daemon's cell deadline behind it (a JAX kernel's head runs the request itself,
    its lines live)."""
    v = transplant(jax_kernel, BUSY, BUDGET, portable="asked for", confinement="portable")
    assert v.verdict == "timeout", v
    assert v.mode == "portable", v
    assert v.reason in (TIMER, timeout_reason(BUDGET)), v


def test_only_the_first_cell_line_after_crane_s_setup_lines_counts():
    setup = b'{"event": "setup", "mode": "layered"}\n'
    assert not cell_began(setup)
    assert not cell_began(setup + b'{"event": "cell"}')  # (not a complete line yet)
    assert cell_began(setup + b'{"event": "cell"}\n')
    assert cell_began(setup + setup + b'{"event": "cell"}\n{"verdict": "no-crash"}\n')
    # a line that is not a setup line first (a record: the worker wrote its verdict before any cell) — a cell line
    # after it is not CRANE's
    assert not cell_began(setup + b'{"verdict": "unavailable"}\n{"event": "cell"}\n')
    assert not cell_began(b'not json\n{"event": "cell"}\n')


def test_the_cell_clock_arms_once_and_says_deadline():
    cancel = threading.Event()
    clock = CellClock(0.0, cancel)
    assert not clock.is_set() and clock.until(123.0) == 123.0
    clock.start()
    first = clock.deadline
    assert first is not None
    clock.start()  # (a second cell line moves nothing)
    assert clock.deadline == first
    clock.deadline = 0.0  # past
    assert clock.is_set() and clock.how("cancelled") == "deadline" and clock.how("eof") == "eof"
    cancel.set()  # the caller's cancel stays a cancel
    assert clock.how("cancelled") == "cancelled"
