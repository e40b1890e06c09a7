"""The repair agent through the server (`crane.fixCell`, `crane.stopAgent`, `crane.continueAgent`) against the
scripted tool-calling model of tests/agent over real HTTP, executing in fork sandboxes of a real kernel:
streamed `crane/agentStep` notifications, the returned WorkspaceEdit on the right cell URI, stop mid-run,
step mode, and the user's kernel left exactly as it was."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.agent.fake_agent_server import FakeAgentServer, tool

from ..sacred import IopubWatcher
from .conftest import TIMEOUT_SCALE, Notebook, crane_diags, start_client, stop_client, wait_for
from .test_sacred import fingerprint

MODEL = "openai/crane-agent-test"
SETUP = 'import pandas as pd\ndf = pd.DataFrame({"age": [30, 40, 50], "name": ["a", "b", "c"]})'
TARGET = 'mean_age = df["Age"].mean()\nprint(mean_age)'
FIX = 'mean_age = df["age"].mean()\nprint(mean_age)'
# A run's first model request comes after the server imports litellm (about 4 s of CPU: 40 s at load 12, over
# 100 s at load 25): its wait is bounded for that (scaled by wait_for), later ones as any other; and the tests
# get pytest's timeout twice over, so that bound, not pytest's, is what a hung run meets.
FIRST_REQUEST_S = 80
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def agent_server():
    server = FakeAgentServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def agent_kernel(kernel):
    kernel.run(SETUP)
    kernel.conn.run_cell(TARGET)  # the user ran the failing cell: KeyError
    return kernel


@pytest_asyncio.fixture
async def client(agent_server, agent_kernel, tmp_path):
    agent_server.reset()
    c = await start_client(
        env={"JUPYTER_RUNTIME_DIR": str(tmp_path), "OPENAI_API_KEY": "sk-test", "NO_PROXY": "127.0.0.1,localhost"},
        init_options={"crane": {"llm": {"model": MODEL, "apiBase": agent_server.api_base, "retries": 0, "cache": False},
                                "agent": {"maxSteps": 6}}},
    )
    yield c
    await stop_client(c)


async def open_notebook(client, kernel, notebook_path) -> Notebook:
    nb = Notebook(client, notebook_path, ["# Ages", SETUP, TARGET], kinds=["markdown", "code", "code"])
    nb.executed(1, order=1)
    nb.executed(2, order=2, success=False)
    res = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": kernel.connection_file}
    )
    assert res.attached, res.message
    await wait_for(lambda: crane_diags(client, nb.cells[2]), what="the rules' KeyError")
    return nb


def fix(client, *args):
    return asyncio.ensure_future(
        client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.fixCell", arguments=list(args)))
    )


async def command(client, name, *args):
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=name, arguments=list(args)))


async def test_fix_cell_streams_steps_and_returns_an_edit_leaving_the_kernel_untouched(client, agent_server, agent_kernel, notebook_path):
    nb = await open_notebook(client, agent_kernel, notebook_path)
    before = fingerprint(agent_kernel)
    recorder = IopubWatcher(agent_kernel.connection_file)
    try:
        agent_server.reset(tool("edit_cell", "the column is lower case", cell=3, source=FIX),
                           tool("finish", "verified", explanation="df has 'age', not 'Age'."))
        task = fix(client, nb.cells[2])
        await wait_for(lambda: agent_server.requests or task.done(), timeout=FIRST_REQUEST_S,
                       what="the agent's first model request")
        result = await asyncio.wait_for(task, 40 * TIMEOUT_SCALE)
    finally:
        recorder.close()
    assert result["status"] == "fixed" and result["proposal"]["fixed"] is True
    run_id = result["runId"]
    steps = client.agent_steps
    assert [(s.step, s.action, s.phase, s.status) for s in steps] == [(1, "edit_cell", "done", "ok"), (2, "finish", "done", "ok")]
    assert all(s.runId == run_id for s in steps) and steps[0].cell == 3 and steps[0].code == FIX
    assert steps[0].reflection == "the column is lower case" and steps[0].usage.promptTokens == 1200
    assert steps[1].elapsedS >= 0
    p = result["proposal"]
    assert p["target"] == 3 and p["edits"] == [{"cell": 3, "old": TARGET, "new": FIX}]
    assert p["evidence"]["sandbox"] == "fork" and p["evidence"]["status"] == "ok" and "40.0" in p["evidence"]["stdout"]
    # the model saw the whole notebook, markdown cell included, with the real numbers
    context = agent_server.requests[0]["messages"][1]["content"]
    assert "Cell 3 [2]  <- TARGET" in context and "KeyError" in context
    edit = result["edit"]
    (change,) = edit["documentChanges"]
    assert change["textDocument"] == {"uri": nb.cells[2], "version": 1}
    (text_edit,) = change["edits"]
    assert text_edit["newText"] == 'mean_age = df["age"].mean()' and text_edit["range"]["start"]["line"] == 0
    ann = edit["changeAnnotations"][text_edit["annotationId"]]
    assert ann["needsConfirmation"] is True and "cell 3" in ann["label"]
    assert "fixed" in result["markdown"] and '+mean_age = df["age"].mean()' in result["markdown"]
    # the user's kernel: same namespace (keys and ids), execution count, In/Out; nothing but status on iopub
    assert fingerprint(agent_kernel) == before
    assert {m["msg_type"] for m in recorder.messages} <= {"status"}
    assert recorder.messages  # it did see the sandbox's private requests go busy/idle


async def test_stop_agent_mid_run(client, agent_server, agent_kernel, notebook_path):
    nb = await open_notebook(client, agent_kernel, notebook_path)
    slow = tool("inspect", "look", expression="df.shape")
    slow.delay_s = 0.3
    agent_server.reset(default=slow)
    task = fix(client, nb.cells[2], {"goal": "make it work"})
    step = await wait_for(lambda: client.agent_steps and client.agent_steps[0], timeout=FIRST_REQUEST_S, what="a first step")
    stopped = await command(client, "crane.stopAgent", step.runId)
    assert stopped == {"stopped": True}
    result = await asyncio.wait_for(task, 20 * TIMEOUT_SCALE)
    assert result["status"] == "stopped" and result["edit"] is None
    assert result["proposal"]["stopReason"] == "stopped by the user" and result["proposal"]["steps"] < 6
    assert await command(client, "crane.stopAgent", step.runId) == {"stopped": False}  # not running any more


async def test_step_mode_waits_for_continue(client, agent_server, agent_kernel, notebook_path):
    nb = await open_notebook(client, agent_kernel, notebook_path)
    agent_server.reset(tool("edit_cell", "fix the name", cell=3, source=FIX),
                       tool("finish", "done", explanation="use the real column name"))
    task = fix(client, nb.cells[2], {"stepMode": True})
    first = await wait_for(lambda: client.agent_steps and client.agent_steps[0], timeout=FIRST_REQUEST_S,
                           what="a proposed step")
    assert first.phase == "proposed" and first.action == "edit_cell" and first.code == FIX
    await asyncio.sleep(0.5)
    assert len(client.agent_steps) == 1 and len(agent_server.requests) == 1  # nothing ran, nothing more asked
    assert await command(client, "crane.continueAgent", "no-such-run") == {"continued": False}
    assert await command(client, "crane.continueAgent", first.runId) == {"continued": True}
    await wait_for(lambda: [s.phase for s in client.agent_steps] == ["proposed", "done", "proposed"], timeout=60,
                   what="the edit ran, the finish is proposed")
    assert client.agent_steps[1].status == "ok"
    assert await command(client, "crane.continueAgent", first.runId) == {"continued": True}
    result = await asyncio.wait_for(task, 40 * TIMEOUT_SCALE)
    assert result["status"] == "fixed" and result["edit"]["documentChanges"][0]["textDocument"]["uri"] == nb.cells[2]


async def test_fix_cell_bad_calls(client, agent_kernel, notebook_path):
    nb = await open_notebook(client, agent_kernel, notebook_path)
    with pytest.raises(JsonRpcException, match="not a Python code cell"):
        await command(client, "crane.fixCell", nb.cells[0])
    with pytest.raises(JsonRpcException, match="invalid options"):
        await command(client, "crane.fixCell", nb.cells[2], {"stepMode": "yes"})
    with pytest.raises(JsonRpcException, match="runId"):
        await command(client, "crane.continueAgent")
    t0 = time.monotonic()
    assert await command(client, "crane.stopAgent") == {"stopped": False}
    assert time.monotonic() - t0 < 5 * TIMEOUT_SCALE  # answered at once, not after a wait for a run


async def test_cancelling_the_request_stops_the_run(client, agent_server, agent_kernel, notebook_path):
    nb = await open_notebook(client, agent_kernel, notebook_path)
    slow = tool("inspect", "look", expression="df.shape")
    slow.delay_s = 0.3
    agent_server.reset(default=slow)
    pending, progress = set(client.protocol._request_futures), set(client.progress_reports)
    task = fix(client, nb.cells[2], {"goal": "make it work"})
    await wait_for(lambda: client.agent_steps, timeout=FIRST_REQUEST_S, what="a first step")
    (msg_id,) = set(client.protocol._request_futures) - pending
    client.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
    with pytest.raises(JsonRpcException):
        await asyncio.wait_for(task, 10 * TIMEOUT_SCALE)
    # the run's work-done progress ends when its thread has ended (the handler waits for it): from then on no model
    # request can come (counting after a fixed 1.5 s pause raced a request still in flight on a loaded machine)
    await wait_for(lambda: any(t not in progress and r and isinstance(r[0], types.WorkDoneProgressBegin)
                               and r[0].title.startswith("CRANE agent") and isinstance(r[-1], types.WorkDoneProgressEnd)
                               for t, r in client.progress_reports.items()), timeout=60, what="the run's end")
    n = len(agent_server.requests)
    assert n < 6, n  # stopped early: no more model requests (a run that went on asks every ~0.3 s, up to 10 steps)
    await asyncio.sleep(0.5)
    assert len(agent_server.requests) == n
