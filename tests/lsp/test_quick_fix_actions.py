"""How a verified fix becomes a code action (crane.lsp.quick_fixes), without a server: the WorkspaceEdit on the
cells it edits (with their versions), the client command for the cells to run first, and no action once a
cell it relies on changed."""

from __future__ import annotations

from lsprotocol import types

from crane.fixes.model import CellChange, VerifiedFix
from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot
from crane.lsp.quick_fixes import QuickFixService

NB = "file:///tmp/x/nb.ipynb"
HELPER = "def to_units(s):\n    return s.astype(int)\n"
HELPER_FIXED = "def to_units(s):\n    return s.str.replace(',', '').astype(int)\n"
TARGET = "print(to_units(s).sum())\n"


def snap(sources: list[str]) -> NotebookSnapshot:
    cells = tuple(CellSnapshot(number=i, uri=f"vscode-notebook-cell:/tmp/x/nb.ipynb#W{i}", is_code=True, source=s,
                               version=10 + i) for i, s in enumerate(sources, start=1))
    return NotebookSnapshot(uri=NB, path="/tmp/x/nb.ipynb", version=3, cells=cells)


def action(s: NotebookSnapshot, fix: VerifiedFix) -> types.CodeAction | None:
    service = QuickFixService.__new__(QuickFixService)  # _action reads neither the host nor the service's state
    return service._action(s, s.cells[fix.target - 1], fix, [], preferred=True)


def test_an_edit_of_the_defining_cell_and_running_it_again():
    fix = VerifiedFix(kind="to-numeric", title="Cell 1: remove ','; run it again", target=2, old=TARGET, new=TARGET,
                      run_first=(1,), run_first_sources=(HELPER_FIXED,),
                      cell_edits=(CellChange(cell=1, old=HELPER, new=HELPER_FIXED),))
    s = snap([HELPER, TARGET])
    a = action(s, fix)
    assert a is not None and a.title == "Cell 1: remove ','; run it again (tested)" and a.is_preferred
    assert a.command == types.Command(title=a.title, command="crane.ui.runCells", arguments=[NB, [s.cells[0].uri]])
    assert a.edit is not None and a.edit.document_changes is not None
    (change,) = a.edit.document_changes
    assert isinstance(change, types.TextDocumentEdit)
    assert change.text_document.uri == s.cells[0].uri and change.text_document.version == 11
    (te,) = change.edits
    assert isinstance(te, types.TextEdit)
    assert te.range == types.Range(types.Position(1, 0), types.Position(1, len("    return s.astype(int)")))
    assert te.new_text == "    return s.str.replace(',', '').astype(int)"
    # the helper cell was edited by the user meanwhile: not offered
    assert action(snap([HELPER + "# changed\n", TARGET]), fix) is None


def test_a_target_edit_and_a_cell_run_first():
    fix = VerifiedFix(kind="nearest-name", title="Use name 'units'", target=3, old="print(unit)\n",
                      new="print(units)\n", run_first=(1,), run_first_sources=("units = 3\n",))
    s = snap(["units = 3\n", "x = 1\n", "print(unit)\n"])
    a = action(s, fix)
    assert a is not None and a.command is not None and a.command.arguments == [NB, [s.cells[0].uri]]
    assert a.edit is not None and a.edit.document_changes is not None
    (change,) = a.edit.document_changes
    assert isinstance(change, types.TextDocumentEdit) and change.text_document.uri == s.cells[2].uri
    assert action(snap(["units = 4\n", "x = 1\n", "print(unit)\n"]), fix) is None  # the cell to run changed
    assert action(snap(["units = 3\n", "x = 1\n", "print(unit) \n"]), fix) is None  # the target changed
