"""`crane mcp --http 127.0.0.1:0`: streamable HTTP on the loopback interface, every request gated by a bearer
token (generated and printed to stderr when not given): the SDK's HTTP client with the token is served, requests
without it or with a wrong one are refused (401) before they reach MCP."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from crane.kernel.untouched import Untouched

from .conftest import text_of


@pytest.fixture
def http_server(kernel):
    yield from _http_server("--connection-file", str(kernel.manager.connection_file))


def _http_server(*args: str):
    proc = subprocess.Popen(
        [sys.executable, "-m", "crane", "mcp", *args, "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    stderr = proc.stderr

    def pump() -> None:
        for ln in stderr:
            lines.put(ln)

    threading.Thread(target=pump, daemon=True).start()
    url = token = None
    while url is None or token is None:
        line = lines.get(timeout=60)  # the server prints its address, then the generated token
        if "serving" in line and " at " in line:
            url = line.rsplit(" at ", 1)[1].strip()
        elif "token:" in line:
            token = line.split("token:", 1)[1].strip()
    try:
        yield url, token
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.stdout is not None and proc.stdout.read() == ""  # nothing on stdout with --http


def _post(url: str, headers: dict[str, str], body: bytes = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
          ) -> int:
    return _post_reading(url, headers, body)[0]


def _post_reading(url: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def test_http_needs_the_token(http_server, conn):
    url, token = http_server
    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp") and len(token) >= 32
    assert _post(url, {}) == 401
    assert _post(url, {"Authorization": "Bearer wrong"}) == 401
    assert _post(url, {"Authorization": token}) == 401  # not a bearer header
    with Untouched(conn) as check:
        transport = streamable_http_client(url, http_client=create_mcp_http_client(
            headers={"Authorization": f"Bearer {token}"}))
        async with Client(transport) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "crane_try_code" in names
            res = await client.call_tool("crane_try_code", {"code": "print(n * 2)"})
            assert res.structured_content["outcome"] == "no-crash" and "84" in res.structured_content["stdout"]
    assert check.unchanged, check.changes()


async def test_http_refuses_a_client_without_the_token(http_server):
    url, _ = http_server
    with pytest.raises(Exception) as err:  # noqa: PT011 - an exception group: the SDK reports the 401 as an error
        async with Client(url) as client:
            await client.list_tools()
    assert err.group_contains(MCPError, depth=None)


async def test_http_starts_before_the_kernel_and_answers_malformed_json(tmp_path):
    import shutil

    from crane.kernel.manager import start_kernel

    cf = tmp_path / "kernel-later.json"
    gen = _http_server("--connection-file", str(cf))
    url, token = next(gen)
    try:
        status, body = _post_reading(url, {"Authorization": f"Bearer {token}"}, b'{"jsonrpc": "2.0", "id": 1, "me')
        assert status == 400 and b"-32700" in body, (status, body)  # answered, with a parse error
        transport = streamable_http_client(url, http_client=create_mcp_http_client(
            headers={"Authorization": f"Bearer {token}"}))
        async with Client(transport) as client:
            assert (await client.list_tools()).tools
            res = await client.call_tool("crane_kernel_facts", {})
            assert res.is_error and "does not exist" in text_of(res)
            k = start_kernel(tmp_path)
            try:
                k.connection.run_cell("later = 'yes'", timeout=60)
                shutil.copyfile(k.manager.connection_file, cf)
                with Untouched(k.connection) as check:
                    res = await client.call_tool("crane_kernel_facts", {"names": ["later"]})
                    assert not res.is_error and res.structured_content["facts"]["later"]["value"] == "'yes'"
                assert check.unchanged, check.changes()
            finally:
                k.shutdown()
    finally:
        gen.close()
