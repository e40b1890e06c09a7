"""The kernel channels websocket transport against a real Jupyter Server: start, attach, requests, the
watcher's view, restarts through the REST API, dropped sockets, wrong tokens and a server that goes away."""

from __future__ import annotations

import queue
import time

import pytest

from crane.kernel.client import KernelConnection
from crane.kernel.errors import (
    ConnectionLost,
    KernelError,
    KernelTimeout,
    ServerAuthError,
    ServerNotFound,
    ServerUnreachable,
)
from crane.kernel.rest import ServerAPI
from crane.kernel.server_kernel import live_kernels, session_path, start_server_kernel
from crane.kernel.target import KernelTarget, ServerSpec
from crane.kernel.ws_client import WebSocketKernelClient

from ..jupyter_server_proc import JupyterServerProcess, TcpProxy, free_port
from .conftest import write_notebook


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_start_use_and_shut_down_a_server_kernel(jserver, served, monkeypatch):
    monkeypatch.chdir(served)
    before = set(jserver.kernel_ids())
    nb = served / "project" / "analysis.ipynb"
    with start_server_kernel(jserver.spec(), nb) as k:
        assert k.path == "project/analysis.ipynb" and k.kernel_id in jserver.kernel_ids()
        conn = k.connection
        assert conn is not None
        assert conn.evaluate("__import__('os').getcwd()") == str(served / "project")  # the notebook's folder
        run = conn.run_cell("x = 41\nprint('hello')\nx + 1")
        assert (run.status, run.stdout, run.execution_count) == ("ok", "hello\n", 1)
        assert conn.evaluate("x") == 41
        failed = conn.run_cell("1 / 0")
        assert failed.status == "error" and failed.ename == "ZeroDivisionError"
        with pytest.raises(KernelTimeout):
            conn.private({"v": "1"}, code="import time; time.sleep(3)", timeout=0.5)
        # a second client attaches to the same kernel by id and sees the state
        other = KernelConnection.attach(KernelTarget.remote(jserver.spec(), k.kernel_id), timeout=30)
        try:
            assert other.evaluate("x") == 41
        finally:
            other.close()
    assert set(jserver.kernel_ids()) == before and live_kernels() == []


def test_a_session_the_user_has_open_is_never_reused(jserver, served, user_kernel, monkeypatch):
    monkeypatch.chdir(served)
    user_kernel.run("mine = 'user'")
    with start_server_kernel(jserver.spec(), served / "project" / "analysis.ipynb") as k:
        assert k.kernel_id != user_kernel.kernel_id and k.path.startswith("project/analysis.crane-")
        assert k.connection is not None
        assert k.connection.evaluate("'mine' in globals()") is False
    assert user_kernel.kernel_id in jserver.kernel_ids()
    assert user_kernel.frontend.evaluate("mine") == "user"


def test_the_notebook_must_be_where_the_server_serves_it(jserver, served, tmp_path):
    assert session_path(tmp_path / "a" / "nb.ipynb", tmp_path) == "a/nb.ipynb"
    with pytest.raises(KernelError, match="run crane from the folder the Jupyter server serves"):
        session_path("/elsewhere/nb.ipynb", tmp_path)
    # inside the current folder, but not where the server has it: the kernel would start in the wrong folder
    with pytest.raises(KernelError, match="has no project/other.ipynb: run crane from the folder"):
        start_server_kernel(jserver.spec(), served / "project" / "other.ipynb", root=served)
    assert ServerAPI(jserver.spec()).has_file("project/analysis.ipynb") is True
    assert live_kernels() == []


def test_wrong_token_and_unreachable_server_are_clear_errors(jserver, served, user_kernel):
    bad = jserver.spec(token="wrong-token")
    with pytest.raises(ServerAuthError, match="check the token"):
        start_server_kernel(bad, served / "project" / "x.ipynb", root=served)
    with pytest.raises(ServerAuthError, match="HTTP 403"):
        KernelConnection.attach(KernelTarget.remote(bad, user_kernel.kernel_id), timeout=5)
    nobody = ServerSpec.parse(f"http://127.0.0.1:{free_port()}/", token="t", env={})
    with pytest.raises(ServerUnreachable, match="cannot reach"):
        ServerAPI(nobody).check()
    with pytest.raises(ServerUnreachable):
        KernelConnection.attach(KernelTarget.remote(nobody, "0b0c2d6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e"), timeout=2)
    with pytest.raises(ServerNotFound):
        KernelConnection.attach(KernelTarget.remote(jserver.spec(), "0b0c2d6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e"), timeout=5)
    assert live_kernels() == []


def _iopub_live(client: WebSocketKernelClient, within: float = 60.0) -> bool:
    """Has the server relayed this websocket's iopub again (a control request's status came back)?"""
    deadline = time.monotonic() + within
    while not client.sync_iopub(timeout=2.0):
        if time.monotonic() > deadline:
            return False
    return True


def test_watch_client_sees_user_cells_and_a_rest_restart(jserver, user_kernel):
    watch = KernelConnection.watch_client(user_kernel.target)
    try:
        assert watch.hb_channel.is_beating()
        user_kernel.run("y = 1")
        seen = []
        deadline = time.monotonic() + 60  # an upper bound for a loaded machine: the loop ends on the event
        while ("execute_input", None) not in seen and time.monotonic() < deadline:
            try:
                m = watch.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            seen.append((m["msg_type"], m["content"].get("execution_state")))
        assert ("execute_input", None) in seen
        pid = user_kernel.frontend.evaluate("__import__('os').getpid()")
        user_kernel.api.restart_kernel(user_kernel.kernel_id)
        # the REST restart returns once the new process answers; its "starting" status may be published before
        # the server re-subscribes, so the proof is a user cell of the new process reaching the same watcher
        # (the new process may still be importing on a loaded machine: the reply is the event, 60 s its bound)
        assert user_kernel.frontend.evaluate("__import__('os').getpid()", timeout=60) != pid
        assert user_kernel.frontend.evaluate("'y' in globals()", timeout=60) is False
        # the server re-subscribes both websockets to the new process's iopub (ZeroMQ reconnects on its own
        # time, seconds on a loaded machine): wait for that event on each, as a frontend does after a restart
        assert _iopub_live(user_kernel.frontend.client) and _iopub_live(watch)
        user_kernel.run("z = 2")
        codes = []
        deadline = time.monotonic() + 30
        while "z = 2" not in codes and time.monotonic() < deadline:
            try:
                m = watch.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            if m["msg_type"] == "execute_input":
                codes.append(m["content"]["code"])
        assert "z = 2" in codes
    finally:
        watch.stop_channels()


def test_dropped_websocket_reconnects_and_requests_go_on(jserver, user_kernel):
    proxy = TcpProxy(jserver.port)
    try:
        spec = ServerSpec.parse(f"http://127.0.0.1:{proxy.port}{jserver.base_url}", token=jserver.token, env={})
        conn = KernelConnection.attach(KernelTarget.remote(spec, user_kernel.kernel_id), timeout=30)
        client: WebSocketKernelClient = conn.client
        try:
            assert conn.evaluate("6 * 7") == 42
            assert proxy.drop_all() >= 1  # between requests: the reader notices and reconnects
            _wait_for(lambda: client.reconnects >= 1 and client.state == "connected", 15, "a reconnection")
            assert conn.evaluate("6 * 8") == 48
            # dropped while a request runs: the reply was buffered by the server and replayed
            import threading

            threading.Timer(0.3, proxy.drop_all).start()
            assert conn.evaluate("__import__('time').sleep(1) or 'slept'", timeout=20) == "slept"
            assert client.reconnects >= 2 and conn.is_alive()
        finally:
            conn.close()
    finally:
        proxy.close()


def test_server_gone_is_a_clear_error(served, tmp_path):
    root = tmp_path / "gone"
    root.mkdir()
    srv = JupyterServerProcess(root)
    try:
        with start_server_kernel(srv.spec(), write_notebook(root / "nb.ipynb"), root=root) as k:
            assert k.connection is not None
            client: WebSocketKernelClient = k.connection.client
            client.reconnect_window = 2.0
            assert k.connection.evaluate("1") == 1
            srv.stop()
            with pytest.raises(ConnectionLost, match="could not be re-established|lost the kernel"):
                k.connection.evaluate("2", timeout=30)
            assert not k.connection.is_alive() and not client.hb_channel.is_beating()
            assert "Jupyter server" in client.lost_reason or "kernel" in client.lost_reason
    finally:
        srv.stop()
    assert live_kernels() == []


@pytest.mark.parametrize("variant", ["https+base_url", "legacy-json"])
def test_https_proxy_prefix_and_legacy_protocol(tmp_path, variant):
    root = tmp_path / "root"
    root.mkdir()
    if variant == "https+base_url":
        srv = JupyterServerProcess(root, base_url="/user/alice/", https=True)
    else:
        srv = JupyterServerProcess(root, legacy_protocol=True)
    try:
        assert srv.url.startswith("https://" if variant.startswith("https") else "http://")
        with start_server_kernel(srv.spec(), write_notebook(root / "nb.ipynb"), root=root) as k:
            assert k.connection is not None
            client: WebSocketKernelClient = k.connection.client
            assert client.protocol == (None if variant == "legacy-json" else "v1.kernel.websocket.jupyter.org")
            assert k.connection.run_cell("print('over', 'the', 'wire')").stdout == "over the wire\n"
            assert k.connection.evaluate("{'a': [1, 2.5, None]}") == {"a": [1, 2.5, None]}
        assert srv.kernel_ids() == []
        if variant.startswith("https"):  # an untrusted certificate is refused, with the reason
            untrusted = ServerSpec.parse(srv.url, token=srv.token, env={})
            with pytest.raises(ServerUnreachable, match="CERTIFICATE_VERIFY_FAILED|certificate"):
                ServerAPI(untrusted).check()
    finally:
        srv.stop()
