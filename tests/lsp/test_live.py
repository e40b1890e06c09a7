"""Attached to a real kernel: live squiggles that follow the kernel's state, hover, code actions, commands
with progress, a busy kernel, discovery by `__vsc_ipynb_file__`."""

from __future__ import annotations

import time

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from .conftest import Kernel, Notebook, crane_diags, last_status, start_client, stop_client, wait_for

SETUP = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', None]})\n"


@pytest.fixture(scope="module")
def live_kernel(kernel):
    kernel.run(SETUP)
    return kernel


@pytest_asyncio.fixture
async def client(live_kernel, tmp_path):
    # An empty runtime dir: the kernel is reached only through crane/attachKernel here.
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)})
    yield c
    await stop_client(c)


async def attach(client, nb: Notebook, kernel: Kernel):
    result = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": kernel.connection_file}
    )
    assert result.attached, result.message
    assert result.kernel.source == "request"
    return result


async def test_live_squiggles_follow_the_kernel(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, [SETUP, "total = df['c'].sum()\n", "print(model_x)\n"])
    await attach(client, nb, live_kernel)
    status = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state in ("attached", "idle") and s, what="attached")
    assert status.kernel.connectionFile == live_kernel.connection_file

    d1 = await wait_for(lambda: crane_diags(client, nb.cells[1]), what="KeyError on cell 2")
    assert d1[0].message.startswith("KeyError") and d1[0].range.start.line == 0
    d2 = await wait_for(
        lambda: (d := crane_diags(client, nb.cells[2])) and d[0].data["facts"] == "live" and d, what="live NameError on cell 3"
    )
    assert d2[0].code == "undefined-name"

    # The user runs a cell (another client of the kernel, as VS Code would): the squiggle goes away.
    live_kernel.run("model_x = 42")
    await wait_for(lambda: crane_diags(client, nb.cells[2]) == [], what="NameError gone after the kernel defined it")
    live_kernel.run("df['c'] = 0")
    await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], what="KeyError gone after the column appeared")
    live_kernel.run("del model_x")
    await wait_for(lambda: crane_diags(client, nb.cells[2]), what="NameError back after del")

    # An edit re-checks against the live kernel.
    nb.set_text(2, "print(df.shape)\nprint(df['zzz'])\n")
    d = await wait_for(lambda: (x := crane_diags(client, nb.cells[2])) and x[0].range.start.line == 1 and x, what="KeyError on line 2")
    assert d[0].message.startswith("KeyError")


async def test_execution_summary_triggers_a_recheck(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["summary_var = 1\n", "print(summary_var)\n"])
    await attach(client, nb, live_kernel)
    await wait_for(lambda: crane_diags(client, nb.cells[1]), what="NameError summary_var")
    # The kernel gets the variable silently (no iopub execute_input): only the client's summary tells us.
    live_kernel.conn.private({}, code="summary_var = 1")
    nb.executed(0, order=99)
    await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], what="cleared after the execution summary")
    live_kernel.conn.private({}, code="del summary_var")


async def test_hover_shows_runtime_facts(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["x = df.shape\n"])
    await attach(client, nb, live_kernel)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=nb.cells[0]), position=types.Position(0, 5))
    )
    assert hover is not None
    text = hover.contents.value
    assert "DataFrame" in text and "`a`" in text and "(3, " in text
    assert hover.range.start.character == 4 and hover.range.end.character == 6
    # a name the kernel does not have (yet)
    unknown = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=nb.cells[0]), position=types.Position(0, 0))
    )
    assert unknown.contents.value == "**x**: not defined in the kernel"
    # an attribute chain: facts of the attribute's value, or its absence
    nb.set_text(0, "df.columns\ndf.no_such_attr\n# df in a comment\n")
    await wait_for(lambda: crane_diags(client, nb.cells[0]) and crane_diags(client, nb.cells[0])[0].range.start.line == 1, what="AttributeError")
    attr = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=nb.cells[0]), position=types.Position(1, 6))
    )
    assert "no such attribute" in attr.contents.value
    comment = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=nb.cells[0]), position=types.Position(2, 3))
    )
    assert comment is None
    # unknown cell URI: no hover, no crash
    assert await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri="vscode-notebook-cell:/nope#x"), position=types.Position(0, 0))
    ) is None


async def test_code_actions_and_commands_with_progress(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, [SETUP, "df['nope'].mean()\n", "y = 1\n"])
    await attach(client, nb, live_kernel)
    diags = await wait_for(lambda: crane_diags(client, nb.cells[1]), what="KeyError")
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=nb.cells[1]),
            range=diags[0].range,
            context=types.CodeActionContext(diagnostics=diags),
        )
    )
    # pytest-lsp gotcha: CodeActions with a command come back as Command objects; check titles.
    titles = [a.title for a in actions]
    assert titles == ["Diagnose with CRANE", "Fix with CRANE agent", "Run speculatively with CRANE"]
    clean = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=nb.cells[2]),
            range=types.Range(types.Position(0, 0), types.Position(0, 1)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert [a.title for a in clean] == titles  # offered with or without a diagnostic

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


async def test_busy_kernel_uses_stale_facts_without_waiting(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["print(df.shape)\nprint(never_defined)\n"])
    await attach(client, nb, live_kernel)
    await wait_for(
        lambda: (d := crane_diags(client, nb.cells[0])) and len(d) == 1 and d[0].data["facts"] == "live",
        what="NameError from live facts",
    )
    msg_id = live_kernel.conn.client.execute("import time; time.sleep(3)")  # a long user cell
    try:
        await wait_for(lambda: last_status(client, nb.uri).state == "busy", what="busy status")
        t0 = time.monotonic()
        nb.set_text(0, "\nprint(df.shape)\nprint(never_defined)\n")
        d = await wait_for(
            lambda: (x := crane_diags(client, nb.cells[0])) and x[0].range.start.line == 2 and x,
            timeout=2.5,
            what="diagnostics while busy",
        )
        assert time.monotonic() - t0 < 1.5  # did not wait for the 3 s cell
        assert {x.data["facts"] for x in d} == {"stale"}
        await wait_for(lambda: last_status(client, nb.uri).stale, what="status says stale")
    finally:
        live_kernel.conn._shell_reply(msg_id, 10, "sleep")
    await wait_for(lambda: last_status(client, nb.uri).state == "idle", what="idle again")


async def test_discovery_by_vsc_ipynb_file(kernel, runtime_dir, notebook_path, tmp_path):
    # A second kernel in the same runtime dir, for another notebook: discovery must pick the right one.
    other = Kernel(runtime_dir, tmp_path / "other.ipynb")
    try:
        client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(runtime_dir)})
        try:
            nb = Notebook(client, notebook_path, ["print(df.shape)\n"])
            status = await wait_for(
                lambda: (s := last_status(client, nb.uri)) and s.kernel is not None and s, timeout=15, what="discovered kernel"
            )
            assert status.kernel.source == "discovery"
            assert status.kernel.connectionFile == kernel.connection_file
            assert status.kernel.notebookPath == str(notebook_path)
            nb2 = Notebook(client, tmp_path / "other.ipynb", ["print(1)\n"])
            s2 = await wait_for(lambda: (s := last_status(client, nb2.uri)) and s.kernel is not None and s, timeout=15, what="second")
            assert s2.kernel.connectionFile == other.connection_file
        finally:
            await stop_client(client)
    finally:
        other.shutdown()


async def test_configuration_change_of_mode_and_kernel(client, live_kernel, notebook_path, tmp_path):
    nb = Notebook(client, notebook_path, ["print(df.shape)\n"])
    await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state == "static-only", what="no kernel found")
    # crane.kernel.connectionFile attaches (order (c))
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"crane": {"mode": "static", "kernel": {"connectionFile": live_kernel.connection_file}}})
    )
    s = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.kernel is not None and s, timeout=15, what="attached by setting")
    assert s.kernel.source == "setting"
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="df known to the kernel")
    # an invalid value: one warning, that key's default, the rest kept
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"crane": {"mode": "turbo", "kernel": {"connectionFile": live_kernel.connection_file}}})
    )
    await wait_for(lambda: any("crane.mode" in m.message for m in client.messages), what="warning about crane.mode")
    assert last_status(client, nb.uri).kernel is not None
