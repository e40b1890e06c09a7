"""Each candidate kind against a real kernel: offered when it runs clean in the sandbox, not offered when it
does not (it is generated, tried, and still raises).

Setups are small; the kernel is shared (see conftest.py). Every test checks the offered fix's new source
(the edit is exactly the intended one) or its cells to run first.
"""

from __future__ import annotations

import pytest

from .conftest import fix_search, titles, tried_kinds

PD = "import pandas as pd\nimport numpy as np\n"
SK = PD + "from sklearn.linear_model import LinearRegression, LogisticRegression\n"


def first(report):
    assert report.fixes, f"no verified fix; tried: {report.failed}"
    return report.fixes[0]


def refused_kind(report, kind: str) -> None:
    """The kind was generated and tried, and none of its candidates is offered."""
    assert kind in tried_kinds(report), f"{kind} not tried: {[a.kind for a in report.attempts]}"
    assert all(f.kind != kind for f in report.fixes), titles(report)


# -- names ------------------------------------------------------------------------------------------------------
def test_run_first_cell_not_run(kernel):
    cells = [(PD, True), ("df = pd.DataFrame({'a': [1, 2]})\nb = 2\n", False), ("print(df.a.sum() * b)\n", False)]
    r = fix_search(kernel, cells, 3)
    fix = first(r)
    assert (fix.kind, fix.title, fix.run_first, fix.new) == ("run-first", "Run cell 2 first", (2,), fix.old)
    assert r.crash is not None
    assert r.crash.ename == "NameError" and fix.stdout.strip() == "6"


def test_run_first_brings_in_the_cells_it_needs(kernel):
    cells = [("base = 10\n", False), ("scaled = base * 2\n", False), ("print(scaled + 1)\n", False)]
    fix = first(fix_search(kernel, cells, 3))
    assert fix.run_first == (1, 2) and fix.title == "Run cells 1, 2 first"


def test_run_first_not_offered_when_the_cell_fails(kernel):
    cells = [("df = undefined_source.copy()\n", False), ("print(df.shape)\n", False)]
    r = fix_search(kernel, cells, 2)
    assert not any(f.run_first for f in r.fixes)
    assert "run-first" in tried_kinds(r)


def test_run_stale_cell_above(kernel):
    cells = [(PD, True), ("y = np.arange(4)\n", True), ("pred = np.arange(3)\n", True),
             ("pred = y * 2\n", False), ("print(((y - pred) ** 2).sum())\n", False)]
    r = fix_search(kernel, cells, 5)
    fix = first(r)
    assert r.crash is not None
    assert fix.kind == "run-stale" and fix.run_first == (4,) and r.crash.ename == "ValueError"


def test_nearest_name(kernel):
    cells = [("length = 3\n", True), ("print(lenght * 2)\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "nearest-name" and fix.new == "print(length * 2)\n"


def test_nearest_name_not_offered_when_it_fails(kernel):
    cells = [("length = 'abc'\n", True), ("print(lenght + 2)\n", False)]
    refused_kind(fix_search(kernel, cells, 2), "nearest-name")


# -- keys, columns, attributes ------------------------------------------------------------------------------------
def test_nearest_column(kernel):
    cells = [(PD + "df = pd.DataFrame({'Total_Gross': [1.5, 2.5], 'Title': ['a', 'b']})\n", True),
             ('top = df[df["Total Gross (millions)"] > 2]\nprint(len(top))\n', False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "nearest-column" and fix.title == "Use column 'Total_Gross'"
    assert fix.new == 'top = df[df["Total_Gross"] > 2]\nprint(len(top))\n'  # the cell's own quotes


def test_nearest_column_not_offered_when_it_fails(kernel):
    cells = [(PD + "df = pd.DataFrame({'total': ['x', 'y']})\n", True), ("print(df['Total'].astype(int))\n", False)]
    r = fix_search(kernel, cells, 2)
    refused_kind(r, "nearest-column")


def test_nearest_key_of_a_dict(kernel):
    cells = [("params = {'learning_rate': 0.1, 'depth': 3}\n", True), ("print(params['learning_rte'] * 2)\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "nearest-key" and fix.new == "print(params['learning_rate'] * 2)\n"


def test_fitted_attribute_underscore(kernel):
    cells = [(SK + "m = LinearRegression().fit([[1.0], [2.0], [3.0]], [1.0, 2.0, 3.5])\n", True),
             ("print(m.coef.round(2))\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "nearest-attribute" and fix.new == "print(m.coef_.round(2))\n"


def test_module_attribute_typo(kernel):
    cells = [(PD, True), ("print(np.arrange(3).sum())\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.new == "print(np.arange(3).sum())\n"


def test_nearest_attribute_not_offered_when_it_fails(kernel):
    cells = [(PD, True), ("print(np.arrange(3).sum(axis=5))\n", False)]
    refused_kind(fix_search(kernel, cells, 2), "nearest-attribute")


# -- calls --------------------------------------------------------------------------------------------------------
def test_nearest_keyword(kernel):
    cells = [("def area(width, height=1):\n    return width * height\n", True), ("print(area(2, heigth=3))\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "nearest-keyword" and fix.new == "print(area(2, height=3))\n"


def test_nearest_keyword_not_offered_when_it_fails(kernel):
    cells = [("def area(width, height=1):\n    return width * height\n", True),
             ("print(area(2, heigth='3') + 1)\n", False)]
    refused_kind(fix_search(kernel, cells, 2), "nearest-keyword")


def test_multiple_values(kernel):
    cells = [("def point(x, y, size=1, color='k'):\n    return (x, y, size, color)\n", True),
             ("print(point(1, 2, 3, size=5))\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "multiple-values" and fix.new == "print(point(1, 2, size=5))\n"


def test_option_value(kernel):
    cells = [(SK + "X = [[0.0], [1.0], [2.0], [3.0]]\ny = [0, 1, 0, 1]\n", True),
             ("clf = LogisticRegression(solver='liblinear', penalty='elasticnet')\nclf.fit(X, y)\n", False)]
    r = fix_search(kernel, cells, 2)
    fix = first(r)
    assert fix.kind == "option-value" and "penalty='l" in fix.new and "solver='liblinear'" in fix.new
    assert all("elasticnet" not in f.new or "saga" in f.new for f in r.fixes)


def test_option_value_not_offered_when_it_fails(kernel):
    cells = [(SK + "X = [[0.0], [1.0]]\ny = [0, 0]\n", True),  # one class: every penalty still fails
             ("clf = LogisticRegression(solver='liblinear', penalty='elasticnet')\nclf.fit(X, y)\n", False)]
    refused_kind(fix_search(kernel, cells, 2), "option-value")


# -- scikit-learn ---------------------------------------------------------------------------------------------------
def test_reshape_2d(kernel):
    cells = [(SK + "df = pd.DataFrame({'x': [1.0, 2.0, 3.0], 'y': [2.0, 4.1, 6.0]})\n", True),
             ("m = LinearRegression().fit(df['x'], df['y'])\nprint(round(m.coef_[0], 1))\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "reshape-2d" and fix.new.startswith("m = LinearRegression().fit(df[['x']], df['y'])")


def test_reshape_2d_not_offered_when_it_fails(kernel):
    cells = [(SK + "x = np.array([1.0, 2.0, 3.0])\ny = np.array([1.0, 2.0])\n", True),
             ("m = LinearRegression().fit(x, y)\n", False)]
    refused_kind(fix_search(kernel, cells, 2), "reshape-2d")


def test_encode_strings(kernel):
    cells = [(SK + "X = pd.DataFrame({'size': [1.0, 2.0, 3.0, 4.0], 'city': ['a', 'b', 'a', 'b']})\n"
              "y = [1.0, 2.0, 3.0, 4.5]\nX_new = X.copy()\n", True),
             ("m = LinearRegression()\nm.fit(X, y)\nprint(m.predict(X_new).shape)\n", False)]
    r = fix_search(kernel, cells, 2)
    fix = first(r)
    assert fix.kind == "encode-strings" and "['city']" in fix.new
    assert "X_new" in fix.new.split("m.fit(X, y)")[1]  # the later input is encoded the same way


def test_encode_strings_not_offered_when_it_fails(kernel):
    cells = [(SK + "X = pd.DataFrame({'size': [1.0, 2.0, 3.0], 'city': ['a', 'b', 'a']})\ny = [1.0, 2.0]\n", True),
             ("m = LinearRegression()\nm.fit(X, y)\n", False)]
    refused_kind(fix_search(kernel, cells, 2), "encode-strings")


def test_nan_input(kernel):
    cells = [(SK + "X = pd.DataFrame({'a': [1.0, np.nan, 3.0, 4.0]})\ny = pd.Series([1.0, 2.0, 3.0, 4.0])\n", True),
             ("m = LinearRegression().fit(X, y)\nprint(m.coef_.shape)\n", False)]
    r = fix_search(kernel, cells, 2)
    assert first(r).kind == "impute-nan" and first(r).new.startswith("X = X.fillna(0)\n")  # the smallest change
    news = [f.new for f in r.fixes]
    assert any(n.startswith("X = X.fillna(X.median(numeric_only=True))\n") for n in news)
    assert any(f.kind == "drop-nan-rows" for f in r.fixes)


def test_nan_input_not_offered_when_it_fails(kernel):
    cells = [(SK + "X = pd.DataFrame({'a': [np.nan, np.nan]})\ny = pd.Series([1.0, 2.0])\n", True),
             ("m = LinearRegression().fit(X, y)\n", False)]
    r = fix_search(kernel, cells, 2)  # all-NaN column: medians are NaN too
    assert any(a.kind == "impute-nan" and "median" in a.title and a.status == "error" for a in r.attempts)
    assert all("median" not in f.new for f in r.fixes)


def test_fit_first(kernel):
    cells = [(SK + "X = [[1.0], [2.0], [3.0]]\ny = [1.0, 2.0, 3.0]\nmodel = LinearRegression()\n", True),
             ("model.fit(X, y)\n", False), ("print(model.predict(X).round(1))\n", False)]
    r = fix_search(kernel, cells, 3)
    assert any(f.kind == "fit-first" and f.new == "model.fit(X, y)\nprint(model.predict(X).round(1))\n"
               or f.run_first == (2,) for f in r.fixes), titles(r)


def test_use_fitted(kernel):
    cells = [(SK + "X = [[1.0], [2.0], [3.0]]\ny = [1.0, 2.0, 3.0]\ntemplate = LinearRegression()\n"
              "best = LinearRegression().fit(X, y)\n", True), ("print(template.predict(X).round(1))\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "use-fitted" and fix.new == "print(best.predict(X).round(1))\n"


def test_select_features(kernel):
    cells = [(SK + "train = pd.DataFrame({'a': [1.0, 2.0, 3.0], 'b': [0.0, 1.0, 0.0]})\n"
              "m = LinearRegression().fit(train, [1.0, 2.0, 3.0])\n"
              "test = pd.DataFrame({'b': [1.0], 'c': [5.0], 'a': [2.0]})\n", True), ("print(m.predict(test))\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "select-features" and fix.new == "print(m.predict(test[m.feature_names_in_]))\n"


def test_metric_predictions(kernel):
    cells = [(SK + "from sklearn.metrics import accuracy_score\n"
              "X = pd.DataFrame({'a': [0.1, 0.9, 0.2], 'b': [1.5, 2.5, 3.5]})\ny = pd.Series([0, 1, 0])\n"
              "y_pred = np.array([0, 1, 1])\n", True), ("print(accuracy_score(X, y))\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "metric-predictions" and fix.new == "print(accuracy_score(y_pred, y))\n"


# -- torch ----------------------------------------------------------------------------------------------------------
TORCH = "import torch\nimport torch.nn as nn\ntorch.manual_seed(0)\n"


def test_torch_flatten_input(kernel):
    cells = [(TORCH + "layer = nn.Linear(12, 2)\nx = torch.randn(5, 3, 4)\n", True), ("out = layer(x)\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "flatten-input" and fix.new == "out = layer(x.flatten(1))\n"


def test_torch_linear_in_features(kernel):
    cells = [(TORCH + "x = torch.randn(5, 7)\n", True), ("net = nn.Linear(10, 2)\nout = net(x)\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "linear-in-features" and fix.new == "net = nn.Linear(7, 2)\nout = net(x)\n"


def test_torch_target_long(kernel):
    cells = [(TORCH + "logits = torch.randn(4, 3)\ntarget = torch.tensor([0.0, 2.0, 1.0, 1.0])\n"
              "loss_fn = nn.CrossEntropyLoss()\n", True), ("loss = loss_fn(logits, target)\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "target-long" and fix.new == "loss = loss_fn(logits, target.long())\n"


def test_torch_target_float(kernel):
    cells = [(TORCH + "scores = torch.randn(4)\nlabels = torch.tensor([0, 1, 1, 0])\n"
              "bce = nn.BCEWithLogitsLoss()\n", True), ("loss = bce(scores, labels)\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "target-float" and fix.new == "loss = bce(scores, labels.float())\n"


def test_torch_target_long_not_offered_when_it_fails(kernel):
    cells = [(TORCH + "logits = torch.randn(4, 3)\ntarget = torch.tensor([0.0, 5.0, 1.0, 1.0])\n"
              "loss_fn = nn.CrossEntropyLoss()\n", True), ("loss = loss_fn(logits, target)\n", False)]
    refused_kind(fix_search(kernel, cells, 2), "target-long")  # class 5 of 3: still an error


# -- pandas ---------------------------------------------------------------------------------------------------------
def test_astype_formatted_numbers(kernel):
    cells = [(PD + "df = pd.DataFrame({'installs': ['10,000+', '500+', '1,000,000+']})\n", True),
             ("df['installs'] = df['installs'].astype('int')\nprint(df['installs'].sum())\n", False)]
    r = fix_search(kernel, cells, 2)
    fix = first(r)
    assert fix.kind == "to-numeric" and ".str.replace(r'[+,]', '', regex=True).astype('int')" in fix.new
    assert fix.stdout.strip() == "1010500"


def test_to_numeric_refuses_losing_the_data(kernel):
    cells = [(PD + "df = pd.DataFrame({'price': ['$1,200', '$950', '$3,100']})\n", True),
             ("df['price'] = pd.to_numeric(df['price'])\n", False)]
    r = fix_search(kernel, cells, 2)
    assert first(r).title.startswith("Remove '$', ','")
    assert not any("coerce" in f.new and "replace" not in f.new for f in r.fixes)  # would make every value NaN


def test_to_numeric_not_offered_when_it_fails(kernel):
    cells = [(PD + "s = pd.Series(['1', '2', 'three'])\n", True), ("v = s.astype(int).sum() + s.astype(int)[5]\n", False)]
    r = fix_search(kernel, cells, 2)
    assert "to-numeric" in tried_kinds(r) and not r.fixes


def test_drop_missing_labels(kernel):
    cells = [(PD + "df = pd.DataFrame({'a': [1], 'b': [2], 'c': [3]})\ndf = df.drop(columns=['b'])\n", True),
             ("df = df.drop(['b', 'c'], axis=1)\nprint(list(df.columns))\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "drop-missing-labels" and "errors='ignore'" in fix.new and fix.stdout.strip() == "['a']"


def test_drop_of_a_typo_is_not_ignored(kernel):
    cells = [(PD + "df = pd.DataFrame({'Price': [1], 'b': [2]})\n", True), ("df = df.drop(['price'], axis=1)\n", False)]
    r = fix_search(kernel, cells, 2)
    assert "drop-missing-labels" not in tried_kinds(r)


def test_merge_key(kernel):
    cells = [(PD + "left = pd.DataFrame({'user_id': [1, 2], 'x': [3, 4]})\n"
              "right = pd.DataFrame({'user_id': [1, 2], 'y': [5, 6]})\n", True),
             ("both = left.merge(right, on='userid')\nprint(both.shape)\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "merge-key" and "on='user_id'" in fix.new


def test_join_suffix(kernel):
    cells = [(PD + "a = pd.DataFrame({'n': [1, 2]})\nb = pd.DataFrame({'n': [3, 4]})\n", True),
             ("c = a.join(b)\nprint(c.shape)\n", False)]
    fix = first(fix_search(kernel, cells, 2))
    assert fix.kind == "join-suffix" and fix.new.startswith("c = a.join(b, rsuffix='_other')")


# -- the search ----------------------------------------------------------------------------------------------------
def test_clean_and_unfixable_cells(kernel):
    assert fix_search(kernel, [("x = 1\n", True), ("print(x + 1)\n", False)], 2).status == "clean"
    r = fix_search(kernel, [("x = 1\n", True), ("print(x / 0)\n", False)], 2)
    assert r.crash is not None
    assert r.status == "not-fixed" and not r.fixes and r.crash.ename == "ZeroDivisionError"


def test_at_most_three_smallest_first(kernel):
    cells = [(PD + "df = pd.DataFrame({'installs': ['10,000+', '500+', 'Free']})\n", True),
             ("df['installs'] = df['installs'].astype(float)\n", False)]
    r = fix_search(kernel, cells, 2)
    assert 1 <= len(r.fixes) <= 3
    costs = [f.cost for f in r.fixes]
    assert costs == sorted(costs)


@pytest.mark.parametrize("budget_candidates", [1])
def test_candidate_budget(kernel, budget_candidates):
    from crane.fixes.search import SearchBudget

    cells = [(PD + "df = pd.DataFrame({'installs': ['10,000+', '500+']})\n", True),
             ("df['installs'] = df['installs'].astype('int')\n", False)]
    r = fix_search(kernel, cells, 2, budget=SearchBudget(max_candidates=budget_candidates))
    assert r.tried == 1 and "candidate budget" in r.reason or r.fixes


# -- a crash inside a function another cell defines ------------------------------------------------------------
def test_fix_in_the_cell_defining_the_function(kernel):
    cells = [(PD + "def to_units(s):\n    return s.astype(int)\n", True),
             ("print(to_units(pd.Series(['1,000', '250'])).sum())\n", False)]
    r = fix_search(kernel, cells, 2)
    fix = first(r)
    assert fix.new == fix.old and fix.run_first == (1,) and fix.title.startswith("Cell 1: remove")
    (change,) = fix.cell_edits
    assert change.cell == 1 and ".str.replace(" in change.new and change.old == cells[0][0]
    assert fix.run_first_sources == (change.new,) and fix.stdout.strip() == "1250"


def test_no_fix_in_the_defining_cell_when_it_still_fails(kernel):
    cells = [(PD + "def to_units(s):\n    return s.astype(int) + s\n", True),
             ("print(to_units(pd.Series(['1,000', '250'])).sum())\n", False)]
    r = fix_search(kernel, cells, 2)
    assert any(a.title.startswith("Cell 1:") for a in r.attempts)
    assert not any(f.cell_edits for f in r.fixes)


def test_a_cell_that_writes_a_file_is_verified_in_a_private_layer(kernel, kernel_cwd):
    """Sessions refuse writes: the candidate runs again in a speculative run with a private layer, and the
    file it writes never reaches the real folder."""
    cells = [(PD + "df = pd.DataFrame({'Total_Gross': [1.5, 2.5]})\n", True),
             ("out = df[df['Total Gross'] > 2]\nout.to_csv('top.csv')\nprint(len(out))\n", False)]
    r = fix_search(kernel, cells, 2)
    fix = first(r)
    assert fix.kind == "nearest-column" and fix.sandbox == "fork-layered" and "['Total_Gross']" in fix.new
    assert not (kernel_cwd / "top.csv").exists()
