"""NotebookScope: static definitions across cells, static-only undefined names, related information."""

from crane.analysis.cell import analyze_cell
from crane.analysis.scope import NotebookScope
from crane.predict import predict

CELLS = [
    (1, 1, "import numpy as np\nimport pandas as pd"),
    (2, None, "df = pd.read_csv('x.csv')\ndef helper():\n    inner = 1\n    return inner"),
    (3, 2, "X = np.zeros(3)\ndel np"),
    (4, None, "X.sum() + df.shape[0] + later"),
    (5, 3, "later = 5\nfrom m import *"),
]


def test_definitions_and_imports():
    s = NotebookScope.from_cells(CELLS)
    cell2 = s.cell(2)
    assert cell2 is not None
    assert set(cell2.binds) == {"df", "helper"}  # not the function's locals
    assert s.defined_in("X") == 2 and s.defined_in("np") is None  # deleted by a later run
    assert s.import_target("pd") == "pandas"
    assert s.defined_in("df") is None  # its cell never ran


def test_undefined_in_notebook_order():
    s = NotebookScope.from_cells(CELLS)
    assert s.undefined_in_order(4, ["X", "df", "later", "print"]) == ["later"]
    assert s.undefined_in_order(6, ["anything"]) == []  # cell 5's star import may bind it


def test_related_for_missing():
    s = NotebookScope.from_cells(CELLS)
    rel = s.related_for_missing("df", 4)
    assert rel[0].cell == 2 and "has not been run" in rel[0].message
    rel = s.related_for_missing("later", 4)
    assert rel[0].cell == 5 and rel[0].execution_count == 3
    assert any("deleted" in r.message for r in s.related_for_missing("np", 4))


def test_static_only_prediction_uses_scope():
    s = NotebookScope.from_cells(CELLS)
    findings = predict(analyze_cell(CELLS[3][2]), None, s, target_cell=4)
    assert [(f.ename, f.line) for f in findings] == [("NameError", 1)]
    assert "later" in findings[0].message and findings[0].related[0].cell == 5
    # no scope and no kernel: nothing can be said about names
    assert predict(analyze_cell(CELLS[3][2]), None) == []


def test_public_cell_defs_and_from_defs():
    from crane.analysis import scope as scope_mod

    defs = [scope_mod.cell_defs(n, c, src) for n, c, src in reversed(CELLS)]
    assert scope_mod._defs is scope_mod.cell_defs  # the old private name still works
    s = NotebookScope.from_defs(defs)
    assert [d.number for d in s.cells] == [1, 2, 3, 4, 5]
    ref = NotebookScope.from_cells(CELLS)
    assert s.defined_in("X") == ref.defined_in("X") == 2
    assert s.undefined_in_order(4, ["X", "df", "later"]) == ref.undefined_in_order(4, ["X", "df", "later"])
    assert s.import_target("pd") == "pandas"


def test_predict_fills_defined_in_from_the_execution_order():
    from crane.analysis.cell import analyze_cell
    from crane.analysis.scope import NotebookScope
    from crane.predict import predict
    from crane.probe.facts import Facts, ProbeResult

    # cell 2 ran last ([5]) and rebound x; cell 3 never ran
    scope = NotebookScope.from_cells([(1, 4, "x = 1\ny = 2"), (2, 5, "x = 3"), (3, None, "x = 9")])
    probe = ProbeResult(facts={"x": Facts(name="x", type="int", kind="scalar"),
                               "y": Facts(name="y", type="int", kind="scalar")})
    predict(analyze_cell("print(x + y)"), probe, scope, target_cell=4)
    assert probe.facts["x"].defined_in == 5 and probe.facts["y"].defined_in == 4
