"""The language server attached to a kernel behind a Jupyter Server (`crane/attachKernel` with
{serverUrl, kernelId}, or a remote kernel's connection file name with `crane.jupyterServer.url` set): live
squiggles, a hover naming the remote kernel, a restart through the REST API noticed, and the user's kernel
unchanged (no output, same execution count)."""

from __future__ import annotations

import time

import pytest_asyncio
from lsprotocol import types

from ..jupyter_server_proc import TcpProxy
from ..lsp.conftest import Notebook, crane_diags, last_status, start_client, stop_client, wait_for
from ..sacred import IopubWatcher, kernel_state


@pytest_asyncio.fixture
async def client(jserver, tmp_path):
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_TOKEN": jserver.token},
                           init_options={"crane": {"jupyterServer": {"url": jserver.url}}})
    yield c
    await stop_client(c)


async def test_lsp_on_a_server_kernel(client, jserver, served, user_kernel):
    user_kernel.run("rows = [{'a': 1}]\nconfig = {'lr': 0.1}\nmissing_later = 1")
    watcher = IopubWatcher(user_kernel.target)
    try:
        time.sleep(0.3)
        watcher.clear()
        before = kernel_state(user_kernel.frontend)
        nb = Notebook(client, served / "project" / "analysis.ipynb",
                      ["rows = [{'a': 1}]\n", "x = config['momentum']\n", "print(undefined_name)\n", "print(config)\n"])
        result = await client.protocol.send_request_async(
            "crane/attachKernel", {"notebookUri": nb.uri, "serverUrl": jserver.url, "kernelId": user_kernel.kernel_id})
        assert result.attached, result.message
        assert result.kernel.serverUrl == jserver.url and result.kernel.kernelId == user_kernel.kernel_id
        assert result.kernel.connectionFile is None and result.kernel.description == f"remote kernel ({jserver.url})"
        status = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state in ("attached", "idle") and s,
                                what="attached")
        assert f"remote kernel ({jserver.url})" in status.message
        d = await wait_for(lambda: (x := crane_diags(client, nb.cells[1])) and x[0].data["facts"] == "live" and x,
                           20, what="a live squiggle on cell 2")
        assert d[0].message.startswith("KeyError") and "momentum" in d[0].message
        d = await wait_for(lambda: (x := crane_diags(client, nb.cells[2])) and x[0].data["facts"] == "live" and x,
                           20, what="a live NameError squiggle on cell 3")
        assert d[0].code == "undefined-name"
        hover = await client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=nb.cells[3]), position=types.Position(0, 8)))
        assert hover is not None and "config" in hover.contents.value
        assert f"remote kernel ({jserver.url})" in hover.contents.value
        # the user runs a cell in their own frontend: the squiggle follows the kernel's state
        user_kernel.run("config['momentum'] = 0.9")
        await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], 20, what="KeyError gone")
        user_kernel.run("config = {'lr': 0.1}")
        await wait_for(lambda: crane_diags(client, nb.cells[1]), 20, what="KeyError back")
        time.sleep(0.5)
        # the user's kernel saw only busy/idle from CRANE: its own two runs are the only outputs
        own = {m["parent_header"].get("msg_id") for m in watcher.messages if m["msg_type"] == "execute_input"}
        assert len(own) == 2
        assert [m for m in watcher.outputs() if m["parent_header"].get("msg_id") not in own] == []
        after = kernel_state(user_kernel.frontend)
        assert after["count"] == before["count"] + 2 and after["In"][:len(before["In"])] == before["In"]

        # a restart through the REST API: noticed, the fresh namespace re-checked
        user_kernel.api.restart_kernel(user_kernel.kernel_id)
        d = await wait_for(lambda: (x := crane_diags(client, nb.cells[3])) and x[0].code == "undefined-name" and x,
                           60, what="config undefined after the restart")
        assert "config" in d[0].message
        status = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state in ("attached", "idle") and s,
                                30, what="reattached after the restart")
        assert status.kernel.kernelId == user_kernel.kernel_id
    finally:
        watcher.close()
        user_kernel.run("rows = [{'a': 1}]\nconfig = {'lr': 0.1}")


async def test_a_remote_connection_file_attaches_through_the_configured_server(client, jserver, served, user_kernel):
    nb = Notebook(client, served / "project" / "analysis.ipynb", ["print(not_defined_anywhere)\n"])
    remote_file = f"/home/someone/.local/share/jupyter/runtime/kernel-{user_kernel.kernel_id}.json"
    result = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": remote_file})
    assert result.attached, result.message
    assert result.kernel.kernelId == user_kernel.kernel_id and result.kernel.serverUrl == jserver.url
    bad = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "serverUrl": jserver.url,
                               "kernelId": "0b0c2d6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e"})
    assert not bad.attached and "has no kernel" in bad.message


async def test_dropped_connection_reconnects_and_a_gone_server_comes_back(jserver, served, user_kernel, tmp_path):
    """Through a relay the test controls: cut connections are re-established (the squiggles stay live); a server
    that stays unreachable makes the kernel 'dead' (static-only diagnostics); when it answers again the
    notebook is reattached."""
    proxy = TcpProxy(jserver.port)
    url = f"http://127.0.0.1:{proxy.port}{jserver.base_url}"
    client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_TOKEN": jserver.token,
                                     "CRANE_LSP_DISCOVERY_INTERVAL_MS": "500", "CRANE_JUPYTER_RECONNECT_S": "3"},
                                init_options={"crane": {"jupyterServer": {"url": url}}})
    try:
        user_kernel.run("relay_var = {'k': 1}")
        nb = Notebook(client, served / "project" / "analysis.ipynb", ["relay_var['missing']\n"])
        result = await client.protocol.send_request_async(
            "crane/attachKernel", {"notebookUri": nb.uri, "kernelId": user_kernel.kernel_id})  # serverUrl: the setting
        assert result.attached, result.message
        await wait_for(lambda: (x := crane_diags(client, nb.cells[0])) and x[0].data["facts"] == "live" and x, 20,
                       what="a live KeyError")
        assert proxy.drop_all() >= 2  # the probe's and the watcher's websockets
        user_kernel.run("relay_var = {'missing': 1}")  # seen by the watcher once it has reconnected
        await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], 30, what="cleared after the reconnection")
        proxy.pause()  # the server is gone for CRANE
        status = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state == "dead" and s, 40,
                                what="the kernel reported dead")
        assert "static-only" in status.message or "died" in status.message
        user_kernel.run("relay_var = {'k': 2}")
        proxy.resume()
        await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state in ("attached", "idle") and s, 40,
                       what="reattached when the server answers again")
        d = await wait_for(lambda: (x := crane_diags(client, nb.cells[0])) and x[0].data["facts"] == "live" and x, 30,
                           what="live facts again")
        assert d[0].message.startswith("KeyError")
    finally:
        await stop_client(client)
        proxy.close()
        user_kernel.run("rows = [{'a': 1}]\nconfig = {'lr': 0.1}")
