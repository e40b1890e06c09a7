"""`crane mcp --server URL --kernel-id K --token T`: the tools on a kernel behind a real Jupyter Server (the
user's, opened as JupyterLab would), over the server's REST + WebSocket API, named by its id or as the kernel of a
notebook (the server's sessions API); the kernel proven unchanged; a wrong token is a tool result with `isError`
(the handshake still completes)."""

from __future__ import annotations

import pytest

from crane.kernel.untouched import Untouched

from ..jupyter_server_proc import JupyterServerProcess
from ..remote.conftest import UserKernel, write_notebook
from .conftest import mcp_client, text_of


@pytest.fixture(scope="module")
def jserver(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcpserved") / "root"
    (root / "project").mkdir(parents=True)
    write_notebook(root / "project" / "analysis.ipynb")
    srv = JupyterServerProcess(root)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def user_kernel(jserver):
    k = UserKernel(jserver)
    k.run("rows = [1, 2, 3]\nlabel = 'x'")
    yield k
    k.close()


async def test_tools_on_a_server_kernel(jserver, user_kernel):
    with Untouched(user_kernel.frontend) as check:
        async with mcp_client("--server", jserver.url, "--kernel-id", user_kernel.kernel_id,
                              "--token", jserver.token) as client:
            facts = (await client.call_tool("crane_kernel_facts", {})).structured_content
            assert {"rows", "label"} <= set(facts["facts"]), facts
            assert facts["facts"]["rows"]["length"] == 3
            pred = (await client.call_tool("crane_check_code", {"code": "rows[5]", "mode": "static"})
                    ).structured_content
            assert pred["prediction"] == "crash" and pred["findings"][0]["ename"] == "IndexError", pred
            run = (await client.call_tool("crane_try_code", {"code": "rows.append(4)\nprint(len(rows))"})
                   ).structured_content
            assert run["outcome"] == "no-crash" and run["stdout"].strip() == "4", run
    assert check.unchanged, check.changes()


async def test_wrong_token_is_a_tool_error(jserver, user_kernel):
    async with mcp_client("--server", jserver.url, "--kernel-id", user_kernel.kernel_id, "--token", "wrong") as client:
        assert (await client.list_tools()).tools
        res = await client.call_tool("crane_kernel_facts", {})
        assert res.is_error and "token" in text_of(res).lower(), res.content


async def test_kernel_of_a_notebook_through_the_sessions_api(jserver, user_kernel):
    with Untouched(user_kernel.frontend) as check:
        async with mcp_client("--server", jserver.url, "--token", jserver.token, "--kernel-of",
                              "project/analysis.ipynb") as client:
            facts = (await client.call_tool("crane_kernel_facts", {"names": ["label"]})).structured_content
            assert facts["facts"]["label"]["value"] == "'x'", facts
            other = await client.call_tool("crane_kernel_facts", {})
            assert not other.is_error
        async with mcp_client("--server", jserver.url, "--token", jserver.token, "--kernel-of",
                              "project/none.ipynb") as client:
            res = await client.call_tool("crane_kernel_facts", {})
            assert res.is_error and "no session for project/none.ipynb" in text_of(res), res.content
    assert check.unchanged, check.changes()
