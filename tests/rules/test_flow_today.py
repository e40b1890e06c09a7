"""What the flow evaluator knows about values a cell makes, on a real kernel of each environment, each prediction
checked against the cell's real run: NaN let through by scikit-learn's scalers into an estimator that rejects it,
and pandas 3's copy-on-write making an in-place method on a selected column a no-op (pandas 2 changed the frame)."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import predict_source, run_target

SETUP = """
import numpy as np, pandas as pd
from sklearn.preprocessing import StandardScaler, MinMaxScaler
from sklearn.linear_model import LogisticRegression
from sklearn.ensemble import HistGradientBoostingClassifier
df = pd.DataFrame({'city': ['a', 'b', 'c', 'd'], 'x': [1.0, np.nan, 3.0, 4.0], 'y': [0, 1, 0, 1]})
X = df[['x']]
fitted = StandardScaler().fit(X)
"""

NAN = ("ValueError", "sklearn-input", "Input X contains NaN. LogisticRegression does not accept missing values "
       "encoded as NaN natively.")


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("flow"), python=kernel_python(request.param))
    k.env = request.param  # type: ignore[attr-defined]  # the module's kernels carry their environment's name
    yield k
    k.shutdown()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("sc = StandardScaler()\nXs = sc.fit_transform(X)\nm = LogisticRegression()\nm.fit(Xs, df['y'])", NAN),
        ("Xs = fitted.transform(X)\nm = LogisticRegression()\nm.fit(Xs, df['y'])", NAN),
        ("sc = MinMaxScaler()\nsc.fit(X)\nXs = sc.transform(X)\nm = LogisticRegression()\nm.fit(Xs, df['y'])", NAN),
        # clean look-alikes: NaN filled before scaling, an estimator that accepts NaN
        ("Xs = MinMaxScaler().fit_transform(X.fillna(0))\nm = LogisticRegression()\nm.fit(Xs, df['y'])", None),
        ("Xs = StandardScaler().fit_transform(X)\nm = HistGradientBoostingClassifier(max_iter=2)\n"
         "m.fit(Xs, df['y'])", None),
        ("df.fillna(0, inplace=True)\ndf['x'].astype(int)", None),
        ("df['x'] = df['x'].fillna(0)\ndf['x'].astype(int)", None),
    ],
)
def test_scaled_nan(kernel, target, expected):
    findings = predict_source(kernel, SETUP, target)
    run = run_target(kernel, target)
    if expected is None:
        assert run.status == "ok", (run.ename, run.evalue)
        assert findings == [], findings
        return
    ename, rule_id, message = expected
    assert run.status == "error" and run.ename == ename and " ".join(run.evalue.split()).startswith(message), (
        run.ename, run.evalue)
    assert [(f.ename, f.rule, f.message) for f in findings][:1] == [expected], findings


@pytest.mark.parametrize("selection", ["df['x']", "df.x"])
def test_chained_inplace_fillna(kernel, selection):
    """pandas 3: the chained fillna changes nothing and astype(int) meets the NaN; pandas 2: it filled the column."""
    target = f"{selection}.fillna(0, inplace=True)\ndf['x'].astype(int)"
    findings = predict_source(kernel, SETUP, target)
    run = run_target(kernel, target)
    if kernel.env == "ipython9":  # pandas 3
        assert run.status == "error" and run.ename == "IntCastingNaNError", (run.ename, run.evalue)
        assert [(f.rule, f.ename) for f in findings][:1] == [("pandas-astype-numeric", "IntCastingNaNError")]
    else:
        assert run.status == "ok", (run.ename, run.evalue)
        assert findings == [], findings
