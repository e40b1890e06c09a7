"""The copy path's warm verdict asks the kernel once (issue 45): the export's own request checks CRANE's two private
modules (ModuleClient.call) and is the busy check too (`start_timeout`), so no separate version check goes before it.
A busy kernel is still reported within the request timeout, and the export it did not start, left queued behind the
user's cell, stops at its first step when it runs (its run's token is gone): it copies nothing. A real kernel, a real
portable run; the busy kernel runs a user's cell (sent by a second client) that waits for a file."""

from __future__ import annotations

import os
import time

import pytest
from jupyter_client import BlockingKernelClient

from crane import pyast
from crane.kernel.manager import start_kernel
from crane.sandbox.pipes import PortableDir
from crane.sandbox.transplant import transplant

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the portable run's OS layer here is Linux's")

WAIT = "import os, time\nopen({start!r}, 'w').close()\nwhile not os.path.exists({release!r}):\n    time.sleep(0.02)\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("one-request"))
    assert k.connection.run_cell("x = [1, 2, 3]\n", timeout=300).status == "ok"
    yield k
    k.shutdown()


def _portable(conn, source: str, **kw):
    return transplant(conn, source, 120.0, portable="asked for", confinement="portable", **kw)


def test_a_warm_verdict_sends_one_request(kernel):
    conn = kernel.connection
    first = _portable(conn, "y = sum(x)\ny")
    assert first.verdict == "no-crash", first
    sent = []
    real = conn.client.execute

    def counted(*a, **kw):  # (the real request is sent: only counted)
        sent.append(kw.get("user_expressions"))
        return real(*a, **kw)

    conn.client.execute = counted
    try:
        v = _portable(conn, "y = sum(x)\ny")
    finally:
        del conn.client.execute
    assert v.verdict == "no-crash", v
    assert len(sent) == 1, f"{len(sent)} requests to the kernel for one warm verdict"
    crash = _portable(conn, "x[7]")
    assert crash.verdict == "crash" and crash.ename == "IndexError", crash


def test_a_busy_kernel_is_reported_and_its_queued_export_copies_nothing(kernel, tmp_path, monkeypatch):
    conn = kernel.connection
    assert _portable(conn, "len(x)").verdict == "no-crash"  # (installed: the export's request is the check)
    # the run's folder as the verdict left it, just before its removal: the queued export is disowned at once
    # (its token taken away, its `cancel` made), not only stopped by the folder's removal later
    left: list[dict[str, bool]] = []
    real_cleanup = PortableDir.cleanup

    def seen(pdir: PortableDir) -> None:  # (the real removal follows: only looked at first)
        left.append({n: os.path.exists(os.path.join(pdir.path, n)) for n in ("token", "cancel")})
        real_cleanup(pdir)

    monkeypatch.setattr(PortableDir, "cleanup", seen)
    start, release = tmp_path / "started", tmp_path / "release"
    user = BlockingKernelClient()
    user.load_connection_file(str(kernel.manager.connection_file))
    user.start_channels()
    try:
        user.execute(WAIT.format(start=str(start), release=str(release)))
        deadline = time.monotonic() + 300  # an event waited for; the bound ends a failing test
        while not start.exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # the user's cell never ends by itself: only the request timeout can end this verdict
        v = _portable(conn, "len(x)", request_timeout=1.0)
        assert v.verdict == "unavailable" and "the kernel is busy" in (v.reason or ""), v
        assert left == [{"token": False, "cancel": True}], left
        release.touch()
        # the queued export runs now: it answers on this connection (no one waits for it) and stops at its first
        # step, having copied nothing
        answer = None
        deadline = time.monotonic() + 300
        while answer is None:
            assert time.monotonic() < deadline, "the queued export never answered"
            try:
                msg = conn.client.get_shell_msg(timeout=1.0)
            except Exception:
                continue
            r = (msg["content"].get("user_expressions") or {}).get("r")
            if r is not None:
                answer = pyast.literal_eval(r["data"]["text/plain"])
        assert answer["ok"] is False and "no token" in answer["reason"], answer
        assert "export_ms" not in answer, answer
    finally:
        release.touch()
        user.stop_channels()
    # and the next verdict is whole
    v = _portable(conn, "x[7]")
    assert v.verdict == "crash" and v.ename == "IndexError", v


def test_a_restarted_kernel_gets_the_modules_again_within_the_one_request_path(tmp_path):
    """After a restart the modules this process installed are gone: the export's own request finds them missing and
    installs them again (ModuleClient.call), with no separate check first."""
    k = start_kernel(tmp_path)
    try:
        conn = k.connection
        assert conn.run_cell("x = [1, 2, 3]\n", timeout=300).status == "ok"
        assert _portable(conn, "len(x)").verdict == "no-crash"
        k.manager.restart_kernel(now=True)
        conn.wait_ready(300)
        assert conn.run_cell("x = [4, 5]\n", timeout=300).status == "ok"
        v = _portable(conn, "x[2]")
        assert v.verdict == "crash" and v.ename == "IndexError", v
        assert conn.evaluate("'_crane_transplant' in __import__('sys').modules") is True
    finally:
        k.shutdown()
