"""Issue 42 (h5): `crane.fixCell` through the real server on a kernel whose crash is only "likely" in the sandbox
(the scripted tool-calling model of tests/agent over real HTTP).

The kernel refuses the fork (a stand-in `cupy`), so the agent's sandbox is a copy of its state. The notebook gave
`pandas.DataFrame` a property the copy cannot carry: the copy's `df.h5_tag` raises AttributeError, the kernel does
not. The result's proposal carries `crashCertain: false` and the reason, and its markdown says "Verified against a
likely crash" (before: a plain "fixed"). The kernel is unchanged.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
import pytest_asyncio
from lsprotocol import types

from tests.agent.fake_agent_server import FakeAgentServer, tool

from ..likely_copy import FIX, SETUP
from ..likely_copy import LIKELY as TARGET
from .conftest import TIMEOUT_SCALE, Notebook, start_client, stop_client, wait_for
from .test_sacred import fingerprint

MODEL = "openai/crane-agent-test"
pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")]


@pytest.fixture(scope="module")
def agent_server():
    server = FakeAgentServer().start()
    yield server
    server.stop()


@pytest_asyncio.fixture
async def client(agent_server, kernel, tmp_path):
    kernel.run(SETUP)
    agent_server.reset()
    c = await start_client(
        env={"JUPYTER_RUNTIME_DIR": str(tmp_path), "OPENAI_API_KEY": "sk-test", "NO_PROXY": "127.0.0.1,localhost"},
        init_options={"crane": {"llm": {"model": MODEL, "apiBase": agent_server.api_base, "retries": 0, "cache": False},
                                "agent": {"maxSteps": 6}}},
    )
    yield c
    await stop_client(c)


async def test_fix_cell_says_its_fix_is_verified_against_a_likely_crash(client, agent_server, kernel, notebook_path):
    nb = Notebook(client, notebook_path, [SETUP, TARGET])
    nb.executed(0, order=1)
    res = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": kernel.connection_file})
    assert res.attached, res.message
    before = fingerprint(kernel)
    agent_server.reset(tool("edit_cell", "read the column", cell=2, source=FIX),
                       tool("execute_cell", "check", cell=2),
                       tool("finish", "verified", explanation="df has the column 'h5_tags'."))
    task = asyncio.ensure_future(client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.fixCell", arguments=[nb.cells[1]])))
    await wait_for(lambda: agent_server.requests or task.done(), timeout=120, what="the agent's first model request")
    result = await asyncio.wait_for(task, 120 * TIMEOUT_SCALE)
    p = result["proposal"]
    assert result["status"] == "fixed" and p["fixed"] is True, result
    assert p["crashCertain"] is False and "patched the library class DataFrame" in p["crashDoubt"], p
    assert "**Verified against a likely crash**" in result["markdown"], result["markdown"]
    assert "fixed (verified against a likely crash)" in result["markdown"], result["markdown"]
    assert fingerprint(kernel) == before
