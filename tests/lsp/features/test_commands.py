"""`workspace/executeCommand` and `crane/attachKernel`: results, work-done progress, and clear errors for bad
arguments, closed notebooks, missing kernels and models."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from ..conftest import SETUP, Notebook, attach, crane_diags, wait_for


def _command(name: str, *args) -> types.ExecuteCommandParams:
    return types.ExecuteCommandParams(command=name, arguments=list(args))


async def test_diagnose_check_and_agent_commands_with_progress(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, [SETUP, "df['nope'].mean()\n", "y = 1\n"])
    await attach(client, nb, live_kernel)
    await wait_for(lambda: crane_diags(client, nb.cells[1]), what="KeyError")
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.diagnoseCell", arguments=[nb.cells[1]])
    )
    assert result["verdict"]["ename"] == "KeyError"
    assert result["cell"] == 2 and result["mode"] == "live"
    assert "KeyError" in result["markdown"] and "Evidence" in result["markdown"]
    assert "`a`" in result["markdown"]  # the runtime facts of df
    await wait_for(lambda: client.diagnoses, what="crane/diagnosis notification")
    assert client.diagnoses[-1].cellUri == nb.cells[1]
    kinds = {tuple(type(v).__name__ for v in reports) for reports in client.progress_reports.values()}
    assert ("WorkDoneProgressBegin", "WorkDoneProgressReport", "WorkDoneProgressReport", "WorkDoneProgressEnd") in kinds

    check = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.checkNotebook", arguments=[nb.uri])
    )
    assert check["crashes"] == 1 and [c["cell"] for c in check["cells"]] == [1, 2, 3]
    assert check["cells"][1]["findings"][0]["ename"] == "KeyError"

    with pytest.raises(JsonRpcException, match="the repair agent needs a model: set crane.llm.model"):
        await client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.fixCell", arguments=[nb.cells[1]]))
    stopped = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.stopAgent", arguments=[]))
    assert stopped == {"stopped": False}
    with pytest.raises(JsonRpcException, match="cellUri"):
        await client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.diagnoseCell", arguments=[]))
    with pytest.raises(JsonRpcException, match="not a cell of an open notebook"):
        await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="crane.diagnoseCell", arguments=["vscode-notebook-cell:/x#y"])
        )


async def test_attach_errors_are_replies(client, notebook_path, tmp_path):
    nb = Notebook(client, notebook_path, ["x = 1\n"])
    res = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": str(tmp_path / "kernel-missing.json")}
    )
    assert res.attached is False and "not found" in res.message
    with pytest.raises(JsonRpcException, match="connectionFile"):
        await client.protocol.send_request_async("crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": 3})
    with pytest.raises(JsonRpcException, match="notebookUri"):
        await client.protocol.send_request_async("crane/attachKernel", {"connectionFile": "x"})
    with pytest.raises(JsonRpcException, match="not open"):
        await client.protocol.send_request_async("crane/attachKernel", {"notebookUri": "file:///nope.ipynb", "connectionFile": "x"})


async def test_commands_that_need_a_kernel_or_a_run_say_so(static_client, tmp_path):
    client = static_client
    nb = Notebook(client, tmp_path / "cmds.ipynb", ["# notes", "x = 1\n"], kinds=["markdown", "code"])
    await wait_for(lambda: crane_diags(client, nb.cells[1]) is not None, what="checked")
    with pytest.raises(JsonRpcException, match="needs an attached kernel"):
        await client.workspace_execute_command_async(_command("crane.runSpeculatively", nb.cells[1]))
    with pytest.raises(JsonRpcException, match="not a Python code cell"):
        await client.workspace_execute_command_async(_command("crane.diagnoseCell", nb.cells[0]))
    with pytest.raises(JsonRpcException, match="must be a string"):
        await client.workspace_execute_command_async(_command("crane.diagnoseCell", 42))
    with pytest.raises(JsonRpcException, match="not open"):
        await client.workspace_execute_command_async(_command("crane.checkNotebook", "file:///nowhere.ipynb"))
    assert await client.workspace_execute_command_async(_command("crane.continueAgent", "no-such-run")) == {"continued": False}
    by_name = await client.workspace_execute_command_async(_command("crane.diagnoseCell", {"cellUri": nb.cells[1]}))
    assert by_name["cell"] == 2 and by_name["verdict"] is None and by_name["mode"] == "static"
    missing = await client.workspace_execute_command_async(
        _command("crane.attachKernel", nb.uri, str(tmp_path / "kernel-none.json"))
    )
    assert missing["attached"] is False and "not found" in missing["message"]
