"""`textDocument/hover`: a name's runtime facts from the live kernel (attribute chains, absent names), nothing
in comments or strings, nothing without a kernel or with `crane.hover` off."""

from __future__ import annotations

from lsprotocol import types

from ..conftest import Notebook, attach, crane_diags, start_client, stop_client, wait_for


def _at(uri: str, line: int, character: int) -> types.HoverParams:
    return types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character))


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


async def test_no_hover_without_a_kernel_on_keywords_or_when_switched_off(static_client, live_kernel, notebook_path, tmp_path):
    nb = Notebook(static_client, tmp_path / "nohover.ipynb", ["import os\nfor x in os.environ:\n    pass\n"])
    await wait_for(lambda: crane_diags(static_client, nb.cells[0]) is not None, what="checked")
    assert await static_client.text_document_hover_async(_at(nb.cells[0], 0, 8)) is None  # no kernel: no facts
    off = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}, init_options={"crane": {"hover": False}})
    try:
        nb2 = Notebook(off, notebook_path, ["df.shape\nfor x in df:\n    pass\n"])
        await attach(off, nb2, live_kernel)
        assert await off.text_document_hover_async(_at(nb2.cells[0], 0, 1)) is None  # crane.hover: false
    finally:
        await stop_client(off)


async def test_keywords_and_strings_have_no_hover(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["for row in df.itertuples():\n    s = 'df inside a string'\n"])
    await attach(client, nb, live_kernel)
    assert await client.text_document_hover_async(_at(nb.cells[0], 0, 1)) is None  # `for`
    assert await client.text_document_hover_async(_at(nb.cells[0], 1, 10)) is None  # inside the string
    facts = await client.text_document_hover_async(_at(nb.cells[0], 0, 12))
    assert facts is not None and "DataFrame" in facts.contents.value
