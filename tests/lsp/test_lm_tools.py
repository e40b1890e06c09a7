"""`crane/lmTool`: the agent tools of `crane mcp` through the language server, for VS Code's language-model tools
(lmTools.ts), on the kernel attached to an open notebook and its synced (unsaved) cells; the user's kernel
proven unchanged; bad arguments are `isError` results, bad params errors, and the server keeps serving."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pygls.exceptions import JsonRpcInvalidParams

from crane.kernel.untouched import Untouched

from .conftest import SETUP, Notebook, attach, last_status, wait_for


async def call(client, nb_uri: str, tool: str, input: dict) -> tuple[bool, Any]:
    res = await client.protocol.send_request_async("crane/lmTool", {"notebookUri": nb_uri, "tool": tool,
                                                                    "input": input})
    is_error = bool(getattr(res, "isError", False))
    return is_error, (res.text if is_error else json.loads(res.text))


async def test_lm_tools_on_the_open_notebook(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, [SETUP, "total = df['A'].sum()\n"])
    nb.executed(0, order=1)
    with Untouched(live_kernel.conn) as check:
        # before a kernel is attached: a tool error saying so
        err, text = await call(client, nb.uri, "crane_kernel_facts", {})
        assert err and "no kernel is attached" in str(text)
        await attach(client, nb, live_kernel)
        err, facts = await call(client, nb.uri, "crane_kernel_facts", {"names": ["df"]})
        assert not err and facts["facts"]["df"]["shape"] == [3, 2]
        err, pred = await call(client, nb.uri, "crane_check_cell", {"cell": 2})
        assert not err and pred["prediction"] == "crash", pred
        assert pred["findings"][0]["ename"] == "KeyError"
        nb.set_text(1, "total = df['a'].sum()\n")  # unsaved edit: the synced text is checked
        err, pred = await call(client, nb.uri, "crane_check_cell", {"cell": 2, "mode": "static"})
        assert not err and pred["prediction"] == "no-crash", pred
        err, run = await call(client, nb.uri, "crane_try_code", {"code": "df['a'] = 0\nprint(df['a'].sum())\n1/0"})
        assert not err and run["outcome"] == "crash" and run["stdout"].strip() == "0"
        err, code = await call(client, nb.uri, "crane_check_code", {"code": "df['zz']", "mode": "static"})
        assert not err and code["findings"][0]["ename"] == "KeyError"
        err, loop = await call(client, nb.uri, "crane_check_code", {"code": "while True:\n    pass", "budget_s": 2})
        assert not err and loop["prediction"] == "unknown" and loop["sandbox"]["outcome"] == "timeout", loop
    assert check.unchanged, check.changes()
    err, text = await call(client, nb.uri, "crane_try_code", {"code": 1})  # the model reads it and retries
    assert err and "invalid arguments" in str(text) and "code" in str(text)
    with pytest.raises(JsonRpcInvalidParams):
        await call(client, nb.uri, "crane_nope", {})
    err, text = await call(client, "file:///not/open.ipynb", "crane_kernel_facts", {})
    assert err and "not open" in str(text)
    err, facts = await call(client, nb.uri, "crane_kernel_facts", {"names": ["df"]})  # still serving
    assert not err


GATED = "import os, time\nwhile not os.path.exists({!r}):\n    time.sleep(0.05)\n"


async def test_lm_tools_ask_a_kernel_running_the_users_cell_nothing(client, live_kernel, notebook_path, tmp_path):
    """While the user's cell runs, a check answers at once from static facts, a run is `unavailable`, facts are an
    error saying so (as `crane mcp`); a silent request of the editor's (its variable view) is no cell: the tools
    still ask the kernel. Each wait ends on an event: the server's `busy` status (its watch saw the request start)."""
    from crane.mcp.backend import BUSY

    nb = Notebook(client, notebook_path, [SETUP, "total = df['A'].sum()\n"])
    nb.executed(0, order=1)
    await attach(client, nb, live_kernel)
    err, facts = await call(client, nb.uri, "crane_kernel_facts", {"names": ["df"]})
    assert not err and facts["facts"]["df"]["shape"] == [3, 2]
    user = live_kernel.owned.manager.client()  # the user's front-end
    user.start_channels()
    silent_gate, cell_gate = tmp_path / "silent-request-may-end", tmp_path / "user-cell-may-end"
    try:
        mark = len(client.kernel_status)
        user.execute(GATED.format(str(silent_gate)), silent=True, store_history=False)
        await wait_for(lambda: any(s.state == "busy" for s in client.kernel_status[mark:]),
                       what="the server's watch seeing the silent request start")
        # asked, not refused: the private request waits behind the silent one, which ends only when the gate opens
        err, text = await call(client, nb.uri, "crane_kernel_facts", {})
        assert err and BUSY not in text and "no reply within" in text, text
        silent_gate.write_text("open")
        await wait_for(lambda: last_status(client, nb.uri).state != "busy", what="the silent request's end")

        mark = len(client.kernel_status)
        user.execute(GATED.format(str(cell_gate)))
        await wait_for(lambda: any(s.state == "busy" for s in client.kernel_status[mark:]),
                       what="the server's watch seeing the user's cell start")
        # its execute_input follows its busy status on iopub: a call the watch answered before reading it is asked
        # and waits for its timeout; the next is refused
        for _ in range(3):
            err, text = await call(client, nb.uri, "crane_kernel_facts", {})
            assert err, text
            if BUSY in text:
                break
            assert "no reply within" in text, text
        assert BUSY in text, text
        err, pred = await call(client, nb.uri, "crane_check_cell", {"cell": 2})
        assert not err and pred["facts_mode"] == "static" and pred["facts_error"] == BUSY, pred
        err, run = await call(client, nb.uri, "crane_try_code", {"code": "df['a'].sum()"})
        assert not err and run["outcome"] == "unavailable" and run["reason"] == BUSY, run
        assert not cell_gate.exists()  # the cell cannot have ended
    finally:
        silent_gate.write_text("open")
        cell_gate.write_text("open")
    await wait_for(lambda: last_status(client, nb.uri).state != "busy", what="the user's cell's end")
    err, facts = await call(client, nb.uri, "crane_kernel_facts", {"names": ["df"]})
    assert not err and facts["facts"]["df"]["shape"] == [3, 2]
    user.stop_channels()
