"""A notebook's own SIGALRM handler in the fork (red team round 18, G17; kernel/armed.keep_alarm_handler).

The timeout idiom (`signal.signal(SIGALRM, on_alarm)` in one cell, `signal.alarm(1)` around a slow step in a
later one) ran in a child whose SIGALRM had the default action: the cell's alarm killed it, read as the run's own
budget (a certain false `timeout`). The kernel's handler now stays in the child behind a dispatcher that tells
CRANE's budget timer from the cell's alarm; the budget still ends a cell that never ends. One-shot runs in both
confinements and a fork session's commands; IPython 8 and 9 kernels; the kernel unchanged."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxSession

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

HISTORY = ("import signal, time\nclass Timeout(Exception):\n    pass\ndef on_alarm(signum, frame):\n"
           "    raise Timeout()\nsignal.signal(signal.SIGALRM, on_alarm)")
IDIOM = "signal.alarm(1)\ntry:\n    time.sleep(30)\nexcept Timeout:\n    print('timed out')"
RAISES = "signal.alarm(1)\ntime.sleep(30)"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp(f"alarm-{request.param}"), python=kernel_python(request.param))
    c = kernel.connection
    assert c.run_cell(HISTORY, timeout=60).status == "ok"
    yield c
    kernel.shutdown()


@pytest.mark.parametrize("layer", ["blocking", "layered"])
def test_the_notebooks_alarm_runs_its_handler(conn, layer):
    with Untouched(conn) as watch:
        idiom = speculate(conn, IDIOM, 20.0, layer=layer)
        raises = speculate(conn, RAISES, 20.0, layer=layer)
        endless = speculate(conn, "while True:\n    pass", 3.0, layer=layer)
    assert watch.unchanged, watch.changes()
    assert (idiom.verdict, idiom.certain, idiom.stdout.strip()) == ("no-crash", True, "timed out"), idiom
    assert (raises.verdict, raises.ename, raises.certain) == ("crash", "Timeout", True), raises
    assert endless.verdict == "timeout", endless  # (the budget, by the same timer, still ends it)


def test_a_fork_sessions_commands_keep_the_handler(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20.0) as sb:
            first = sb.run(IDIOM)
            second = sb.run(RAISES)
    assert watch.unchanged, watch.changes()
    assert (first.verdict, first.certain) == ("no-crash", True), first
    assert (second.verdict, second.ename) == ("crash", "Timeout"), second


def test_the_kernel_itself(conn):
    run = conn.run_cell(IDIOM, timeout=60)
    assert run.status == "ok" and "timed out" in run.stdout, run
    assert conn.run_cell(RAISES, timeout=60).ename == "Timeout"
