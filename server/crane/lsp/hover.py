"""`textDocument/hover` on a name in a cell: its runtime facts from the live kernel.

The name (or attribute chain, up to the part under the cursor) is probed privately, like a cell's names;
when the kernel is busy the last facts are shown and marked stale. No kernel: no hover. Facts read from a
kernel behind a Jupyter Server end with "_from remote kernel (URL)_".
"""

from __future__ import annotations

import keyword
import re

from lsprotocol import types

from crane.lsp.crane_server import CraneServer
from crane.lsp.facts_markdown import facts_markdown
from crane.lsp.notebook_map import char_col, utf16_col
from crane.sandbox.verdict import verdict_markdown

_CHAIN = re.compile(r"[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*")


def chain_at(line: str, col: int) -> tuple[str, int, int] | None:
    """The dotted name under `col` (cut after the part the cursor is on), with its start/end columns."""
    for m in _CHAIN.finditer(line):
        if m.start() <= col <= m.end():
            if m.start() > 0 and line[m.start() - 1] == ".":
                return None  # an attribute of an expression (call result, subscript...): not a plain chain
            parts_end = m.end()
            for part in re.finditer(r"[A-Za-z_]\w*", m.group(0)):
                if m.start() + part.start() <= col <= m.start() + part.end():
                    parts_end = m.start() + part.end()
                    break
            text = re.sub(r"\s+", "", line[m.start() : parts_end])
            if keyword.iskeyword(text.split(".")[0]):
                return None
            return text, m.start(), parts_end
    return None


def _in_string_or_comment(line: str, col: int) -> bool:
    quote = None
    for i, ch in enumerate(line[:col]):
        if quote:
            if ch == quote and line[i - 1] != "\\":
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return True
    return quote is not None


async def hover(ls: CraneServer, params: types.HoverParams) -> types.Hover | None:
    if not ls.settings.hover:
        return None
    uri = params.text_document.uri
    session = ls.session_of_cell(uri)
    if session is None or session.attachment is None:
        return None
    doc = ls.workspace.text_documents.get(ls.key(uri))
    if doc is None:
        return None
    lines = doc.lines
    if not 0 <= params.position.line < len(lines):
        return None
    line = lines[params.position.line].rstrip("\r\n")
    col = char_col(line, params.position.character)
    if _in_string_or_comment(line, col):
        return None
    found = chain_at(line, col)
    if found is None:
        return None
    chain, start, end = found
    from crane.probe.facts import ProbeRequest

    root = chain.split(".")[0]
    request = ProbeRequest(names=[root], attrs=[chain] if "." in chain else [])
    result, mode, _error = await ls.run_blocking(session.facts_for, request, ls.tuning.probe_timeout_ms / 1000)
    if result is None:
        return None
    stale = mode == "stale"
    text = None
    if "." in chain:
        check = next((a for a in result.attrs if a.expr == chain), None)
        if check is not None:
            if check.present is False:
                owner = f" on `{check.owner_type}`" if check.owner_type else ""
                text = f"**{chain}**: no such attribute{owner} (accessing it raises `AttributeError`)"
            elif check.facts is not None:
                text = facts_markdown(check.facts.__class__(**{**_fields(check.facts), "name": chain}), stale)
            elif check.signature is not None or check.present:
                from crane.probe.facts import Facts

                text = facts_markdown(
                    Facts(name=chain, type=check.owner_type and f"attribute of {check.owner_type}" or "attribute", signature=check.signature),
                    stale,
                )
    if text is None and root in result.facts:
        if "." in chain and col > start + len(root):
            return None  # the attribute part is under the cursor and nothing is known about it
        text = facts_markdown(result.facts[root], stale)
    if text is None and root in result.undefined:
        text = f"**{root}**: not defined in the kernel" + (" _(stale)_" if stale else "")
    if text is None:
        return None
    verdict = session.sandbox_verdicts.get(doc.source, session.kernel_gen) if ls.settings.speculative_on else None
    if verdict is not None:
        text += "\n\n---\n" + verdict_markdown(verdict)
    att = session.attachment
    if att is not None and att.info.server_url:
        text += f"\n\n_from {att.info.description}_"
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
        range=types.Range(
            types.Position(params.position.line, utf16_col(line, start)),
            types.Position(params.position.line, utf16_col(line, end)),
        ),
    )


def _fields(struct) -> dict:
    return {f: getattr(struct, f) for f in struct.__struct_fields__}
