"""crane.analysis.provenance: the data flow from the failing names back to the executed cells that made them
(static: no kernel)."""

from __future__ import annotations

from crane.analysis import provenance
from crane.analysis.scope import NotebookScope


def scope(*cells: tuple[str, int | None]) -> NotebookScope:
    return NotebookScope.from_cells([(i, count, src) for i, (src, count) in enumerate(cells, start=1)])


def test_trace_from_the_fresh_binding_in_execution_order():
    s = scope(("df = load()\n", 1), ("df = df.dropna()\n", 3), ("df['x'] = 1\n", 2),
              ("df.drop(columns='a', inplace=True)\n", 4), ("print(df)\n", 5), ("df = other()\n", None))
    steps = provenance.trace(s, "df")
    assert [(t.cell, t.how) for t in steps] == [(1, "binds"), (3, "changes"), (2, "rebinds"), (4, "changes")]
    assert steps[-1].describe() == "`df` changed in cell 4 [4]: `df.drop(columns='a', inplace=True)`"


def test_a_fresh_binding_or_delete_restarts_the_trace():
    s = scope(("df = load()\n", 1), ("df.append(1)\n", 2), ("df = fresh()\n", 3), ("del df\n", 4))
    assert [(t.cell, t.how) for t in provenance.trace(s, "df")] == [(4, "deletes")]
    assert [(t.cell, t.how) for t in provenance.trace(scope(("import numpy as np\n", 1)), "np")] == [(1, "binds")]


def test_origin_cells_follow_the_names_one_step_back():
    s = scope(("raw = load()\n", 1), ("sel = raw[raw['m'] == '8']\n", 2), ("x = sel['t'].values\n", 3),
              ("print(len(x))\n", None))
    assert provenance.origin_cells(s, ["x"], target=4, depth=1) == [3]
    assert provenance.origin_cells(s, ["x"], target=4, depth=3) == [3, 2, 1]


def test_dependents_run_again_what_feeds_the_target():
    s = scope(("X = load()\n", 1), ("Xtr = split(X)\n", 2), ("log = print(Xtr)\n", 3), ("m = fit(Xtr)\n", 4),
              ("unrelated = 1\n", 5), ("m.predict(Xtr)\n", None))
    assert provenance.dependents(s, [2], 6, {"m", "Xtr"}) == [2, 4]
    assert provenance.dependents(s, [2], 6, {"m", "Xtr"}, exclude={4}) == [2]


def test_explain_names_the_cells():
    s = scope(("df = load()\n", 1), ("df.drop(columns='region', inplace=True)\n", 2))
    assert provenance.explain(s, ["df", "nothing"]) == [
        "`df` made in cell 1 [1]: `df = load()`; `df` changed in cell 2 [2]: `df.drop(columns='region', inplace=True)`"]


def test_a_written_fix_is_replayed_fresh_only_when_a_later_cell_read_a_moved_one():
    from crane.fixes.model import Candidate
    from crane.fixes.search import _moves_history
    from crane.notebook.model import Cell, Notebook

    sources = [("df = load()\n", 1), ("cols = list(df.columns)\n", 2), ("df.drop(columns='a', inplace=True)\n", 3),
               ("print(df.shape)\n", None)]
    nb = Notebook(path=None, cells=[Cell(number=i, cell_type="code", source=s, execution_count=c)
                                    for i, (s, c) in enumerate(sources, start=1)])
    s = NotebookScope.from_notebook(nb)
    # cell 1 run again: cells 2 and 3 ran after it and read df (not run again) -> the replay order matters
    assert _moves_history(nb, s, Candidate(kind="k", title="t", source="x", run_first=(1,)))
    # cell 3 edited and run again: nothing after it reads df -> the sandbox's run is the written one
    assert not _moves_history(nb, s, Candidate(kind="k", title="t", source="x", run_first=(3,),
                                               cell_edits=((3, "df.drop(columns='b', inplace=True)\n"),)))
    # every reader run again too
    assert not _moves_history(nb, s, Candidate(kind="k", title="t", source="x", run_first=(1, 2, 3)))
