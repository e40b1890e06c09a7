"""Issue 44: `pd.to_numeric`'s message names the row of the first value it cannot parse ("Unable to parse string
'x' at position N"); the probe carries that row (`non_numeric_position`) for any object, string or category data it
looked at in full, and pandas-to-numeric predicts the kernel's message whole. On every kernel environment here (the
daemon's: pandas 2.1; today's: pandas 3.1; each Python's kernel), the prediction against the real run. The
position is claimed only where it is known: not for a row subset, nor after a value float() takes but pandas'
parser rejects ('1_000'). Likewise numpy's "could not convert string to float: 'x'" for a frame given to
scikit-learn names the first text column's first value only when it is known; for a shuffled split's rows the
message says that only a run knows it."""

from __future__ import annotations

import pytest

from crane.analysis.scope import NotebookScope
from crane.bench.metrics import same_message
from crane.kernel.manager import start_kernel

from ..kernel_envs import PYTHON_KERNELS, python_kernel, require_today_python
from .conftest import predict_source, run_target

ENVS = ["daemon", "today", *(f"py{v}" for v in PYTHON_KERNELS)]

SETUP = """
import numpy as np, pandas as pd
prices = pd.DataFrame({
    'cost': ['10', '12.5', None, '7', 'n/a', '9', 'tbd'],
    'grade': pd.Categorical(['3', '1', 'x', '2', 'x', '1', 'y']),
    'label': pd.array(['1', None, '3', '4', '5', '6', 'seven'], dtype='string'),
}, index=[70, 60, 50, 40, 30, 20, 10])
big = pd.Series(['1', '2.5', '-3'] * 10000, dtype='string')
big[25000] = '25 000'
big[29000] = 'none'
odd = pd.Series(['1', '1_000', 'x'])
huge = pd.Series(['1', '1e500', '2', 'zz'])  # inf to float(); pandas 2.x's parser stops there, 3.x takes it
codes = np.array(['1', None, '2.5', 'A-7', '3', 'B'], dtype=object)
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split
homes = pd.DataFrame({'area': [50.0, 60, 70, 80, 90, 100], 'street': ['1', '2', 'Rue 3', '4', 'Rue 5', '6'],
                      'city': ['Lyon', 'Nice', 'Paris', 'Lyon', 'Nice', 'Paris']})
reg = LinearRegression()
"""

TARGETS = [
    "pd.to_numeric(prices['cost'])",  # a missing value before it counts as a row
    "prices['cost'] = pd.to_numeric(prices['cost'])",
    "pd.to_numeric(prices['grade'])",  # a category column: the row, not the category's code
    "pd.to_numeric(prices['label'])",  # pandas' string dtype with <NA>
    "pd.to_numeric(codes)",  # an object array
    "pd.to_numeric(big)",  # 30000 rows: past the first chunks of the probe's search
]


# numpy's "could not convert string to float: 'x'" for a frame given to scikit-learn: pandas converts it column by
# column, so the first text column's first value in row order
CONVERT = ["reg.fit(homes, [1, 2, 3, 4, 5, 6])", "reg.fit(homes[['city', 'street']], [1, 2, 3, 4, 5, 6])"]
SHUFFLED = "X_tr, X_te, y_tr, y_te = train_test_split(homes, homes['area'], random_state=0)\nreg.fit(X_tr, y_tr)"


@pytest.fixture(scope="module", params=ENVS)
def kernel(request, tmp_path_factory):
    env = request.param
    python = None if env == "daemon" else require_today_python() if env == "today" else python_kernel(env[2:])
    k = start_kernel(tmp_path_factory.mktemp(f"to-numeric-{env}"), python=python)
    try:
        yield k
    finally:
        k.shutdown()


def _predict(kernel, target):
    scope = NotebookScope.from_cells([(1, 1, SETUP), (2, None, target)])
    return predict_source(kernel, SETUP, target, scope=scope, target_cell=2)


@pytest.mark.parametrize("target", TARGETS, ids=[f"case{i}" for i in range(len(TARGETS))])
def test_the_row_is_the_kernels(kernel, target):
    findings = _predict(kernel, target)
    run = run_target(kernel, target)
    assert run.status == "error" and "at position" in run.evalue, (run.ename, run.evalue)
    assert findings, f"no finding; the cell raised {run.ename}: {run.evalue}"
    f = findings[0]
    assert (f.rule, f.ename) == ("pandas-to-numeric", run.ename), (f, run.evalue)
    assert same_message(f.message, run.evalue), (f.message, run.evalue)


@pytest.mark.parametrize("target", ["pd.to_numeric(prices['cost'].head(5))", "pd.to_numeric(odd)",
                                    "pd.to_numeric(huge)"])
def test_no_row_claimed_where_unknown(kernel, target):
    findings = [f for f in _predict(kernel, target) if f.rule == "pandas-to-numeric"]
    run = run_target(kernel, target)
    assert run.status == "error", target
    assert all("at position" not in f.message for f in findings), [f.message for f in findings]


@pytest.mark.parametrize("target", CONVERT, ids=["frame-order", "selected-order"])
def test_the_first_value_numpy_stops_at(kernel, target):
    findings = _predict(kernel, target)
    run = run_target(kernel, target)
    assert run.status == "error", target
    assert findings and findings[0].rule == "sklearn-input", (findings, run.evalue)
    assert same_message(findings[0].message, run.evalue), (findings[0].message, run.evalue)


def test_a_shuffled_splits_first_value_is_not_claimed(kernel):
    findings = _predict(kernel, SHUFFLED)
    run = run_target(kernel, SHUFFLED)
    assert run.status == "error" and run.evalue.startswith("could not convert string to float: "), run.evalue
    assert findings and findings[0].rule == "sklearn-input", findings
    assert findings[0].message.startswith("could not convert string to float: a text value of X_tr such as "), (
        findings[0].message)
    assert "known only when the cell runs: X_tr is a subset of rows" in findings[0].message
