"""`textDocument/codeAction`: the CRANE actions on every Python code cell — quick fixes attached to CRANE's
diagnostics, `source.crane` actions on a clean cell — and nothing on markdown cells or unknown URIs."""

from __future__ import annotations

from lsprotocol import types

from ..conftest import SETUP, Notebook, attach, crane_diags, wait_for

TITLES = ["Diagnose with CRANE", "Fix with CRANE agent", "Run speculatively with CRANE"]


def _params(uri: str, diagnostics=(), only=None) -> types.CodeActionParams:
    return types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(types.Position(0, 0), types.Position(0, 1)),
        context=types.CodeActionContext(diagnostics=list(diagnostics), only=only),
    )


async def test_actions_on_a_squiggle_and_on_a_clean_cell(client, live_kernel, notebook_path):
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


async def test_kinds_filters_and_cells_without_actions(static_client, tmp_path):
    client = static_client
    nb = Notebook(client, tmp_path / "actions.ipynb", ["# Title", "print(undefined_here)\n", "y = 1\n"],
                  kinds=["markdown", "code", "code"])
    diags = await wait_for(lambda: crane_diags(client, nb.cells[1]), what="NameError")
    assert await client.text_document_code_action_async(_params(nb.cells[0])) is None  # markdown
    unknown = "vscode-notebook-cell:/nowhere.ipynb#W1sZmlsZQ%3D%3D"
    assert await client.text_document_code_action_async(_params(unknown)) is None
    quick = await client.text_document_code_action_async(_params(nb.cells[1], diags, only=[types.CodeActionKind.QuickFix]))
    assert [a.title for a in quick] == TITLES
    assert await client.text_document_code_action_async(_params(nb.cells[1], diags, only=["source.crane"])) is None
    source = await client.text_document_code_action_async(_params(nb.cells[2], only=["source"]))
    assert [a.title for a in source] == TITLES  # source.crane is a source action
    assert await client.text_document_code_action_async(_params(nb.cells[2], only=[types.CodeActionKind.QuickFix])) is None
