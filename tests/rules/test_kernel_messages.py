"""Issue 44: the message a rule predicts is the kernel's own (its Python, its pandas, numpy and scikit-learn), on every
kernel environment this machine has: the daemon's (Python 3.11, pandas 2.1, scikit-learn 1.2), today's (3.11, pandas
3.1, scikit-learn 1.9) and a kernel of each supported Python (build/kernel-py3XX: 3.11, 3.12, 3.13). The whole
predictor on real kernel state; each target is then run for real and its exception name and message must be what
was predicted, compared as `crane bench --real-run` compares them (crane.bench.metrics.same_message: whitespace
and an array's printed values normalised; CRANE's explanation may follow the kernel's text after " — ", ": " or
" (")."""

from __future__ import annotations

import pytest

from crane.analysis.scope import NotebookScope
from crane.bench.metrics import same_message
from crane.kernel.manager import start_kernel

from ..kernel_envs import PYTHON_KERNELS, python_kernel, require_today_python
from .conftest import predict_source, run_target

ENVS = ["daemon", "today", *(f"py{v}" for v in PYTHON_KERNELS)]

SETUP = """
import sys
import numpy as np, pandas as pd
df = pd.DataFrame({'price': [1.0, 2.0, 3.0], 'city': ['a', 'b', 'c'], 'rooms': [1, 2, 3]})
s = pd.Series([1, 2], index=['x', 'y'])
d = {'alpha': 1, 'beta': 2}
numbers = pd.DataFrame({0: [1, 2], 1: [3, 4]})
from sklearn.linear_model import LinearRegression
reg = LinearRegression().fit(df[['price', 'rooms']], df['price'])
wide = LinearRegression().fit(pd.DataFrame({f'f{i}': [1.0, 2.0, 3.0] for i in range(8)}), [1.0, 2.0, 3.0])
other = pd.DataFrame({f'g{i}': [1.0, 2.0] for i in range(7)} | {'f0': [0.0, 1.0]})
import collections, csv
X = np.arange(3.0)
rows = csv.reader([])
od = collections.OrderedDict()
name = 'abc'
"""

TARGETS = [
    # missing-key: pandas' own words for drops and lists of keys (the KeyError shows the repr of its text)
    "df.drop(['zz', 'price'], axis=1)",
    "df.drop('zz', axis=1)",
    "df.drop(columns=['zz', 'yy'])",
    "df.drop([10472])",
    "df.drop(index=['q'])",
    "df[['zz', 'yy']]",
    "df[['price', 'zz']]",
    "df['Price']",
    "out = df['zz'] * 2",
    "s['q']",
    "d['gamma']",
    "s.drop('q')",
    "numbers[[5, 6]]",
    # sklearn-input: scikit-learn's feature-name check (sorted, five names at most; the same from 1.0 to 1.9)
    "reg.predict(df[['rooms', 'price']])",
    "reg.predict(df[['price']])",
    "reg.predict(df)",
    "wide.predict(other)",
    # missing-attribute: the type as CPython's message names it (its tp_name): a class by its name, a C type
    # module-qualified ('numpy.ndarray', 'collections.OrderedDict', '_csv.reader': a heap type from 3.12)
    "X.join(',')",
    "reg.feature_importances_",
    "d.has_key('alpha')",
    "rows.foo",
    "od.foo",
    "name.foo",
]


@pytest.fixture(scope="module", params=ENVS)
def kernel(request, tmp_path_factory):
    env = request.param
    python = None if env == "daemon" else require_today_python() if env == "today" else python_kernel(env[2:])
    k = start_kernel(tmp_path_factory.mktemp(f"messages-{env}"), python=python)
    try:
        yield k
    finally:
        k.shutdown()


@pytest.mark.parametrize("target", TARGETS, ids=[f"case{i}" for i in range(len(TARGETS))])
def test_the_predicted_message_is_the_kernels(kernel, target):
    scope = NotebookScope.from_cells([(1, 1, SETUP), (2, None, target)])
    findings = predict_source(kernel, SETUP, target, scope=scope, target_cell=2)
    run = run_target(kernel, target)
    versions = kernel.connection.evaluate(
        "'%d.%d pandas %s numpy %s' % (*sys.version_info[:2], pd.__version__, np.__version__)")
    assert run.status == "error", (target, versions)
    assert findings, f"no finding; the cell raised {run.ename}: {run.evalue} ({versions})"
    f = findings[0]
    assert f.ename == run.ename, (versions, f, run.evalue)
    assert same_message(f.message, run.evalue), (versions, f.message, run.evalue)
