"""`crane/lmTool`: the agent tools of `crane mcp` through the language server, for VS Code's language-model tools
(lmTools.ts), on the kernel attached to an open notebook and its synced (unsaved) cells; the user's kernel
proven unchanged; bad arguments are `isError` results, bad params errors, and the server keeps serving."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pygls.exceptions import JsonRpcInvalidParams

from crane.kernel.untouched import Untouched

from .conftest import SETUP, Notebook, attach


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
