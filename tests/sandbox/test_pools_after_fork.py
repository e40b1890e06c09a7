"""Thread pools that do not survive fork (today's environment): after polars (rayon) or LightGBM (OpenMP) did
parallel work in the kernel, a cell that uses them is never left to sit to its budget in a forked copy, nor
reported as a crash: the fork sandbox says at once why it cannot run it (the transplant run can); cells that do
not use them still fork; pools that can be made single-threaded (xgboost's OpenMP, BLAS) fork as before."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate

from ..kernel_envs import require_today_python

SETUP = """
import numpy as np, polars as pl, lightgbm as lgb, xgboost as xgb
df = pl.DataFrame({"a": np.arange(200_000), "b": np.random.default_rng(0).random(200_000)})
df.group_by(pl.col("a") % 10).agg(pl.col("b").sum())
X = np.random.default_rng(1).random((3000, 8)); y = (X[:, 0] > .5).astype(int)
lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(X, y)
xgb.XGBClassifier(n_estimators=5).fit(X, y)
"""


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("pools"), python=require_today_python())
    run = k.connection.run_cell(SETUP)
    assert run.status == "ok", run
    yield k.connection
    k.shutdown()


@pytest.mark.parametrize("src", [
    "z = df.group_by(pl.col('a') % 10).agg(pl.col('b').sum())",
    "m = lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(X, y)",
], ids=["polars", "lightgbm"])
def test_a_cell_using_a_pool_that_has_run_is_not_forked_but_transplanted(conn, src):
    with Untouched(conn) as watch:
        v = speculate(conn, src, 30.0)  # layered: LightGBM's first call in a fresh process runs lscpu
    assert watch.unchanged
    assert v.mode == "transplant" and "has run in the kernel" in (v.mode_reason or ""), v
    assert v.verdict == "no-crash", (v.reason, v.stderr[-800:], v)  # a verdict, not a timeout


@pytest.mark.parametrize("src", ["m = xgb.XGBClassifier(n_estimators=5).fit(X, y)", "z = X @ X.T"],
                         ids=["xgboost", "numpy"])
def test_cells_whose_pools_can_be_tamed_still_fork(conn, src):
    v = speculate(conn, src, 30.0, layer="blocking")
    assert v.verdict == "no-crash", v
