"""loop-index: a loop's index (range, enumerate, a counter) past the end of the array it indexes — the subplot grid
smaller than the columns looped over — on a real kernel of each environment; every prediction is checked against
the cell's real run (crashing cells and clean look-alikes)."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import predict_source, run_target

SETUP = """
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
import numpy as np, pandas as pd
df = pd.DataFrame({c: np.arange(4.0) for c in 'abcde'})
lst = [1, 2, 3]
"""

GRID4 = "fig, axes = plt.subplots(2, 2)\naxes = axes.flatten()\n"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("loops"), python=kernel_python(request.param))
    yield k
    k.shutdown()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (GRID4 + "for i, col in enumerate(df.columns):\n    axes[i].hist(df[col])",
         "index 4 is out of bounds for axis 0 with size 4"),
        ("fig, ax = plt.subplots(ncols=2, nrows=2, figsize=(8, 4))\nindex = 0\nax = ax.flatten()\n"
         "for col, value in df.items():\n    ax[index].plot(value)\n    index += 1",
         "index 4 is out of bounds for axis 0 with size 4"),
        ("fig, axes = plt.subplots(2, 2)\nfor i in range(len(df.columns)):\n    axes[i][0].set_title(str(i))",
         "index 2 is out of bounds for axis 0 with size 2"),
        ("fig, axes = plt.subplots(1, 5, squeeze=False)\nfor i, col in enumerate(df):\n    axes[i][0].hist(df[col])",
         "index 1 is out of bounds for axis 0 with size 1"),
        ("n = 1\nfor x in lst:\n    n += 1\n    print(lst[n])", "list index out of range"),
        ("for i in range(4):\n    print(lst[i])", "list index out of range"),
        (GRID4 + "for i, col in enumerate(['a', 'b', 'c', 'd', 'e'], start=1):\n    axes[i].set_title(col)",
         "index 4 is out of bounds for axis 0 with size 4"),
        # clean look-alikes
        ("fig, axes = plt.subplots(2, 3)\naxes = axes.flatten()\nfor i, col in enumerate(df.columns):\n"
         "    axes[i].hist(df[col])", None),
        ("fig, axes = plt.subplots(1, 5)\nfor i, col in enumerate(df.columns):\n    axes[i].hist(df[col])", None),
        ("fig, axes = plt.subplots(5, 1, squeeze=False)\nfor i, col in enumerate(df):\n    axes[i][0].hist(df[col])",
         None),
        (GRID4 + "index = 0\nfor col, value in df.items():\n    if index >= 4:\n        break\n"
         "    axes[index].plot(value)\n    index += 1", None),
        (GRID4 + "for i, (col, ax) in enumerate(zip(df.columns, axes)):\n    axes[i].hist(df[col])", None),
        (GRID4 + "for i, col in enumerate(df.columns[:4]):\n    axes[i].hist(df[col])", None),
        (GRID4 + "for i, col in enumerate(df.columns):\n    if col != 'e':\n        axes[i].hist(df[col])", None),
        (GRID4 + "for i, col in enumerate(df.columns):\n    axes = np.append(axes, None)\n    axes[i]", None),
        ("for i in range(3):\n    print(lst[i])", None),
    ],
)
def test_loop_index(kernel, target, message):
    findings = predict_source(kernel, SETUP, target)
    run = run_target(kernel, target)
    if message is None:
        assert run.status == "ok", (run.ename, run.evalue)
        assert findings == [], findings
        return
    assert (run.ename, run.evalue) == ("IndexError", message)
    assert [(f.rule, f.ename, f.message) for f in findings][:1] == [("loop-index", "IndexError", message)], findings
