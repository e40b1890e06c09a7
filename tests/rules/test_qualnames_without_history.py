"""Library functions and classes resolved from the kernel's own facts (`Facts.qualname` / `public_name`) when
the notebook's import history is unknown (no NotebookScope, the imports ran in some earlier session): the
sklearn rules still recognise `LinearRegression` and `accuracy_score`. Real kernel, real probe; each crash is
run for real."""

from __future__ import annotations

from .conftest import predict_source, run_target

SETUP = """
import numpy as np, pandas as pd
from sklearn.linear_model import LinearRegression
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split
from pandas import merge
frame = pd.DataFrame({'rooms': [1, 2, 3, 4], 'town': ['a', 'b', 'c', 'd']})
y = pd.Series([1.0, 2.0, 3.0, 4.0])
y_true = np.array([0, 1, 1, 0])
y_pred = np.array([0, 1, 1])
shops = pd.DataFrame({'shop_id': ['a', 'b'], 'city': ['X', 'Y']})
"""


def predicted_and_real(kernel, target):
    findings = predict_source(kernel, SETUP, target)  # scope=None: no notebook history at all
    return findings, run_target(kernel, target)


def test_estimator_class_constructed_in_the_cell(kernel):
    findings, run = predicted_and_real(kernel, "reg = LinearRegression()\nreg.fit(frame, y)")
    assert findings and findings[0].rule == "sklearn-input" and findings[0].ename == "ValueError"
    assert run.ename == "ValueError" and findings[0].message in run.evalue


def test_metric_function(kernel):
    findings, run = predicted_and_real(kernel, "acc = accuracy_score(y_true, y_pred)")
    assert findings and (findings[0].rule, findings[0].ename) == ("sklearn-metrics", "ValueError")
    assert run.ename == "ValueError"


def test_split_function(kernel):
    findings, run = predicted_and_real(kernel, "parts = train_test_split(frame, y_pred)")
    assert findings and (findings[0].rule, findings[0].ename) == ("sklearn-split", "ValueError")
    assert run.ename == "ValueError"


def test_pandas_function_by_its_public_name(kernel):
    findings, run = predicted_and_real(kernel, "m = merge(frame, shops, on='shop')")
    assert findings and (findings[0].rule, findings[0].ename, findings[0].message) == (
        "pandas-merge-join", "KeyError", "'shop'")
    assert run.ename == "KeyError"


def test_clean_twins(kernel):
    target = ("reg = LinearRegression()\nreg.fit(frame[['rooms']], y)\n"
              "acc = accuracy_score(y_true, y_true)\nparts = train_test_split(frame, y)")
    findings, run = predicted_and_real(kernel, target)
    assert findings == [] and run.status == "ok", (findings, run.evalue)


def test_a_user_function_of_the_same_name_is_not_sklearns(kernel):
    setup_extra = "def accuracy_score(a, b):\n    return 0.0\n"
    findings = predict_source(kernel, SETUP + setup_extra, "acc = accuracy_score(y_true, y_pred)")
    assert findings == []
    assert run_target(kernel, "acc = accuracy_score(y_true, y_pred)").status == "ok"
