"""Timeouts and dead kernels are clear errors, promptly; a kernel that was busy answers again afterwards."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time

import pytest

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelDead, KernelTimeout
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest

from .no_time_cap import NO_TIME_CAP


def _busy(kernel, seconds: float) -> None:
    """Another client makes the kernel busy (silently: nothing reaches history); returns once the kernel runs that
    cell (it says so with a file: a fixed pause lost the race to a loaded machine's kernel)."""
    flag = os.path.join(tempfile.mkdtemp(prefix="crane-busy-"), "running")
    other = kernel.manager.client()
    other.start_channels()
    try:
        other.execute(f"open({flag!r}, 'w').close(); import time; time.sleep({seconds})", silent=True,
                      store_history=False)
        deadline = time.monotonic() + 120  # an event waited for; the bound ends a failing test
        while not os.path.exists(flag):
            assert time.monotonic() < deadline, "the kernel never ran the busy cell"
            time.sleep(0.02)
    finally:
        other.stop_channels()


@pytest.fixture(scope="module")
def light_kernel(tmp_path_factory, start):
    k = start(tmp_path_factory.mktemp("light"))
    assert k.connection.run_cell("value = 7", timeout=60).status == "ok"
    yield k
    k.shutdown()


def test_timeout_is_clear_and_the_kernel_answers_afterwards(light_kernel):
    probe = ProbeClient(light_kernel.connection)
    assert probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["value"])).facts["value"].value == "7"
    _busy(light_kernel, 30)
    start = time.monotonic()
    with pytest.raises(KernelTimeout, match="no reply within 0.5 s"):
        probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["value"]), timeout=0.5)
    # the request's own 0.5 s timeout ended it, not the busy cell's 30 s (the bound tells these apart only: at a
    # load of 25 a bound of 3 s measured the machine)
    assert time.monotonic() - start < 25
    light_kernel.manager.interrupt_kernel()
    res = probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["value"]), timeout=120)
    assert res.facts["value"].value == "7"


@pytest.mark.parametrize("attached", [False, True], ids=["owned", "attached"])
def test_kernel_dying_mid_request_is_kernel_dead(tmp_path, start, attached):
    k = start(tmp_path)
    conn = KernelConnection.attach(k.manager.connection_file) if attached else k.connection
    try:
        probe = ProbeClient(conn)
        probe.ensure_installed()
        _busy(k, 60)  # our request will wait behind this one ...
        pid = k.manager.provisioner.pid
        threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()  # ... and the kernel dies meanwhile
        start = time.monotonic()
        with pytest.raises(KernelDead, match="died"):
            probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["x"]), timeout=30)
        # told by the death, not by the 30 s timeout (an attached kernel's death is its heartbeat silent for
        # HEARTBEAT_GRACE_S: 5 s plus the load; a bound of 10 s measured the machine)
        assert time.monotonic() - start < 25
        with pytest.raises(KernelDead):
            probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["x"]), timeout=30)
    finally:
        if attached:
            conn.close()
        k.shutdown()
