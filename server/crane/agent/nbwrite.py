"""Write a proposal into an `.ipynb` file, changing nothing else: only the edited cells' `source` values are
replaced in the file's text (in the file's own JSON style), and added cells are inserted as new cell objects.
Every other byte of the file — outputs, metadata, ids, key order, indentation — stays as it was.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from typing import Any

from crane.agent.proposal import Proposal
from crane.notebook.model import NotebookError

_WS = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()
# The C scanner json itself uses (not in the type stubs): (text, index after the quote) -> (value, end).
scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _skip(text: str, i: int) -> int:
    m = _WS.match(text, i)
    return m.end() if m else i


def _object_members(text: str, i: int) -> tuple[dict[str, tuple[int, int]], int]:
    """Members of the JSON object starting at text[i] == '{': key -> (value start, value end); and its end."""
    assert text[i] == "{"
    members: dict[str, tuple[int, int]] = {}
    i = _skip(text, i + 1)
    if text[i] == "}":
        return members, i + 1
    while True:
        if text[i] != '"':
            raise ValueError(f"expected a key at offset {i}")
        key, i = scanstring(text, i + 1)
        i = _skip(text, i)
        if text[i] != ":":
            raise ValueError(f"expected ':' at offset {i}")
        start = _skip(text, i + 1)
        _, end = _decoder.raw_decode(text, start)
        members[key] = (start, end)
        i = _skip(text, end)
        if text[i] == "}":
            return members, i + 1
        if text[i] != ",":
            raise ValueError(f"expected ',' at offset {i}")
        i = _skip(text, i + 1)


def _array_items(text: str, start: int) -> list[tuple[int, int]]:
    assert text[start] == "["
    items: list[tuple[int, int]] = []
    i = _skip(text, start + 1)
    if text[i] == "]":
        return items
    while True:
        _, end = _decoder.raw_decode(text, i)
        items.append((i, end))
        i = _skip(text, end)
        if text[i] == "]":
            return items
        i = _skip(text, i + 1)


def _line_indent(text: str, pos: int) -> str:
    line_start = text.rfind("\n", 0, pos) + 1
    m = re.match(r"[ \t]*", text[line_start:])
    return m.group(0) if m else ""


def _ensure_ascii(text: str) -> bool:
    return bool(re.search(r"\\u[0-9a-fA-F]{4}", text)) and text.isascii()


def _encode_source(new: str, old_value: str, key_indent: str, ascii_only: bool) -> str:
    if old_value.lstrip().startswith('"'):
        return json.dumps(new, ensure_ascii=ascii_only)
    lines = new.splitlines(keepends=True)
    if not lines:
        return "[]"
    if "\n" not in old_value:  # a one-line list: keep it on one line
        return "[" + ", ".join(json.dumps(ln, ensure_ascii=ascii_only) for ln in lines) + "]"
    m = re.search(r"\n([ \t]*)\S", old_value)
    item_indent = m.group(1) if m else key_indent + " "
    body = ",\n".join(item_indent + json.dumps(ln, ensure_ascii=ascii_only) for ln in lines)
    return "[\n" + body + "\n" + key_indent + "]"


def _new_cell(source: str, with_id: bool, indent_unit: str, cell_indent: str, ascii_only: bool) -> str:
    cell: dict[str, Any] = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}
    if with_id:
        cell["id"] = secrets.token_hex(4)
    text = json.dumps(cell, indent=indent_unit or None, sort_keys=True, ensure_ascii=ascii_only)
    return text.replace("\n", "\n" + cell_indent)


def apply_proposal(data: bytes, proposal: Proposal) -> bytes:
    """The notebook file's bytes with the proposal's edits and additions applied."""
    try:
        text = data.decode("utf-8")
        top_start = _skip(text, 0)
        top, _ = _object_members(text, top_start)
        cells_span = top["cells"]
        items = _array_items(text, cells_span[0])
    except (UnicodeDecodeError, ValueError, KeyError, AssertionError, IndexError) as exc:
        raise NotebookError(f"cannot edit {proposal.notebook or 'the notebook'}: not a notebook file ({exc})") from None
    ascii_only = _ensure_ascii(text)
    nbformat_minor = json.loads(text[top["nbformat_minor"][0]:top["nbformat_minor"][1]]) if "nbformat_minor" in top else 0
    splices: list[tuple[int, int, str]] = []
    for edit in proposal.edits:
        if not 1 <= edit.cell <= len(items):
            raise NotebookError(f"cell {edit.cell} does not exist in {proposal.notebook}")
        members, _ = _object_members(text, items[edit.cell - 1][0])
        if "source" not in members:
            raise NotebookError(f"cell {edit.cell} has no source")
        s, e = members["source"]
        old_value = text[s:e]
        current = json.loads(old_value)
        current = current if isinstance(current, str) else "".join(current)
        if current != edit.old:
            raise NotebookError(f"cell {edit.cell} changed since the proposal was made: not applied")
        splices.append((s, e, _encode_source(edit.new, old_value, _line_indent(text, s), ascii_only)))
    if proposal.additions:
        first = items[0][0] if items else None
        cell_indent = _line_indent(text, first) if first is not None else _line_indent(text, cells_span[0]) + " "
        unit = " "
        if first is not None:
            m, _ = _object_members(text, first)
            if m:
                key_pos = min(s for s, _ in m.values())
                unit = _line_indent(text, key_pos)[len(cell_indent):] or " "
        inserts: dict[int, str] = {}
        top_cells: list[str] = []
        for add in proposal.additions:
            cell_text = _new_cell(add.source, nbformat_minor >= 5, unit, cell_indent, ascii_only)
            if add.after == 0 or not items:
                top_cells.append(cell_indent + cell_text)
                continue
            pos = items[min(add.after, len(items)) - 1][1]
            inserts[pos] = inserts.get(pos, "") + ",\n" + cell_indent + cell_text
        if top_cells:
            tail = "," if items else "\n" + _line_indent(text, cells_span[0])
            inserts[cells_span[0] + 1] = "\n" + ",\n".join(top_cells) + tail
        splices += [(pos, pos, ins) for pos, ins in inserts.items()]
    out = text
    for s, e, new in sorted(splices, key=lambda t: (t[0], t[1]), reverse=True):
        out = out[:s] + new + out[e:]
    return out.encode("utf-8")


def apply_cell_changes(data: bytes, sources: dict[int, tuple[str, str]], counts: dict[int, int],
                       name: str | None = None, to_code: frozenset[int] = frozenset()) -> bytes:
    """The notebook file's bytes with cell sources replaced (`{cell: (old, new)}`; `old` must match) and code
    cells given execution counts (`{cell: count}`); the raw cells in `to_code` become code cells (with their count,
    else none, and no outputs); every other byte stays."""
    try:
        text = data.decode("utf-8")
        top, _ = _object_members(text, _skip(text, 0))
        items = _array_items(text, top["cells"][0])
    except (UnicodeDecodeError, ValueError, KeyError, AssertionError, IndexError) as exc:
        raise NotebookError(f"cannot edit {name or 'the notebook'}: not a notebook file ({exc})") from None
    ascii_only = _ensure_ascii(text)
    splices: list[tuple[int, int, str]] = []
    for cell in sorted(set(sources) | set(counts) | set(to_code)):
        if not 1 <= cell <= len(items):
            raise NotebookError(f"cell {cell} does not exist in {name or 'the notebook'}")
        members, _ = _object_members(text, items[cell - 1][0])
        if cell in sources:
            old, new = sources[cell]
            if "source" not in members:
                raise NotebookError(f"cell {cell} has no source")
            s, e = members["source"]
            current = json.loads(text[s:e])
            current = current if isinstance(current, str) else "".join(current)
            if current != old:
                raise NotebookError(f"cell {cell} changed since the fix was made: not applied")
            if new != old:
                splices.append((s, e, _encode_source(new, text[s:e], _line_indent(text, s), ascii_only)))
        if cell in to_code and "execution_count" not in members:
            if "cell_type" not in members or json.loads(text[slice(*members["cell_type"])]) != "raw":
                raise NotebookError(f"cell {cell} is not a raw cell")
            s, e = members["cell_type"]
            indent = _line_indent(text, s)
            count = str(int(counts[cell])) if cell in counts else "null"
            splices.append((s, e, f'"code",\n{indent}"execution_count": {count},\n{indent}"outputs": []'))
            continue
        if cell in counts:
            if "execution_count" not in members:
                raise NotebookError(f"cell {cell} is not a code cell")
            s, e = members["execution_count"]
            splices.append((s, e, str(int(counts[cell]))))
    out = text
    for s, e, new in sorted(splices, key=lambda t: (t[0], t[1]), reverse=True):
        out = out[:s] + new + out[e:]
    return out.encode("utf-8")
