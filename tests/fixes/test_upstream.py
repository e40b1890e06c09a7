"""Fixes where the crash began, second set (crane.fixes.upstream, and the fit after cross-validation in
crane.fixes.sklearn_models): values made in an earlier cell that went stale or were built wrong. Real kernel,
small notebooks written from public notebook patterns; each test checks the exact cells edited or run again.
"""

from __future__ import annotations

from .conftest import fix_search, titles

PD = "import pandas as pd\nimport numpy as np\n"
SK = PD + "from sklearn.linear_model import LogisticRegression, LinearRegression\n" \
          "from sklearn.model_selection import cross_val_score\n"


def offered(report, kind: str):
    fixes = [f for f in report.fixes if f.kind == kind]
    assert fixes, f"no verified {kind} fix; offered: {titles(report)}; tried: {report.failed}"
    return fixes[0]


def test_stale_feature_list_runs_again_after_the_encoding(kernel):
    cells = [(PD, True), ("df = pd.DataFrame({'a': [1, 2, 3], 'city': ['x', 'y', 'x']})\n", True),
             ("features = [c for c in df.columns]\n", True), ("df = pd.get_dummies(df, columns=['city'])\n", True),
             ("X = df[features]\nprint(X.shape)\n", False)]
    r = fix_search(kernel, cells, 5)
    fix = offered(r, "stale-input")
    assert fix.run_first == (3,) and fix.new == fix.old
    assert fix.title == "Run cell 3 again first (after cell 4 changed `df`)" and fix.stdout.strip() == "(3, 3)"


def test_mask_built_from_another_frame(kernel):
    cells = [(PD, True), ("train = pd.DataFrame({'age': [20, 40, 60]})\ntest = pd.DataFrame({'age': [30, 50]})\n",
                          True), ("old = test['age'] > 35\n", True), ("print(len(train[old]))\n", False)]
    r = fix_search(kernel, cells, 4)
    fix = offered(r, "mask-frame")
    (change,) = fix.cell_edits
    assert change.cell == 3 and change.new == "old = train['age'] > 35\n" and fix.stdout.strip() == "2"


def test_encoding_that_missed_a_column(kernel):
    cells = [(SK, True), ("df = pd.DataFrame({'a': [1., 2, 3, 4], 'sex': ['m', 'f', 'm', 'f'], "
                          "'port': ['S', 'C', 'S', 'Q'], 'y': [0, 1, 0, 1]})\n", True),
             ("df = pd.get_dummies(df, columns=['sex'])\n", True), ("X, y = df.drop(columns='y'), df['y']\n", True),
             ("LogisticRegression().fit(X, y)\n", False)]
    r = fix_search(kernel, cells, 5)
    fix = offered(r, "encode-missed")
    (change,) = fix.cell_edits
    assert change.cell == 3 and change.new == "df = pd.get_dummies(df, columns=['sex', 'port'])\n"
    assert fix.run_first == (2, 3, 4)  # df is made again before cell 3 re-encodes it


def test_column_converted_where_the_frame_is_made(kernel):
    cells = [(PD, True), ("sales = pd.DataFrame({'price': ['1,200', '950', '2,000'], 'qty': [1, 2, 3]})\n", True),
             ("top = sales[sales['qty'] > 1]\n", True), ("print(top['price'].mean())\n", False)]
    r = fix_search(kernel, cells, 4)
    fix = offered(r, "column-dtype")
    (change,) = fix.cell_edits
    assert change.cell == 2 and change.new.splitlines()[1] == \
        "sales['price'] = pd.to_numeric(sales['price'].astype(str).str.replace(r'[,]', '', regex=True), errors='coerce')"
    assert fix.run_first == (2, 3) and fix.stdout.strip() == "1475.0"


def test_model_overwritten_later_in_the_cell_keeps_its_own_name(kernel):
    cells = [(SK + "from sklearn.ensemble import RandomForestClassifier\nfrom sklearn.svm import SVC\n", True),
             ("X = np.arange(20.).reshape(10, 2)\ny = np.array([0, 1] * 5)\n", True),
             ("model = RandomForestClassifier(n_estimators=5, random_state=0)\nmodel.fit(X, y)\n"
              "model = SVC()\nmodel.fit(X, y)\n", True),
             ("print(len(model.feature_importances_))\n", False)]
    r = fix_search(kernel, cells, 4)
    fix = offered(r, "rename-overwritten")
    (change,) = fix.cell_edits
    assert change.cell == 3 and change.new.splitlines()[:2] == [
        "model_randomforestclassifier = RandomForestClassifier(n_estimators=5, random_state=0)",
        "model_randomforestclassifier.fit(X, y)"]
    assert fix.new == "print(len(model_randomforestclassifier.feature_importances_))\n" and fix.stdout.strip() == "2"
    assert fix.title == ("Cell 3: keep the RandomForestClassifier of line 1 as `model_randomforestclassifier`; run cell 3 "
                         "again; use `model_randomforestclassifier` in cell 4")


def test_fit_after_cross_validation(kernel):
    cells = [(SK, True), ("X = np.arange(20.).reshape(10, 2)\ny = np.array([0, 1] * 5)\nclf = LogisticRegression()\n",
                          True), ("print(cross_val_score(clf, X, y, cv=2).shape)\n", True),
             ("print(clf.predict(X[:2]).shape)\n", False)]
    r = fix_search(kernel, cells, 4)
    fix = offered(r, "fit-first")
    assert fix.new.splitlines()[0] == "clf.fit(X, y)" and fix.stdout.strip() == "(2,)"


def test_index_labels_of_the_values_length(kernel):
    cells = [(SK + "from sklearn.tree import DecisionTreeClassifier\n", True),
             ("data = pd.DataFrame({'a': [1., 2, 3, 4], 'b': [0., 1, 0, 1], 'y': [0, 1, 0, 1]})\n"
              "features = data.drop(columns='y')\n", True),
             ("tree = DecisionTreeClassifier(random_state=0).fit(features, data['y'])\n", True),
             ("imp = pd.Series(tree.feature_importances_, index=data.columns)\nprint(len(imp))\n", False)]
    r = fix_search(kernel, cells, 4)
    fix = offered(r, "index-length")
    assert fix.new.splitlines()[0] in ("imp = pd.Series(tree.feature_importances_, index=features.columns)",
                                       "imp = pd.Series(tree.feature_importances_, index=tree.feature_names_in_)")
    assert fix.stdout.strip() == "2"


def test_loop_variable_that_overwrote_a_fitted_model_is_renamed(kernel):
    head = SK + "from sklearn.ensemble import RandomForestClassifier\n"
    cells = [(head, True), ("X = np.arange(20.).reshape(10, 2)\ny = np.array([0, 1] * 5)\n", True),
             ("model = RandomForestClassifier(n_estimators=5, random_state=0)\n", True), ("model.fit(X, y)\n", True),
             ("models = {'lr': LogisticRegression()}\nfor name, model in models.items():\n    model.fit(X, y)\n", True),
             ("print(len(model.feature_importances_))\n", False)]
    r = fix_search(kernel, cells, 6)
    fix = offered(r, "rename-overwritten")
    (change,) = fix.cell_edits
    assert change.cell == 5 and change.new.splitlines()[1:] == ["for name, each_model in models.items():",
                                                                "    each_model.fit(X, y)"]
    assert fix.run_first == (3, 4, 5) and fix.new == fix.old and fix.stdout.strip() == "2"


def test_shadowed_builtin_renamed_and_verified_in_a_fresh_replay(tmp_path):
    """`max` bound by a cell: renamed where it is bound and read; verified by replaying the written notebook."""
    from crane.fixes.offline import fix_notebook

    from .conftest import notebook

    nb = notebook([("ages = [31, 45, 27]\n", True), ("max = ages[0]\nfor a in ages:\n    if a > max:\n        max = a\n",
                    True), ("print('oldest', max)\n", True), ("print(max(ages) - min(ages))\n", False)],
                  path=str(tmp_path / "nb.ipynb"))
    r = fix_notebook(nb, 4)
    fix = offered(r, "shadowed-builtin")
    assert fix.sandbox == "fresh" and fix.new == fix.old and fix.stdout.strip() == "18"
    assert [c.cell for c in fix.cell_edits] == [2, 3] and fix.run_first == (2, 3)
    assert fix.cell_edits[1].new == "print('oldest', max_value)\n"
    assert fix.title == "Cells 2, 3: name the variable `max_value`, not `max` (it hid the builtin); run cells 2, 3 again"
