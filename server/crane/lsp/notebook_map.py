"""Cell URI ↔ notebook and cell number, and immutable notebook snapshots for the analysis threads.

Cell URIs are opaque (microsoft/language-server-protocol#2097): they are looked up through the workspace
pygls keeps, by `uri_key` (pygls ≥ 2.1 keys documents by the unquoted URI), and always handed back exactly as
the client sent them (never normalised). Cell numbers are
1-based positions in the notebook's cell list, markdown cells included, as everywhere in CRANE.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from lsprotocol import types
from pygls.workspace import Workspace

PYTHON_LANGUAGES = {"python", "python3", "ipython"}


def utf16_col(line: str, col: int) -> int:
    """A character (code point) column of `line` in UTF-16 code units, the LSP's default position encoding."""
    return len(line[:col].encode("utf-16-le")) // 2


def char_col(line: str, utf16: int) -> int:
    """An LSP (UTF-16) column of `line` as a character (code point) column."""
    units = 0
    for i, ch in enumerate(line):
        if units >= utf16:
            return i
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


def uri_key(uri: str) -> str:
    """The key of a (notebook or cell) URI in pygls's workspace and in the daemon's tables: unquoted, so
    `...#W0sZmlsZQ%3D%3D` and its decoded form are the same cell."""
    return unquote(uri)


@dataclass(frozen=True)
class CellSnapshot:
    number: int  # 1-based position in the notebook
    uri: str  # exactly as the client sent it
    is_code: bool
    source: str
    version: int | None
    execution_order: int | None = None  # from the client's execution summary
    success: bool | None = None


@dataclass(frozen=True)
class NotebookSnapshot:
    uri: str
    path: str | None
    version: int
    cells: tuple[CellSnapshot, ...]

    def cell(self, uri: str) -> CellSnapshot | None:
        for c in self.cells:
            if c.uri == uri or uri_key(c.uri) == uri_key(uri):
                return c
        return None

    def by_number(self, number: int) -> CellSnapshot | None:
        return self.cells[number - 1] if 1 <= number <= len(self.cells) else None

    @property
    def code_cells(self) -> list[CellSnapshot]:
        return [c for c in self.cells if c.is_code]


def notebook_path(uri: str) -> str | None:
    """The filesystem path of a notebook (or of a cell's notebook) URI, or None (untitled, remote...)."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme not in ("file", "vscode-notebook-cell", "vscode-notebook") or not parts.path:
        return None
    if parts.netloc and parts.netloc not in ("", "localhost"):
        return None
    path = unquote(parts.path)
    if os.name == "nt" and len(path) > 2 and path[0] == "/" and path[2] == ":":
        path = path[1:]
    return os.path.normpath(path)


def same_path(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def _is_python_code(ws: Workspace, cell: types.NotebookCell) -> bool:
    if cell.kind != types.NotebookCellKind.Code:
        return False
    doc = ws.text_documents.get(uri_key(cell.document))
    lang = (doc.language_id if doc is not None else None) or "python"
    return lang.lower() in PYTHON_LANGUAGES


def snapshot(ws: Workspace, notebook_uri: str) -> NotebookSnapshot | None:
    nb = ws.get_notebook_document(notebook_uri=notebook_uri)
    if nb is None:
        return None
    cells = []
    for i, cell in enumerate(nb.cells, start=1):
        doc = ws.text_documents.get(uri_key(cell.document))
        summary = cell.execution_summary
        cells.append(
            CellSnapshot(
                number=i,
                uri=cell.document,
                is_code=_is_python_code(ws, cell),
                source=doc.source if doc is not None else "",
                version=doc.version if doc is not None else None,
                execution_order=summary.execution_order if summary else None,
                success=summary.success if summary else None,
            )
        )
    return NotebookSnapshot(uri=nb.uri, path=notebook_path(nb.uri), version=nb.version, cells=tuple(cells))


def notebook_of_cell(ws: Workspace, cell_uri: str) -> str | None:
    """The URI (as sent) of the open notebook holding `cell_uri`, or None for an unknown cell."""
    nb = ws.get_notebook_document(cell_uri=cell_uri)
    return nb.uri if nb is not None else None
