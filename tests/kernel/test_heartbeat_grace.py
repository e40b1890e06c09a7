"""A kernel reached through its connection file alone (the language server's and `crane mcp`'s attach) is alive
while its heartbeat answers, and one missed heartbeat does not make it dead: jupyter_client's heartbeat gives a
kernel one second, which a loaded machine (or a fresh connection's first ping) can miss. `is_alive` waits for the
heartbeat's next replies (`HEARTBEAT_GRACE_S`) before it says "dead"; a killed kernel is dead all the same.
Before, a tool call right after an attach could fail with "the kernel is not running" (CI at load)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from crane.kernel import client as client_mod
from crane.kernel.client import KernelConnection
from crane.kernel.manager import start_kernel

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="stops the kernel's process with SIGSTOP")


def _kernel_pid(k) -> int:
    return int(k.connection.evaluate("__import__('os').getpid()"))


def _wait(pred, within: float) -> bool:
    deadline = time.monotonic() + within  # an event waited for; the bound ends a failing test
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_missed_heartbeat_is_not_a_dead_kernel(tmp_path, monkeypatch):
    k = start_kernel(tmp_path)
    conn = None
    try:
        pid = _kernel_pid(k)
        conn = KernelConnection.attach(str(k.manager.connection_file), timeout=60)
        hb = conn.client.hb_channel
        assert _wait(hb.is_beating, 120) and conn.is_alive()
        os.kill(pid, signal.SIGSTOP)  # the kernel misses its heartbeats
        try:
            assert _wait(lambda: not hb.is_beating(), 120), "the heartbeat never missed"
        finally:
            threading.Timer(0.3, os.kill, (pid, signal.SIGCONT)).start()
        # the grace outlasts any load here: the answer is the heartbeat's reply after the kernel goes on
        monkeypatch.setattr(client_mod, "HEARTBEAT_GRACE_S", 300.0)
        assert conn.is_alive()
        assert conn.evaluate("1 + 1") == 2
        os.kill(pid, signal.SIGKILL)
        monkeypatch.setattr(client_mod, "HEARTBEAT_GRACE_S", 2.0)
        assert _wait(lambda: not conn.is_alive(), 120), "a killed kernel stays alive"
    finally:
        if conn is not None:
            conn.close()
        k.shutdown()
