"""pandas, numpy, plotting, call-signature, statsmodels and torch rules end to end (real kernel, real probe):
each crash is checked against what the target really raises; each clean twin really runs clean."""

from __future__ import annotations

import pytest

from ..library_versions import kernel_library, needs_torch
from .test_lib_sklearn import check

BASE = """
import numpy as np, pandas as pd
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
import seaborn as sns
orders = pd.DataFrame({
    'order_no': ['101', '102', 'order_no', '104'],
    'amount': ['$1,200', '$35', '$7', '$90'],
    'qty': [1.0, np.nan, 3.0, 4.0],
    'shop': ['a', 'b', 'a', 'c'],
})
clean = pd.DataFrame({'order_no': ['101', '102', '103', '104'], 'qty': [1.0, 2.0, 3.0, 4.0]})
"""


# -- pandas ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target, message", [
    ("orders['order_no'].astype(int)", "invalid literal for int() with base 10: 'order_no'"),
    ("orders['amount'].astype('float')", "could not convert string to float: '$1,200'"),
    ("orders['qty'].astype(int)", "Cannot convert non-finite values (NA or inf) to integer"),
])
def test_astype_numeric(kernel, target, message):
    first, run = check(kernel, BASE, target, run_ename(target), "pandas-astype-numeric")
    assert first.message == message == run.evalue


def run_ename(target: str) -> str:
    return "IntCastingNaNError" if "qty" in target else "ValueError"


def test_astype_numeric_clean(kernel):
    check(kernel, BASE, "clean['order_no'].astype(int)\nclean['qty'].astype(int)\norders['qty'].astype(float)")


def test_to_numeric(kernel):
    first, run = check(kernel, BASE, "pd.to_numeric(orders['amount'])", "ValueError", "pandas-to-numeric")
    assert run.evalue.startswith(first.message)
    check(kernel, BASE, "pd.to_numeric(orders['amount'], errors='coerce')\npd.to_numeric(clean['order_no'])")


def test_merge_on_missing_key_and_join_overlap(kernel):
    setup = BASE + "shops = pd.DataFrame({'shop_id': ['a', 'b'], 'city': ['X', 'Y']})"
    first, run = check(kernel, setup, "orders.merge(shops, on='shop')", "KeyError", "pandas-merge-join")
    assert first.message == "'shop'"
    check(kernel, setup, "orders.merge(shops, left_on='shop', right_on='shop_id')")
    first, run = check(kernel, setup, "orders.join(clean)", "ValueError", "pandas-merge-join")
    assert first.message == run.evalue
    check(kernel, setup, "orders.join(clean, rsuffix='_clean')")


# -- numpy -----------------------------------------------------------------------------------------------------
NP = "import numpy as np\na = np.ones(68)\nb = np.ones(272)\nm = np.ones((75, 4))\nw = np.ones((1, 4))\nitems = [1, 2, 3]"
NP_TORCH = NP + "\nimport torch\nt = torch.ones(3)\nu = torch.ones(4)"


@pytest.mark.parametrize("target, ename", [
    ("err = sum((a - b) ** 2)", "ValueError"),
    ("p = np.dot(m, w)", "ValueError"),
    ("p = m @ w", "ValueError"),
    ("r = a.reshape(5, 10)", "ValueError"),
    ("v = m[75, 0]", "IndexError"),
    ("last = items[3]", "IndexError"),
    pytest.param("s = t + u", "RuntimeError", marks=needs_torch),
])
def test_numpy_shapes(kernel, target, ename):
    first, run = check(kernel, NP_TORCH if "t + u" in target else NP, target, ename, "numpy-shapes")
    assert first.message.strip() == run.evalue.strip()


def test_numpy_shapes_clean(kernel):
    check(kernel, NP, "err = sum((a[:10] - a[:10]) ** 2)\np = np.dot(m, w.T)\np = m @ w.T\nr = a.reshape(4, 17)\n"
                      "v = m[74, 3]\nlast = items[-3]")


@needs_torch
def test_numpy_shapes_clean_on_tensors(kernel):
    check(kernel, NP_TORCH, "s = t + t")


# -- plotting --------------------------------------------------------------------------------------------------
def test_scatter_multiple_values_for_s(kernel):
    setup = BASE + "pts = np.ones((5, 3))"
    first, run = check(kernel, setup, "plt.scatter(pts[:, 0], pts[:, 1], pts[:, 2], s=200, c='red')",
                       "TypeError", "call-signature")
    assert first.message == run.evalue == "scatter() got multiple values for argument 's'"
    check(kernel, setup, "plt.scatter(pts[:, 0], pts[:, 1], s=200, c='red')")


def test_plot_lengths(kernel):
    setup = BASE + "xs = np.arange(5)\nys = np.arange(4)"
    first, run = check(kernel, setup, "plt.plot(xs, ys)", "ValueError", "plot-args")
    assert first.message == run.evalue
    first, run = check(kernel, setup, "plt.scatter(xs, ys)", "ValueError", "plot-args")
    assert first.message == run.evalue
    check(kernel, setup, "plt.plot(xs, xs)\nplt.scatter(ys, ys)")


def test_seaborn_missing_column_and_orientation(kernel):
    # seaborn 0.12's categorical functions have their own interface and wording; 0.13 reads every function's
    # variables through one (seaborn._core.data.PlotData) and draws a categorical-only violin plot
    new = kernel_library("seaborn") >= (0, 13)
    first, run = check(kernel, BASE, "sns.boxplot(data=orders, x='shop', y='quantity')", "ValueError", "plot-args")
    assert first.message == run.evalue == (
        "Could not interpret value `quantity` for `y`. An entry with this name does not appear in `data`." if new
        else "Could not interpret input 'quantity'")
    first, run = check(kernel, BASE, "sns.scatterplot(data=orders, x='shop', y='quantity')", "ValueError",
                       "plot-args")
    assert first.message == run.evalue
    if new:
        check(kernel, BASE, "ax = sns.violinplot(orders, x='shop')\nplt.close('all')")
    else:
        first, run = check(kernel, BASE, "sns.violinplot(orders, x='shop')", "TypeError", "plot-args")
        assert first.message == run.evalue
    check(kernel, BASE, "sns.violinplot(data=orders, x='shop', y='qty')\nsns.boxplot(data=orders, x='qty')")


# -- statsmodels -----------------------------------------------------------------------------------------------
def test_qqplot_line_option(kernel):
    setup = BASE + "import statsmodels.api as sm\nvals = pd.Series(np.arange(20.0))"
    first, run = check(kernel, setup, "fig = sm.qqplot(vals, line=45, fit=True)", "ValueError", "statsmodels-options")
    assert first.message == run.evalue
    check(kernel, setup, "fig = sm.qqplot(vals, line='45', fit=True)")


# -- torch -----------------------------------------------------------------------------------------------------
TORCH = """
import torch
from torch import nn
net = nn.Sequential(nn.Linear(20, 5), nn.ReLU(), nn.Linear(5, 3))
conv = nn.Conv2d(3, 8, 3)
batch = torch.ones(64, 10)
good = torch.ones(64, 20)
img = torch.ones(2, 1, 8, 8)
scores = torch.randn(4, 3)
float_labels = torch.tensor([0., 1., 2., 1.])
labels = torch.tensor([0, 1, 2, 1])
ce = nn.CrossEntropyLoss()
bce = nn.BCELoss()
probs = torch.rand(4)
"""


@pytest.mark.parametrize("target", ["out = net(batch)", "out = conv(img)", "loss = ce(scores, float_labels)",
                                    "loss = bce(probs, labels)"])
@needs_torch
def test_torch_shapes(kernel, target):
    first, run = check(kernel, TORCH, target, "RuntimeError", "torch-shapes")
    assert run.evalue.endswith(first.message) or first.message in run.evalue


@needs_torch
def test_torch_shapes_clean(kernel):
    check(kernel, TORCH, "out = net(good)\nloss = ce(scores, labels)\nloss2 = bce(probs, probs)")
