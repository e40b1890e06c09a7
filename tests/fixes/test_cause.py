"""Fixes where the crash began (crane.fixes.cause): each family against a real kernel, the cause in another cell
than the crashing one. Each test checks the exact cells changed or run again and the edit; the negative tests
check that a candidate generated for the crash is not offered when it does not run clean.

The setups follow public notebook patterns (Kaggle-style pandas / scikit-learn / matplotlib code).
"""

from __future__ import annotations

from .conftest import fix_search, titles, tried_kinds

PD = "import pandas as pd\nimport numpy as np\n"
MPL = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"


def offered(report, kind: str):
    fixes = [f for f in report.fixes if f.kind == kind]
    assert fixes, f"no verified {kind} fix; offered: {titles(report)}; tried: {report.failed}"
    return fixes[0]


def test_rebuild_when_the_cell_already_ran(kernel):
    """A cell run twice: its `drop(..., inplace=True)` already happened (an earlier cell with the same code)."""
    drop = "df.drop(columns='b', inplace=True)\ncols.remove('b')\n"
    cells = [(PD, True), ("df = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})\n", True),
             ("cols = list(df.columns)\n", True), (drop, True), (drop, False)]
    r = fix_search(kernel, cells, 5)
    assert r.crash is not None and r.crash.ename == "KeyError"
    fix = offered(r, "rebuild")
    assert fix.run_first == (2, 3) and fix.new == fix.old and not fix.cell_edits
    assert fix.title == "Run cells 2, 3 again first (cell 4 already ran this code)"


def test_rebuild_not_offered_without_a_cell_that_ran_the_code(kernel):
    cells = [(PD, True), ("df = pd.DataFrame({'a': [1, 2]})\n", True), ("df.drop(columns='b', inplace=True)\n", False)]
    r = fix_search(kernel, cells, 3)
    assert "rebuild" not in tried_kinds(r) and all(f.kind != "rebuild" for f in r.fixes)


def test_other_definition_of_a_redefined_function(kernel):
    cells = [(PD, True), ("def score(w, X):\n    return np.dot(w, X.T)\n", True),
             ("def score(w, X):\n    return np.dot(X, w)\n", True),
             ("w = np.zeros((1, 4))\nX = np.ones((5, 4))\nprint(score(w, X).shape)\n", False)]
    r = fix_search(kernel, cells, 4)
    fix = offered(r, "other-definition")
    assert fix.run_first == (2,) and fix.new == fix.old and "(1, 5)" in fix.stdout
    assert fix.title == "Run cell 2 first (its `score`, which cell 3 redefined)"


def test_array_source_keeps_the_dataframe(kernel):
    cells = [(PD, True), ("df = pd.DataFrame({'a': [1, 2, 3], 'b': [4, 5, 6], 'y': [0, 1, 0]})\n", True),
             ("X, y = df[['a', 'b']].values, df['y'].values\n", True), ("X.describe()\n", False)]
    r = fix_search(kernel, cells, 4)
    fix = offered(r, "array-source")
    (change,) = fix.cell_edits
    assert change.cell == 3 and change.new == "X, y = df[['a', 'b']], df['y']\n"
    assert fix.run_first == (3,) and fix.new == fix.old
    assert fix.title.startswith("Cell 3: keep the DataFrames") and fix.title.endswith("run cell 3 again")


def test_literal_dtype_where_the_selection_is_built(kernel):
    """An integer column compared with '8': the selection is empty, the crash comes two cells later."""
    cells = [(PD, True), ("df = pd.DataFrame({'month': [7, 8, 8, 9], 'temp': [20.0, 25.0, 27.0, 18.0]})\n", True),
             ("august = df[df['month'] == '8']\n", True), ("temps = august['temp'].tolist()\n", True),
             ("print(sum(temps) / len(temps))\n", False)]
    r = fix_search(kernel, cells, 5)
    assert r.crash is not None and r.crash.ename == "ZeroDivisionError"
    fix = offered(r, "literal-dtype")
    (change,) = fix.cell_edits
    assert change.cell == 3 and change.new == "august = df[df['month'] == 8]\n"
    assert fix.run_first == (3, 4) and fix.stdout.strip() == "26.0"


def test_grid_sized_from_the_data(kernel):
    loop = ("fig, ax = plt.subplots(nrows=2, ncols=2)\nax = ax.flatten()\nfor i, col in enumerate(df.columns):\n"
            "    ax[i].plot(df[col])\n")
    cells = [(PD + MPL, True), ("df = pd.DataFrame(np.ones((3, 6)), columns=list('abcdef'))\n", True), (loop, False)]
    r = fix_search(kernel, cells, 3)
    fix = offered(r, "grid-size")
    assert "ncols=(len(df.columns) + 1) // 2" in fix.new and not fix.cell_edits


def test_label_count_says_it_drops_the_argument(kernel):
    cells = [(MPL, True), ("fig, ax = plt.subplots()\nax.set_xticks([0, 1, 2], labels=['low', 'high'])\n", False)]
    r = fix_search(kernel, cells, 2)
    fix = offered(r, "label-count")
    assert fix.title.startswith("Drop `labels=['low', 'high']`") and "labels=" not in fix.new


def test_merge_suffix_in_the_merging_cell(kernel):
    cells = [(PD, True), ("left = pd.DataFrame({'id': [1, 2], 'region': ['n', 's']})\n"
                          "right = pd.DataFrame({'id': [1, 2], 'region': ['N', 'S'], 'pop': [5, 6]})\n", True),
             ("merged = left.merge(right, on='id')\n", True), ("print(merged['region'].tolist())\n", False)]
    r = fix_search(kernel, cells, 4)
    fix = offered(r, "merge-suffix")
    (change,) = fix.cell_edits
    assert change.cell == 3 and change.new == "merged = left.merge(right, on='id', suffixes=('', '_right'))\n"
    assert "['n', 's']" in fix.stdout


def test_nearest_name_bound_by_a_cell_not_run(kernel):
    cells = [("num = [1, 2, 3]\n", False), ("print(sum(numvars))\n", False)]
    r = fix_search(kernel, cells, 2)
    fix = offered(r, "nearest-name")
    assert fix.run_first == (1,) and fix.new == "print(sum(num))\n" and fix.stdout.strip() == "6"


def test_cause_candidate_not_offered_when_it_does_not_fix(kernel):
    """The selection's literal is fixed, but the cell after it still fails (another bug): nothing offered."""
    cells = [(PD, True), ("df = pd.DataFrame({'month': [7, 8], 'temp': [20.0, 25.0]})\n", True),
             ("august = df[df['month'] == '8']\n", True), ("print(august['temperature'].mean() / len(august))\n", False)]
    r = fix_search(kernel, cells, 4)
    assert "literal-dtype" in tried_kinds(r)
    assert all(f.kind != "literal-dtype" for f in r.fixes)


def test_raw_cell_made_code_and_written_as_code(tmp_path):
    """The cell binding the name is a raw (NBConvert) cell: made a code cell and run first; the written notebook
    has it as a code cell with the next execution count and no outputs."""
    import json

    from crane.fixes.apply import apply_to_notebook
    from crane.fixes.offline import fix_notebook
    from crane.notebook.model import load_notebook, parse_notebook

    cells = [{"cell_type": "code", "execution_count": 1, "id": "a", "metadata": {}, "outputs": [],
              "source": ["values = [1, 2, 3]\n"]},
             {"cell_type": "raw", "id": "b", "metadata": {}, "source": ["doubled = [v * 2 for v in values]\n"]},
             {"cell_type": "code", "execution_count": None, "id": "c", "metadata": {}, "outputs": [],
              "source": ["print(sum(doubled))\n"]}]
    path = tmp_path / "raw.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    nb = load_notebook(path)
    r = fix_notebook(nb, 3)
    fix = offered(r, "raw-cell")
    assert fix.to_code == (2,) and fix.run_first == (2,) and fix.stdout.strip() == "12"
    written = apply_to_notebook(path.read_bytes(), nb, fix)
    cell = json.loads(written)["cells"][1]
    assert (cell["cell_type"], cell["execution_count"], cell["outputs"]) == ("code", 2, [])
    assert parse_notebook(written).cell(2).is_code
