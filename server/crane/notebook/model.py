"""Notebook model: an `.ipynb` file decoded and validated at the edge into msgspec Structs.

Cell numbers are 1-based positions in the notebook's `cells` list, as in the bench format and the CLI.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from crane.errors import CraneError
from crane.notebook.timing import recorded_seconds


class NotebookError(CraneError):
    """The notebook cannot be used: unreadable, not JSON, not nbformat 4, or a bad cell number."""


class CellError(msgspec.Struct, frozen=True):
    """The `error` output a cell left, if any."""

    ename: str
    evalue: str
    traceback: list[str] = []


class Cell(msgspec.Struct, frozen=True):
    number: int  # 1-based position in the notebook
    cell_type: str  # "code", "markdown" or "raw"
    source: str
    execution_count: int | None = None
    error: CellError | None = None
    recorded_s: float | None = None  # how long its last recorded run took (notebook/timing.py)

    @property
    def is_code(self) -> bool:
        return self.cell_type == "code"


class Notebook(msgspec.Struct, frozen=True):
    path: str | None
    cells: list[Cell]
    language: str = "python"

    def cell(self, number: int) -> Cell:
        if not 1 <= number <= len(self.cells):
            raise NotebookError(f"cell {number} does not exist: the notebook has {len(self.cells)} cells")
        return self.cells[number - 1]

    @property
    def directory(self) -> Path:
        return Path(self.path).resolve().parent if self.path else Path.cwd()


# Raw nbformat 4 shapes, decoded leniently (unknown fields ignored) and then normalised.
class _RawOutput(msgspec.Struct):
    output_type: str = ""
    ename: str | None = None
    evalue: str | None = None
    traceback: list[str] | None = None


class _RawCell(msgspec.Struct):
    cell_type: str
    source: str | list[str] = ""
    execution_count: int | None = None
    outputs: list[_RawOutput] = []
    metadata: dict | None = None


class _RawNotebook(msgspec.Struct):
    cells: list[_RawCell]
    nbformat: int
    metadata: dict = {}


def _join(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "".join(source)


def parse_notebook(data: bytes | str, path: str | None = None) -> Notebook:
    """Decode notebook JSON; raise NotebookError with a clear message on bad input."""
    where = path or "<notebook>"
    try:
        raw_any = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise NotebookError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(raw_any, dict):
        raise NotebookError(f"{where} is not a notebook: the top level is not a JSON object")
    nbformat = raw_any.get("nbformat")
    if nbformat != 4:
        raise NotebookError(f"{where} is not an nbformat 4 notebook (nbformat={nbformat!r})")
    try:
        raw = msgspec.convert(raw_any, _RawNotebook)
    except msgspec.ValidationError as exc:
        raise NotebookError(f"{where} is not a valid nbformat 4 notebook: {exc}") from None
    cells = []
    for i, rc in enumerate(raw.cells, start=1):
        error = None
        for out in rc.outputs:
            if out.output_type == "error":
                error = CellError(ename=out.ename or "", evalue=out.evalue or "", traceback=out.traceback or [])
        cells.append(
            Cell(
                number=i,
                cell_type=rc.cell_type,
                source=_join(rc.source),
                execution_count=rc.execution_count if rc.cell_type == "code" else None,
                error=error,
                recorded_s=recorded_seconds(rc.metadata) if rc.cell_type == "code" else None,
            )
        )
    lang = "python"
    info = raw.metadata.get("language_info") if isinstance(raw.metadata, dict) else None
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        lang = info["name"]
    return Notebook(path=path, cells=cells, language=lang)


def load_notebook(path: str | Path) -> Notebook:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise NotebookError(f"cannot read {p}: {exc.strerror or exc}") from None
    return parse_notebook(data, str(p))
