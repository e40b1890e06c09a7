"""SandboxSession: persistent state, inspect, checkpoint/rollback, budgets, confinement, clean close."""

from __future__ import annotations

import os
import time

import pytest

from crane.sandbox.fork_session import SandboxError, SandboxSession
from crane.sandbox.fresh_kernel import speculate_in_fresh_kernel

from ..sacred import kernel_state, settle
from .conftest import tree_hash


@pytest.fixture(scope="module")
def ready(conn, watcher):
    assert conn.run_cell("import numpy as np\nx = 1\nm = np.ones((50, 50))").status == "ok"
    settle(watcher, conn)  # the setup's messages all in before the watcher is cleared
    watcher.clear()
    return kernel_state(conn)


def test_session_lifecycle(conn, watcher, workdir, ready):
    tree = tree_hash(workdir)
    with SandboxSession.open(conn, budget_s=3) as sb:
        v = sb.run("x = x + 10\nprint('x is', x)\ny = m @ m\nx")
        assert v.verdict == "no-crash" and v.stdout == "x is 11\n" and v.displays[-1].text == "11", v
        assert sb.inspect("x") == "11"
        assert sb.checkpoint() == 1
        assert sb.run("x = 999\nz = m @ m").verdict == "no-crash"
        assert sb.inspect("x") == "999"
        assert sb.rollback() == 0
        assert sb.inspect("x") == "11"
        v = sb.run("x / 0")
        assert (v.verdict, v.ename, v.line) == ("crash", "ZeroDivisionError", 1)
        assert sb.run("open('session_file.txt', 'w')").verdict == "blocked"
        assert sb.run("import os\nos.fork()").verdict == "blocked"
        with pytest.raises(SandboxError):
            sb.inspect("undefined_name")
        pids = {sb._head.pid}
    time.sleep(0.5)
    assert all(not os.path.exists(f"/proc/{p}") for p in pids)
    assert conn.evaluate("x") == 1
    assert tree_hash(workdir) == tree
    assert watcher.outputs() == []
    assert kernel_state(conn) == ready


def test_session_timeout_rolls_back_and_keeps_serving(conn, ready):
    with SandboxSession.open(conn, budget_s=3) as sb:
        sb.run("x = 5")
        sb.checkpoint()
        sb.run("x = 6")
        v = sb.run("while True: pass", budget_s=1.0)
        # ended by the run's own 1 s budget, not the session's 3 s (the reason says which: a wall-clock bound
        # measured the machine's load)
        assert v.verdict == "timeout" and "rolled back" in (v.reason or "") and "within 1 s" in (v.reason or ""), v
        assert sb.inspect("x") == "5" and sb.depth == 0  # resuming consumes the checkpoint
        assert sb.run("x + 1").displays[-1].text == "6"


def test_replay_sandbox_rebuilds_state(tmp_path):
    (tmp_path / "d.csv").write_text("a\n1\n")
    v = speculate_in_fresh_kernel(["import pandas as pd", "df = pd.read_csv('d.csv')"], "df['b']", tmp_path, 10)
    assert v.verdict == "crash" and v.ename == "KeyError", v
