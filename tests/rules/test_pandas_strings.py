"""pandas-string-dtype: StringDtype columns (pandas 3's `str`, or "string") where numpy is expected —
`.values.reshape` of a pyarrow-backed column, `np.issubdtype` of the dtype, also over every column in a loop or a
comprehension — on a real kernel of each environment (pandas 2.1: object columns, only the explicit "string[python]"
column fails; pandas 3: `str` columns fail). Every prediction is checked against the cell's real run: a finding
exactly when the cell raises, with its exception and message; clean look-alikes (`to_numpy()`, numeric columns,
`any()` stopping early) included."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import predict_source, run_target

SETUP = """
import numpy as np, pandas as pd
df = pd.DataFrame({'n': [1.0, 2.0], 'city': ['a', 'b'], 'k': [1, 2]})
tagged = pd.DataFrame({'n': [1.0, 2.0], 'city': pd.Series(['a', 'b'], dtype='string')})
nums = df[['n', 'k']]
"""

TARGETS = [
    "df['city'].values.reshape(-1, 1)",
    "df['city'].to_numpy().reshape(-1, 1)",
    "np.issubdtype(df['city'].dtype, np.number)",
    "np.issubdtype(df.dtypes['city'], np.number)",
    "np.issubdtype(df['n'].dtype, np.number)",
    'num_cols = [c for c in df.columns if np.issubdtype(df[c].dtype, np.number)]',
    'num_cols = [c for c in nums.columns if np.issubdtype(nums[c].dtype, np.number)]',
    'has = any(np.issubdtype(df[c].dtype, np.number) for c in df.columns)',
    'for c in df:\n    if np.issubdtype(df[c].dtype, np.number):\n        print(c)',
    "np.issubdtype(tagged['city'].dtype, np.number)",
    "tagged['city'].values.reshape(-1, 1)",
]


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("strings"), python=kernel_python(request.param))
    yield k
    k.shutdown()


@pytest.mark.parametrize("target", TARGETS)
def test_prediction_matches_the_run(kernel, target):
    findings = predict_source(kernel, SETUP, target)
    run = run_target(kernel, target)
    if run.status == "ok":
        assert findings == [], findings
        return
    assert [(f.rule, f.ename, f.message) for f in findings][:1] == [("pandas-string-dtype", run.ename, run.evalue)]


def test_both_outcomes_are_covered(kernel):
    """Each environment has crashing and clean targets here (the test above cannot pass vacuously)."""
    outcomes = set()
    for target in TARGETS[:3]:
        setup_run = kernel.connection.run_cell(SETUP, timeout=120)
        assert setup_run.status == "ok"
        outcomes.add(run_target(kernel, target).status)
    version = kernel.connection.evaluate("__import__('pandas').__version__", timeout=30)
    assert outcomes == ({"ok", "error"} if version.strip("'").startswith("3") else {"ok"})
