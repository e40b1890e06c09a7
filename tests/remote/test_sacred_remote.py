"""The user's kernel stays unchanged over the websocket transport too: the probe, a speculative sandbox run and
a sandbox session on a kernel behind a Jupyter Server leave its namespace, execution count, In/Out and history
as they were, and send no output to the user's frontend (only busy/idle status)."""

from __future__ import annotations

import os
import time

import pytest

from crane.analysis.cell import analyze_cell, plan_probe
from crane.kernel.client import KernelConnection
from crane.probe.collect import ProbeClient
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxSession

from ..sacred import IopubWatcher, kernel_state, settle


@pytest.fixture(scope="module")
def crane_conn(user_kernel):
    """CRANE's own connection to the user's kernel (another websocket, another session), as the daemon has."""
    conn = KernelConnection.attach(user_kernel.target, timeout=30)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def watcher(user_kernel):
    w = IopubWatcher(user_kernel.target)
    yield w
    w.close()


@pytest.fixture(scope="module")
def ready(user_kernel, crane_conn, watcher):
    user_kernel.run("import os\nrows = [{'a': 1, 'b': None}, {'a': 2}]\nconfig = {'lr': 0.1}\nn = len(rows)")
    user_kernel.run("n * 2")
    settle(watcher, crane_conn)  # the user's own runs' iopub all in before the watcher is cleared
    watcher.clear()
    return kernel_state(crane_conn)


def _only_status(watcher: IopubWatcher) -> None:
    assert watcher.outputs() == []
    assert {m["msg_type"] for m in watcher.messages} <= {"status"}


def test_probe_over_websocket_is_private(crane_conn, watcher, ready):
    probe = ProbeClient(crane_conn)
    result = probe.run(plan_probe(analyze_cell("config['momentum'] + rows[0]['c'] + missing + n")))
    assert result.facts["config"].keys == ["lr"] and result.facts["n"].value == "2"
    assert [(k.expr, k.key, k.present) for k in result.keys if k.expr == "config"] == [("config", "momentum", False)]
    assert result.undefined == ["missing"]
    assert probe.read_notebook_path() is None
    time.sleep(0.3)
    _only_status(watcher)
    assert kernel_state(crane_conn) == ready


def test_sandbox_over_websocket_is_private(crane_conn, watcher, ready):
    v = speculate(crane_conn, "total = n + config['momentum']", 10)
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    v = speculate(crane_conn, "print('in the fork', n)\nn = 100\nn", 10)
    assert v.verdict == "no-crash" and v.stdout == "in the fork 2\n", v
    v = speculate(crane_conn, "open('written.txt', 'w').write('x')", 10)
    assert v.verdict == ("no-crash" if v.mode == "layered" else "blocked"), v  # a private layer, or refused
    with SandboxSession.open(crane_conn, budget_s=5) as sb:
        assert sb.run("n = n + 40").verdict == "no-crash"
        assert sb.inspect("n") == "42"
        sb.checkpoint()
        assert sb.run("n = 0").verdict == "no-crash"
        sb.rollback()
        assert sb.inspect("n") == "42"
    time.sleep(0.3)
    _only_status(watcher)
    assert kernel_state(crane_conn) == ready
    assert crane_conn.evaluate("n") == 2
    assert not os.path.exists(os.path.join(crane_conn.evaluate("__import__('os').getcwd()"), "written.txt"))
