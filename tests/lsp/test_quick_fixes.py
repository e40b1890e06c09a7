"""Verified quick fixes in the language server, against a real kernel: a crash the sandbox saw gets quick fixes
that ran clean in a fork of the kernel ("Use column 'Total_Gross' (tested)" as a WorkspaceEdit, "Run cell 1
first (tested)" as the client's crane.ui.runCells command); a candidate that still fails is not offered; the
user's kernel is unchanged throughout (namespace, execution count, history, no output on iopub)."""

from __future__ import annotations

import ast

import pytest_asyncio
from lsprotocol import types

from ..sacred import IopubWatcher, kernel_state
from .conftest import Notebook, crane_diags, start_client, stop_client, wait_for

SETUP = "import pandas as pd\nsales = pd.DataFrame({'Total_Gross': [1.0, 2.0, 4.0], 'title': ['a', 'b', 'c']})\n"
HELPER = "def to_units(s):\n    return s.astype(int)\n"


@pytest_asyncio.fixture
async def client(kernel, tmp_path):
    kernel.run(SETUP)
    kernel.run(HELPER)
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}, mode=None)  # auto: the sandbox runs
    yield c
    await stop_client(c)


async def attach(client, nb, kernel):
    res = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": kernel.connection_file}
    )
    assert res.attached, res.message


def fixes_ready(client, uri, n=1):
    d = crane_diags(client, uri)
    return d if d and (d[0].data or {}).get("fixes", 0) >= n else None


async def actions_of(client, uri, diags):
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diags[0].range,
        context=types.CodeActionContext(diagnostics=diags)))


def command_of(action) -> dict:
    """The code action's command as sent. pytest-lsp's client structures a CodeAction that carries a command as
    a `Command` whose `command` field holds the repr of the nested command object: read that back."""
    if isinstance(action, types.CodeAction):
        c = action.command
        assert c is not None
        return {"title": c.title, "command": c.command, "arguments": c.arguments}
    return ast.literal_eval(action.command)


def apply_edit(source: str, edit: types.WorkspaceEdit) -> str:
    (change,) = edit.document_changes or []
    assert isinstance(change, types.TextDocumentEdit)
    lines = source.split("\n")
    for e in change.edits:
        assert isinstance(e, types.TextEdit)
        r = e.range
        head = "\n".join(lines[: r.start.line] + [lines[r.start.line][: r.start.character]])
        tail = lines[r.end.line][r.end.character:]
        rest = lines[r.end.line + 1:]
        source = head + e.new_text + "\n".join([tail] + rest)
        lines = source.split("\n")
    return source


async def test_verified_quick_fixes(client, kernel, notebook_path):
    before = kernel_state(kernel.conn)
    watcher = IopubWatcher(kernel.connection_file)
    try:
        nb = Notebook(client, notebook_path, [
            "extra = pd.Series([1, 2, 3])\n",  # never run: binds `extra`
            "gross = sales['total gross'].sum()\nprint(gross + undefined_later)\n",  # the candidate fails on line 2
            "top = sales['Total gross'].max()\nprint(top)\n",  # KeyError: the near column works
            "print(extra.sum())\n",  # NameError: run cell 1 first
            HELPER,  # ran in the kernel
            "print(to_units(pd.Series(['1,000', '250'])).sum())\n",  # fails inside to_units: fixed in cell 5
        ])
        await attach(client, nb, kernel)

        # cell 3: the near column ran clean in the sandbox -> a quick fix with an edit, offered first
        d3 = await wait_for(lambda: fixes_ready(client, nb.cells[2]), timeout=60, what="a verified fix for cell 3")
        assert d3[0].code == "sandbox" and d3[0].message.startswith("KeyError")
        actions = await actions_of(client, nb.cells[2], d3)
        first = actions[0]
        assert first.title == "Use column 'Total_Gross' (tested)"
        assert first.kind == types.CodeActionKind.QuickFix and first.is_preferred
        assert first.edit is not None and first.command is None
        (change,) = first.edit.document_changes
        assert change.text_document.uri == nb.cells[2] and change.text_document.version == nb.cell_versions[nb.cells[2]]
        fixed = apply_edit(nb.sources[2], first.edit)
        assert fixed == "top = sales['Total_Gross'].max()\nprint(top)\n"
        assert [a.title for a in actions[-3:]] == ["Diagnose with CRANE", "Fix with CRANE agent",
                                                   "Run speculatively with CRANE"]

        # cell 4: the binding cell never ran -> "Run cell 1 first", carried by the client's command
        d4 = await wait_for(lambda: fixes_ready(client, nb.cells[3]), timeout=60, what="a verified fix for cell 4")
        actions = await actions_of(client, nb.cells[3], d4)
        run = actions[0]
        assert run.title == "Run cell 1 first (tested)"
        assert command_of(run) == {"title": "Run cell 1 first (tested)", "command": "crane.ui.runCells",
                                   "arguments": [nb.uri, [nb.cells[0]]]}
        assert getattr(run, "edit", None) is None

        # cell 6 fails inside the function cell 5 defines: the fix edits cell 5, and runs it again
        d6 = await wait_for(lambda: fixes_ready(client, nb.cells[5]), timeout=60, what="a verified fix for cell 6")
        fix6 = (await actions_of(client, nb.cells[5], d6))[0]
        assert fix6.title.startswith("Cell 5: remove") and fix6.title.endswith("; run it again (tested)")
        assert command_of(fix6)["arguments"] == [nb.uri, [nb.cells[4]]]  # its edit: test_quick_fix_actions.py

        # cell 2 was searched before cells 3 and 4: its candidate still raised, so nothing is offered
        d2 = crane_diags(client, nb.cells[1])
        assert d2 and "fixes" not in (d2[0].data or {})
        titles = [a.title for a in await actions_of(client, nb.cells[1], d2)]
        assert not any(t.endswith("(tested)") for t in titles)

        # nothing of this touched the user's kernel
        assert kernel_state(kernel.conn) == before
        assert watcher.outputs() == []

        # the user applies the edit: the cell's text changes, the crash is gone
        nb.set_text(2, fixed)
        await wait_for(lambda: crane_diags(client, nb.cells[2]) == [], timeout=30, what="cell 3 clean after the fix")
        # the user picks "Run cell 1 first": VS Code runs it in the kernel (a real run, their decision)
        kernel.run(nb.sources[0])
        await wait_for(lambda: crane_diags(client, nb.cells[3]) == [], timeout=30, what="cell 4 clean after cell 1 ran")
    finally:
        watcher.close()


async def test_no_quick_fixes_in_static_mode(kernel, notebook_path, tmp_path):
    kernel.run(SETUP)
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}, mode="static")
    try:
        nb = Notebook(c, notebook_path, ["top = sales['Total gross'].max()\n"])
        await attach(c, nb, kernel)
        d = await wait_for(lambda: crane_diags(c, nb.cells[0]), timeout=30, what="the rules' KeyError")
        titles = [a.title for a in await actions_of(c, nb.cells[0], d)]
        assert titles == ["Diagnose with CRANE", "Fix with CRANE agent", "Run speculatively with CRANE"]
    finally:
        await stop_client(c)
