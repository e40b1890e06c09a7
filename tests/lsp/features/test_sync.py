"""Notebook sync: what is re-checked on open, edits, structure changes, execution summaries and close; cell
numbers count markdown cells."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from ..conftest import Notebook, attach, crane_diags, wait_for


async def test_execution_summary_triggers_a_recheck(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["summary_var = 1\n", "print(summary_var)\n"])
    await attach(client, nb, live_kernel)
    await wait_for(lambda: crane_diags(client, nb.cells[1]), what="NameError summary_var")
    # The kernel gets the variable silently (no iopub execute_input): only the client's summary tells us.
    live_kernel.conn.private({}, code="summary_var = 1")
    nb.executed(0, order=99)
    await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], what="cleared after the execution summary")
    live_kernel.conn.private({}, code="del summary_var")


@pytest.mark.asyncio(loop_scope="module")
async def test_names_follow_notebook_order_and_structure(shared_static_client, tmp_path):
    client = shared_static_client
    nb = Notebook(client, tmp_path / "order.ipynb", ["y = x + 1\n", "x = 1\n"])
    diags = await wait_for(lambda: crane_diags(client, nb.cells[0]), what="NameError for x defined below")
    assert diags[0].code == "undefined-name"
    assert any(ri.location.uri == nb.cells[1] for ri in diags[0].related_information or [])
    # move the definition above: insert a cell defining x at the top
    nb.insert(0, "x = 0\n")
    await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], what="cleared after the insert")
    # deleting a cell clears its diagnostics
    nb.set_text(2, "x = 1\nprint(zz)\n")
    await wait_for(lambda: crane_diags(client, nb.cells[2]), what="NameError zz")
    removed = nb.delete(2)
    await wait_for(lambda: crane_diags(client, removed) == [], what="diagnostics of a deleted cell cleared")


@pytest.mark.asyncio(loop_scope="module")
async def test_close_clears_everything_even_mid_analysis(shared_static_client, tmp_path):
    client = shared_static_client
    nb = Notebook(client, tmp_path / "c.ipynb", ["print(undefined_thing)\n"])
    await wait_for(lambda: crane_diags(client, nb.cells[0]), what="NameError")
    nb.set_text(0, "print(undefined_thing)\nprint(other_undefined)\n")  # a check is scheduled...
    nb.close()  # ...and the notebook closes before it runs
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="cleared on close")
    await asyncio.sleep(0.5)
    assert crane_diags(client, nb.cells[0]) == []  # nothing published after the close
    # the server still works
    nb2 = Notebook(client, tmp_path / "d.ipynb", ["print(zzz)\n"])
    await wait_for(lambda: crane_diags(client, nb2.cells[0]), what="a new notebook is checked")


@pytest.mark.asyncio(loop_scope="module")
async def test_cell_numbers_count_markdown_cells(shared_static_client, tmp_path):
    """vscode-languageclient syncs the cells the server declares: python and markdown, so numbers are the
    positions in the full notebook (here cell 4, not 3)."""
    client = shared_static_client
    sync = client.init_result.capabilities.notebook_document_sync
    languages = {c.language for f in sync.notebook_selector for c in f.cells}
    assert languages == {"python", "markdown"}
    nb = Notebook(
        client,
        tmp_path / "md.ipynb",
        ["# Title\nSome *text* with print(undefined)", "import os\n", "## Section", "print(later_name)\n", "later_name = 1\n"],
        kinds=["markdown", "code", "markdown", "code", "code"],
    )
    d = await wait_for(lambda: crane_diags(client, nb.cells[3]), what="NameError on cell 4")
    assert d[0].message.startswith("NameError")
    assert crane_diags(client, nb.cells[0]) == [] and crane_diags(client, nb.cells[2]) == []  # markdown: nothing
    related = d[0].related_information or []
    assert [r.location.uri for r in related] == [nb.cells[4]], related  # defined in cell 5, which runs later
    assert "cell 5" in related[0].message or "5" in related[0].message
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.diagnoseCell", arguments=[nb.cells[3]])
    )
    assert result["cell"] == 4 and "### Cell 4 will crash" in result["markdown"]
    check = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.checkNotebook", arguments=[nb.uri]))
    assert [c["cell"] for c in check["cells"]] == [2, 4, 5]
    assert check["cells"][1]["findings"][0]["related"][0]["cell"] == 5


async def test_a_run_that_changes_an_object_in_place_rechecks_the_cells_reading_it(client, live_kernel, notebook_path):
    """A user run that only mutates `frame_m` (no binding) still re-checks a clean cell that reads it."""
    live_kernel.run("frame_m = df.copy()")
    nb = Notebook(client, notebook_path, ["total = frame_m['a'].sum()\n"])
    await attach(client, nb, live_kernel)
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="clean while column a exists")
    live_kernel.run("frame_m.drop(columns=['a'], inplace=True)")
    d = await wait_for(lambda: crane_diags(client, nb.cells[0]), what="KeyError after the in-place drop, without an edit")
    assert d[0].message.startswith("KeyError")
    live_kernel.run("del frame_m")
