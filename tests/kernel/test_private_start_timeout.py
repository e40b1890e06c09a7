"""A private request with a start timeout (`KernelConnection.private(start_timeout=...)`): the kernel must start on
it within that (its iopub `busy` for the request), else KernelNotStarted, however long the request itself may take;
once started it has its whole `timeout`. One request so both finds a busy kernel quickly and may run long (the
transplant's export: transplant._export). The busy kernel is a real one running a cell that waits for a file (an
event, not a duration), sent by a second client as a user's would be."""

from __future__ import annotations

import threading
import time

import pytest
from jupyter_client import BlockingKernelClient

from crane.kernel.errors import KernelNotStarted, KernelTimeout
from crane.kernel.manager import start_kernel

START = 10.0  # a start timeout an idle kernel meets under any load (the busy case waits on an event instead)
WAIT = "import os, time\nopen({start!r}, 'w').close()\nwhile not os.path.exists({release!r}):\n    time.sleep(0.02)\n"


def _wait_for(path, within: float = 300.0) -> None:
    deadline = time.monotonic() + within  # an event waited for; the bound ends a failing test
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.fixture()
def kernel(tmp_path):
    k = start_kernel(tmp_path)
    yield k
    k.shutdown()


def test_a_busy_kernel_is_reported_within_the_start_timeout(kernel, tmp_path):
    start, release = tmp_path / "started", tmp_path / "release"
    user = BlockingKernelClient()
    user.load_connection_file(str(kernel.manager.connection_file))
    user.start_channels()
    try:
        user.execute(WAIT.format(start=str(start), release=str(release)))  # the user's cell: it runs until released
        _wait_for(start)
        t0 = time.monotonic()
        # the cell never ends by itself: only the start timeout can end this wait (its `timeout` would take 600 s)
        with pytest.raises(KernelNotStarted, match="not started within"):
            kernel.connection.private({"v": "6 * 7"}, timeout=600.0, start_timeout=1.0)
        assert time.monotonic() - t0 < 300.0
        release.touch()
        # the kernel answers its next request (the one it did not start is answered first and dropped)
        assert kernel.connection.evaluate("6 * 7", timeout=300.0) == 42
    finally:
        release.touch()
        user.stop_channels()


def test_a_started_request_may_outlast_the_start_timeout(kernel, tmp_path):
    # the kernel is idle (it answered just now), so it starts on the request well within START whatever the load;
    # the request then runs until released, which is only once its start timeout has surely passed
    assert kernel.connection.evaluate("6 * 7", timeout=300.0) == 42
    start, release = tmp_path / "started", tmp_path / "release"
    out: dict = {}

    def ask() -> None:
        try:
            out["reply"] = kernel.connection.private({"v": "6 * 7"}, code=WAIT.format(start=str(start),
                                                                                       release=str(release)),
                                                     timeout=600.0, start_timeout=START)
        except Exception as exc:  # (reported below)
            out["error"] = exc

    t = threading.Thread(target=ask)
    t.start()
    try:
        _wait_for(start)
        # the request was sent before its cell made `start`: its start timeout is over once START has passed since
        # then (a wait longer under load only makes the request outlast it by more)
        past = time.monotonic() + START + 0.5
        while time.monotonic() < past:
            assert "error" not in out, out  # (a start timeout applied to a started request shows here, early)
            time.sleep(0.05)
    finally:
        release.touch()
        t.join(300)
    assert not t.is_alive()
    assert "error" not in out, out
    reply = out["reply"]
    assert reply.status == "ok" and reply.user_expressions["v"]["data"]["text/plain"] == "42", reply


def test_without_a_start_timeout_the_whole_timeout_applies(kernel, tmp_path):
    start, release = tmp_path / "started", tmp_path / "release"
    with pytest.raises(KernelTimeout) as info:
        kernel.connection.private({}, code=WAIT.format(start=str(start), release=str(release)), timeout=1.0)
    assert not isinstance(info.value, KernelNotStarted)
    release.touch()
    assert kernel.connection.evaluate("6 * 7", timeout=300.0) == 42
