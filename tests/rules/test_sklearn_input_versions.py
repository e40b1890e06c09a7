"""sklearn-input's messages against the kernel's own scikit-learn, on every kernel environment this machine has:
the daemon's (scikit-learn 1.2 on Python 3.11, 1.5 on 3.12 and 3.13: pyproject.toml's bench extra), today's
(1.9, pandas 3) and a kernel of each supported Python (build/kernel-py3XX). The whole predictor on real kernel
state; each predicted message must equal what the real call raises (a 1-D array's values, which the rule cannot
know, elided). 1-D X is the case whose wording changed: from scikit-learn 1.4 a pandas Series is "Expected a
2-dimensional container but got <class '...Series'>" (pandas 3 names it pandas.Series)."""

from __future__ import annotations

import re

import pytest

from crane.analysis import derive
from crane.analysis.scope import NotebookScope
from crane.kernel.manager import start_kernel
from crane.probe.facts import ColumnFacts, Facts
from crane.rulekit.sklearn_checks import one_d_message

from ..kernel_envs import PYTHON_KERNELS, python_kernel, require_today_python
from .conftest import predict_source, run_target

ENVS = ["daemon", "today", *(f"py{v}" for v in PYTHON_KERNELS)]

SETUP = """
import sys, sklearn
import numpy as np, pandas as pd
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeRegressor
rng = np.random.default_rng(0)
homes = pd.DataFrame({'rooms': rng.integers(1, 6, 12), 'area': rng.random(12) * 100,
                      'district': rng.choice(['North side', 'Old town'], 12)})
price = pd.Series(rng.random(12) * 1000, name='price')
fitted = LinearRegression().fit(homes[['rooms', 'area']], price)
scaler = StandardScaler().fit(homes[['rooms', 'area']])
area, rooms, values, empty, few = homes['area'], homes.rooms, np.arange(12.0), homes[['rooms', 'area']].iloc[:0], price[:5]
"""

CRASHES = [
    "reg = LinearRegression()\nreg.fit(area, price)",  # a Series: 1.4+'s words
    "reg = LinearRegression()\nreg.fit(rooms, price)",  # an integer Series
    "sc = StandardScaler()\nsc.fit(homes['area'])",
    "fitted.predict(area)",
    "scaler.transform(rooms)",
    "clf = LogisticRegression()\nclf.fit(values, price > 500)",  # an array: every release's words
    "tree = DecisionTreeRegressor()\ntree.fit(values, price)",
    "reg = LinearRegression()\nreg.fit(homes, price)",  # a text column
    "reg = LinearRegression()\nreg.fit(empty, price)",  # no samples
    "reg = LinearRegression()\nreg.fit(homes[['rooms', 'area']], few)",  # lengths differ
]


@pytest.fixture(scope="module", params=ENVS)
def kernel(request, tmp_path_factory):
    env = request.param
    python = None if env == "daemon" else require_today_python() if env == "today" else python_kernel(env[2:])
    k = start_kernel(tmp_path_factory.mktemp(f"sklearn-{env}"), python=python)
    try:
        yield k
    finally:
        k.shutdown()


def _without_values(message: str) -> str:
    """scikit-learn's 1-D array message with the array's values left out, as the rule words it."""
    return re.sub(r"^(Expected 2D array, got 1D array instead):\narray=.*?\.\n(Reshape)", r"\1. \2", message,
                  flags=re.S)


@pytest.mark.parametrize("target", CRASHES, ids=[f"case{i}" for i in range(len(CRASHES))])
def test_the_message_is_the_kernels_scikit_learns(kernel, target):
    scope = NotebookScope.from_cells([(1, 1, SETUP), (2, None, target)])
    findings = predict_source(kernel, SETUP, target, scope=scope, target_cell=2)
    run = run_target(kernel, target)
    assert run.status == "error", target
    assert findings, f"no finding; the cell raised {run.ename}: {run.evalue}"
    versions = kernel.connection.evaluate("'%d.%d %s' % (*sys.version_info[:2], sklearn.__version__)")
    assert (findings[0].rule, findings[0].ename) == ("sklearn-input", run.ename), (versions, findings[0])
    assert findings[0].message == _without_values(run.evalue), versions


SERIES_2, SERIES_3 = "pandas.core.series.Series", "pandas.Series"


def _x(kind: str, type_name: str) -> Facts:
    return Facts(name="x", type=type_name, kind=kind, shape=[12], length=12, dtype="float64")


def test_the_releases_between_those_installed_here():
    """1.3 and 1.4, which no environment here has: the Series wording is 1.4's (scikit-learn PR 28090)."""
    for version, container in [("1.2.2", False), ("1.3.2", False), ("1.4.0", True), ("1.5.2", True), ("1.9.1", True),
                               ("2.0.0", True), (None, True)]:
        for type_name in (SERIES_2, SERIES_3):
            text = one_d_message(_x("series", type_name), version)
            assert text.startswith("Expected a 2-dimensional container" if container else "Expected 2D array"), version
            assert (f"<class '{type_name}'>" in text) == container
        # arrays and polars Series (no pandas Series to sklearn) keep the array's words on every release
        assert one_d_message(_x("ndarray", "numpy.ndarray"), version).startswith("Expected 2D array")
        assert one_d_message(_x("other", "polars.series.series.Series"), version).startswith("Expected 2D array")


def test_a_column_is_named_as_the_kernels_pandas_names_a_series():
    for frame, series in [("pandas.core.frame.DataFrame", SERIES_2), ("pandas.DataFrame", SERIES_3)]:
        f = Facts(name="df", type=frame, kind="dataframe", shape=[2, 1], length=2,
                  columns=[ColumnFacts(name="a", dtype="float64", n_nan=0)])
        col = derive.column(f, "a", "df['a']")
        assert col is not None and col.type == series, frame
        assert derive.bool_series(f, "df.a > 1").type == series
