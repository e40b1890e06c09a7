"""scikit-learn's configuration is carried into the copy (red team round 17h, F5; sandbox/shared/carry.py
`_read_sklearn`): `set_config(transform_output='pandas')` or `set_config(enable_metadata_routing=True)` in an
earlier cell left a fresh worker with the defaults, so `StandardScaler().fit_transform(df).columns` was a certain
AttributeError and `set_fit_request` a certain RuntimeError on every copy path. The kernel's configuration (the
main thread's, where `set_config` wrote it) is read without calling scikit-learn and applied in the worker. IPython 8
and 9, transplant and portable, one-shot and session; the fork path (the kernel's own image) says the same."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
SETUP = ("import pandas as pd\nfrom sklearn import set_config\nfrom sklearn.preprocessing import StandardScaler\n"
         "from sklearn.linear_model import LogisticRegression\ndf = pd.DataFrame({'a': [1.0, 2.0, 3.0]})\n"
         "import sklearn, inspect\nROUTING = 'enable_metadata_routing' in inspect.signature(set_config).parameters\n"
         "set_config(transform_output='pandas', **({'enable_metadata_routing': True} if ROUTING else {}))")
RESET = "set_config(transform_output='default', **({'enable_metadata_routing': False} if ROUTING else {}))"


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "assert list(StandardScaler().fit_transform(df).columns) == ['a']",
    "if ROUTING:\n    LogisticRegression().set_fit_request(sample_weight=True)",  # (scikit-learn >= 1.3)
])
def test_the_kernels_configuration_is_the_copys(pk, path, cell):
    conn = pk["conn"]
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    try:
        v = path_verdict(pk, path, cell, _served)
    finally:
        assert conn.run_cell(RESET, timeout=60).status == "ok"
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
def test_the_default_configuration_stays_the_default(pk, path):
    conn = pk["conn"]
    assert conn.run_cell(SETUP + "\n" + RESET, timeout=120).status == "ok"
    v = path_verdict(pk, path, "StandardScaler().fit_transform(df).columns", _served)
    assert (v.verdict, v.ename) == ("crash", "AttributeError"), v
