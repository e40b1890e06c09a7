"""Static-only mode (no kernel found): squiggles on the right cell and line, cleared when fixed, structure
changes, capabilities, settings.

One server for the module (a server's start is most of these tests' CPU): each test opens a notebook of its own
in a folder of its own and reads only that notebook's diagnostics, status and progress tokens; the settings
test starts its own (its initialization options are the point)."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from .conftest import TIMEOUT_SCALE, Notebook, crane_diags, last_status, start_client, stop_client, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_capabilities(shared_static_client):
    """(How fast `initialize` answers is a benchmark's, benchmarks/lsp_bench.py: a wall-clock bound here failed
    on a loaded machine.)"""
    client = shared_static_client
    caps = client.init_result.capabilities  # set by start_client
    assert caps.notebook_document_sync is not None
    selectors = caps.notebook_document_sync.notebook_selector
    assert {s.notebook for s in selectors} == {"jupyter-notebook"}  # not the interactive window
    assert caps.notebook_document_sync.save is True
    assert caps.hover_provider
    assert caps.code_action_provider
    assert set(caps.execute_command_provider.commands) >= {
        "crane.checkNotebook",
        "crane.diagnoseCell",
        "crane.fixCell",
        "crane.stopAgent",
        "crane.attachKernel",
        "crane.runSpeculatively",
    }


async def test_squiggle_on_right_cell_and_line_then_cleared(shared_static_client, tmp_path):
    client = shared_static_client
    nb = Notebook(
        client,
        tmp_path / "nb.ipynb",
        ["import os\ndata = [1, 2, 3]\n", "# markdown", "total = sum(data)\nprint(totl)\n"],
        kinds=["code", "markdown", "code"],
    )
    diags = await wait_for(lambda: crane_diags(client, nb.cells[2]), what="diagnostics on cell 3")
    assert len(diags) == 1
    d = diags[0]
    assert d.source == "crane"
    assert d.code == "undefined-name"
    assert d.message.startswith("NameError")
    assert d.range.start.line == 1 and d.range.start.character == 6
    assert crane_diags(client, nb.cells[0]) == []  # clean cells are published too (empty)
    status = await wait_for(lambda: last_status(client, nb.uri), what="kernel status")
    assert status.state == "static-only"

    nb.set_text(2, "total = sum(data)\nprint(total)\n")
    await wait_for(lambda: crane_diags(client, nb.cells[2]) == [], what="the squiggle to disappear")


async def test_syntax_error_and_missing_module_and_file(shared_static_client, tmp_path):
    client = shared_static_client
    nb = Notebook(
        client,
        tmp_path / "s.ipynb",
        ["def f(:\n    pass\n", "import no_such_module_crane\n", "import pandas as pd\ndf = pd.read_csv('missing.csv')\n"],
    )
    d0 = await wait_for(lambda: crane_diags(client, nb.cells[0]), what="SyntaxError")
    assert d0[0].message.startswith("SyntaxError") and d0[0].range.start.line == 0
    d1 = await wait_for(lambda: crane_diags(client, nb.cells[1]), what="ModuleNotFoundError")
    assert d1[0].message.startswith("ModuleNotFoundError")


async def test_invalid_settings_fall_back_with_a_message(tmp_path):
    client = await start_client(
        env={"JUPYTER_RUNTIME_DIR": str(tmp_path)},
        init_options={"crane": {"speculative": {"budgetSeconds": "soon", "enabled": False}, "hover": "no",
                                "agent": {"maxSteps": 0}, "mode": "fast", "unknownKey": 1}},
        mode=None,
    )
    try:
        await wait_for(lambda: client.messages, what="a settings warning")
        await asyncio.sleep(0.2)
        assert len(client.messages) == 1  # one warning for the whole configuration
        text = client.messages[0].message
        for key in ("crane.speculative.budgetSeconds", "crane.hover", "crane.agent.maxSteps", "crane.mode"):
            assert key in text, (key, text)
        assert "crane.speculative.enabled" not in text and "unknownKey" not in text
        assert client.messages[0].type == types.MessageType.Warning
        nb = Notebook(client, tmp_path / "x.ipynb", ["print(nope)\n"])  # defaults still work
        await wait_for(lambda: crane_diags(client, nb.cells[0]), what="diagnostics with default settings")
    finally:
        await stop_client(client)


async def test_missing_file_relative_to_the_notebook_folder(shared_static_client, tmp_path):
    client = shared_static_client
    (tmp_path / "present.csv").write_text("a\n1\n")
    nb = Notebook(
        client,
        tmp_path / "f.ipynb",
        ["import pandas as pd\ndf = pd.read_csv('absent.csv')\n", "import pandas as pd\ndf = pd.read_csv('present.csv')\n"],
    )
    d = await wait_for(lambda: crane_diags(client, nb.cells[0]), what="FileNotFoundError")
    assert d[0].message.startswith("FileNotFoundError") and d[0].range.start.line == 1
    await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], what="no squiggle for a file that exists")


async def test_check_notebook_reports_progress_and_can_be_cancelled(shared_static_client, tmp_path):
    import asyncio

    client = shared_static_client
    n = 400
    nb = Notebook(client, tmp_path / "big.ipynb", [f"v{i} = v{i - 1} + 1\n" if i else "v0 = 0\n" for i in range(n)])
    await wait_for(lambda: crane_diags(client, nb.cells[-1]) is not None, timeout=30, what="initial check")
    # the cancel is sent once the check reports progress; a check that ended before the cancel reached the server (the
    # test starved on a loaded machine while the server went through every cell) is a legitimate outcome, not
    # cancelled: asked again, up to three times (a check that ignored cancels would never be)
    for _ in range(3):
        seen = set(client.progress_reports)
        task = asyncio.ensure_future(client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="crane.checkNotebook", arguments=[nb.uri])))
        token = await wait_for(lambda seen=seen: next(
            (t for t, reports in client.progress_reports.items() if t not in seen and len(reports) >= 2), None),
            what="progress reports")
        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
        result = await asyncio.wait_for(task, 30 * TIMEOUT_SCALE)  # (the bound ends a failing test)
        if result["cancelled"]:
            break
        assert len(result["cells"]) == n, result  # it ended before the cancel came
    assert result["cancelled"] is True
    assert 0 < len(result["cells"]) < n
    reports = client.progress_reports[token]
    assert type(reports[0]).__name__ == "WorkDoneProgressBegin" and reports[0].cancellable
    assert type(reports[-1]).__name__ == "WorkDoneProgressEnd" and reports[-1].message == "cancelled"
    # without cancelling: every code cell, no crash
    full = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.checkNotebook", arguments=[nb.uri]))
    assert full["cancelled"] is False and len(full["cells"]) == n and full["crashes"] == 0
    nb.close()  # the server is shared: its 400 cells are not checked again by a later test's edits


