"""The kernel watch (lsp/kernel_watch.py) reports a kernel "dead" only when its heartbeat has been silent for
`crane.kernel.client.HEARTBEAT_GRACE_S`, not on one missed reply (jupyter_client gives a kernel one second: a loaded
machine misses it, and the notebook then flapped to static-only diagnostics); a killed kernel is still reported.
The kernel is made to miss its heartbeats with SIGSTOP; every step waits on an observed state, never on a time."""

from __future__ import annotations

import os
import signal
import time

import pytest

from crane.kernel import client as kernel_client
from crane.kernel.manager import start_kernel
from crane.lsp.kernel_watch import KernelWatch, WatchEvent

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="stops the kernel's process with SIGSTOP")


def _wait(pred, what: str) -> None:
    deadline = time.monotonic() + 120  # an event waited for; the bound ends a failing test
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_missed_heartbeat_is_no_death_and_a_killed_kernel_is(tmp_path, monkeypatch):
    k = start_kernel(tmp_path)
    events: list[WatchEvent] = []
    watch = None
    try:
        pid = int(k.connection.evaluate("__import__('os').getpid()"))
        monkeypatch.setattr(kernel_client, "HEARTBEAT_GRACE_S", 300.0)
        watch = KernelWatch(str(k.manager.connection_file), events.append, heartbeat_interval=0.1)
        watch.start()
        hb = watch._client.hb_channel
        _wait(hb.is_beating, "the watch's heartbeat never beat")
        os.kill(pid, signal.SIGSTOP)
        try:
            _wait(lambda: watch._silent_since is not None, "the watch never saw the heartbeat missing")
        finally:
            os.kill(pid, signal.SIGCONT)
        _wait(lambda: watch._silent_since is None, "the heartbeat never came back")
        assert "dead" not in [e.kind for e in events] and watch.alive
        monkeypatch.setattr(kernel_client, "HEARTBEAT_GRACE_S", 0.5)
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: "dead" in [e.kind for e in events], "a killed kernel never reported dead")
        assert not watch.alive
    finally:
        if watch is not None:
            watch.stop()
            watch.join(5)
        k.shutdown()
