"""scikit-learn rules end to end: real kernel state, the real probe, the whole predictor; every crashing
case is checked against what the target really raises, and every clean twin really runs clean."""

from __future__ import annotations

import pytest

from crane.analysis.scope import NotebookScope

from ..library_versions import kernel_library
from .conftest import predict_source, run_target

SETUP = """
import numpy as np, pandas as pd
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.ensemble import RandomForestRegressor, HistGradientBoostingRegressor
from sklearn.tree import DecisionTreeRegressor
from sklearn.preprocessing import StandardScaler
from sklearn.model_selection import train_test_split
from sklearn.metrics import accuracy_score, mean_squared_error
rng = np.random.default_rng(0)
homes = pd.DataFrame({
    'rooms': rng.integers(1, 6, 40),
    'area': rng.random(40) * 100,
    'district': rng.choice(['North side', 'Old town', 'Harbour'], 40),
})
price = pd.Series(rng.random(40) * 1000, name='price')
label = pd.Series(rng.choice(['cheap', 'dear'], 40))
"""


def check(kernel, setup, target, ename=None, rule=None):
    """Predict `target` after `setup` ran (as cell 1 of a two-cell notebook), then run it for real: the first
    finding must name the exception the cell really raises (or there is no finding and it runs clean)."""
    scope = NotebookScope.from_cells([(1, 1, setup), (2, None, target)])
    findings = predict_source(kernel, setup, target, scope=scope, target_cell=2)
    run = run_target(kernel, target)
    if ename is None:
        assert findings == [], findings
        assert run.status == "ok", (run.ename, run.evalue)
        return None
    assert findings, f"no finding; the cell raised {run.ename}: {run.evalue}"
    first = findings[0]
    assert (first.ename, first.rule) == (ename, rule), first
    assert run.status == "error" and run.ename == ename, (run.ename, run.evalue)
    return first, run


def test_unfitted_predict(kernel):
    setup = SETUP + "tree = DecisionTreeRegressor(random_state=0)\nX = homes[['rooms', 'area']]"
    first, run = check(kernel, setup, "pred = tree.predict(X)", "NotFittedError", "sklearn-not-fitted")
    assert first.message.startswith("This DecisionTreeRegressor instance is not fitted yet")
    assert first.line == 1 and first.col == 7


def test_fitted_in_the_same_cell_is_fine(kernel):
    setup = SETUP + "tree = DecisionTreeRegressor(random_state=0)\nX = homes[['rooms', 'area']]"
    check(kernel, setup, "tree.fit(X, price)\npred = tree.predict(X)")


def test_string_column_in_fit(kernel):
    target = ("X = homes.drop(columns=['rooms'])\n"
              "X_tr, X_te, y_tr, y_te = train_test_split(X, price, test_size=0.25, random_state=1)\n"
              "reg = LinearRegression()\nreg.fit(X_tr, y_tr)")
    first, run = check(kernel, SETUP, target, "ValueError", "sklearn-input")
    assert first.message.startswith("could not convert string to float: ")
    assert "could not convert string to float" in run.evalue
    assert any("district (object" in e for e in first.evidence)
    assert first.line == 4


def test_encoded_string_column_is_fine(kernel):
    target = ("from sklearn.preprocessing import LabelEncoder\n"
              "homes['district'] = LabelEncoder().fit_transform(homes['district'])\n"
              "X = homes.drop(columns=['rooms'])\n"
              "X_tr, X_te, y_tr, y_te = train_test_split(X, price, test_size=0.25, random_state=1)\n"
              "reg = LinearRegression()\nreg.fit(X_tr, y_tr)")
    check(kernel, SETUP, target)


def test_string_target_for_a_scaler(kernel):
    target = "scaler = StandardScaler()\nlabel_scaled = scaler.fit_transform(label)"
    first, _ = check(kernel, SETUP, target, "ValueError", "sklearn-input")
    assert first.message in ("could not convert string to float: 'cheap'", "could not convert string to float: 'dear'")


def test_nan_rejected_by_trees_in_1_2_accepted_by_hist_gradient_boosting(kernel):
    setup = SETUP + "homes.loc[3, 'area'] = np.nan\nX = homes[['rooms', 'area']]"
    rf = "rf = RandomForestRegressor(n_estimators=5)\nrf.fit(X, price)"
    if kernel_library("scikit-learn") < (1, 3):
        first, run = check(kernel, setup, rf, "ValueError", "sklearn-input")
        assert first.message.startswith("Input X contains NaN.")
    elif kernel_library("scikit-learn") >= (1, 4):  # random forests take NaN from 1.4 on (1.3: the trees only)
        check(kernel, setup, rf)
    check(kernel, setup, "hgb = HistGradientBoostingRegressor(max_iter=5)\nhgb.fit(X, price)")


def test_nan_rejected_by_linear_models_in_every_release(kernel):
    setup = SETUP + "homes.loc[3, 'area'] = np.nan\nX = homes[['rooms', 'area']]"
    first, run = check(kernel, setup, "lr = LinearRegression()\nlr.fit(X, price)", "ValueError", "sklearn-input")
    assert first.message.startswith("Input X contains NaN.") and run.evalue.startswith("Input X contains NaN.")


def test_inconsistent_lengths_in_fit(kernel):
    setup = SETUP + "X = homes[['rooms', 'area']].values\ny_short = price.values[:30]"
    first, run = check(kernel, setup, "lr = LinearRegression()\nlr.fit(X, y_short)", "ValueError", "sklearn-input")
    assert first.message == "Found input variables with inconsistent numbers of samples: [40, 30]"
    assert run.evalue == first.message


def test_feature_names_differ_from_fit(kernel):
    setup = SETUP + ("num = homes[['rooms', 'area']]\nreg = LinearRegression().fit(num, price)\n"
                     "other = homes[['rooms']].assign(size=1.0)")
    first, run = check(kernel, setup, "reg.predict(other)", "ValueError", "sklearn-input")
    assert first.message.startswith("The feature names should match those that were passed during fit.")
    check(kernel, setup, "reg.predict(num)")


def test_feature_count_differs_from_fit(kernel):
    setup = SETUP + "A = rng.random((10, 3))\nreg = LinearRegression().fit(A, rng.random(10))\nB = rng.random((4, 2))"
    first, run = check(kernel, setup, "reg.predict(B)", "ValueError", "sklearn-input")
    assert first.message == "X has 2 features, but LinearRegression is expecting 3 features as input."
    assert run.evalue == first.message


def test_empty_split(kernel):
    setup = SETUP + "sel = homes[homes['rooms'] > 10]\nx = np.array(sel['area']).reshape(-1, 1)\ny = x.copy()"
    first, run = check(kernel, setup, "x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2)",
                       "ValueError", "sklearn-split")
    assert first.message == run.evalue
    setup_ok = SETUP + "x = homes[['area']].values\ny = price.values"
    check(kernel, setup_ok, "x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2)")


def test_accuracy_on_feature_matrix(kernel):
    setup = SETUP + "feats = homes[['rooms', 'area']]\nclasses = homes['rooms']"
    first, run = check(kernel, setup, "acc = accuracy_score(feats, classes)", "ValueError", "sklearn-metrics")
    assert first.message == run.evalue
    check(kernel, setup, "acc = accuracy_score(classes, classes)")


def test_metric_lengths(kernel):
    setup = SETUP + "a = price.values\nb = price.values[:35]"
    first, run = check(kernel, setup, "mean_squared_error(a, b)", "ValueError", "sklearn-metrics")
    assert first.message == run.evalue


@pytest.mark.parametrize("ctor", [
    "LogisticRegression(max_iter=100, solver='liblinear', penalty='elasticnet')",
    "LogisticRegression(penalty='l1')",
])
def test_logistic_regression_penalty_solver(kernel, ctor):
    setup = SETUP + "X = homes[['rooms', 'area']]"
    first, run = check(kernel, setup, f"clf = {ctor}\nclf.fit(X, label)", "ValueError", "sklearn-params")
    assert first.message == run.evalue


def test_logistic_regression_valid_penalty(kernel):
    setup = SETUP + "X = homes[['rooms', 'area']]"
    check(kernel, setup, "clf = LogisticRegression(max_iter=100, solver='liblinear', penalty='l1')\nclf.fit(X, label)")


def test_invalid_parameter_from_the_class_itself(kernel):
    setup = SETUP + "X = homes[['rooms', 'area']]\nforest = RandomForestRegressor(criterion='mse')"
    first, run = check(kernel, setup, "forest.fit(X, price)", "InvalidParameterError", "sklearn-params")
    prefix = "The 'criterion' parameter of RandomForestRegressor must be a str among"
    assert first.message.startswith(prefix) and run.evalue.startswith(prefix)  # set order varies by process


def test_conditional_call_is_not_judged(kernel):
    setup = SETUP + "tree = DecisionTreeRegressor()\nX = homes[['rooms', 'area']]\nready = False"
    check(kernel, setup, "if ready:\n    tree.predict(X)")
