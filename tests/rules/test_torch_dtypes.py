"""torch-shapes with the module's parameter dtype (real kernel, real probe, whole predictor; crashes run for
real and must raise the predicted message, clean twins must run clean): a float64 tensor — made in an earlier
cell, or by `torch.from_numpy` of a float64 array in the cell — into a float32 Linear, and the reverse."""

from __future__ import annotations

import pytest

from ..library_versions import needs_torch
from .test_lib_sklearn import check

pytestmark = needs_torch

TORCH = """
import numpy as np
import torch
from torch import nn
features = np.random.default_rng(0).random((8, 3))
net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
net64 = nn.Sequential(nn.Linear(3, 4)).double()
mixed = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1).double())
x64 = torch.from_numpy(features)
x32 = torch.ones(8, 3)
ids = torch.ones(8, 3, dtype=torch.long)
"""

DOUBLE_FLOAT = "mat1 and mat2 must have the same dtype, but got Double and Float"


@pytest.mark.parametrize("target, message", [
    ("out = net(x64)", DOUBLE_FLOAT),
    ("out = net(torch.from_numpy(features))", DOUBLE_FLOAT),
    ("x = torch.from_numpy(features)\nout = net(x)", DOUBLE_FLOAT),
    ("out = net64(x32)", "mat1 and mat2 must have the same dtype, but got Float and Double"),
    ("out = net64(ids)", "mat1 and mat2 must have the same dtype, but got Long and Double"),
    ("out = net(ids)", "mat1 and mat2 must have the same dtype, but got Long and Float"),
])
def test_dtype_mismatch(kernel, target, message):
    first, run = check(kernel, TORCH, target, "RuntimeError", "torch-shapes")
    assert first.message == run.evalue == message


@pytest.mark.parametrize("target", [
    "out = net(x64.float())",
    "out = net(torch.from_numpy(features).float())",
    "x = torch.from_numpy(features.astype(np.float32))\nout = net(x)",
    "out = net64(x64)",
    "out = net(x32)",
    "net.double()\nout = net(x64)",
])
def test_matching_dtypes_are_fine(kernel, target):
    check(kernel, TORCH, target)


def test_mixed_parameter_dtypes_are_not_judged(kernel):
    from .conftest import predict_source

    assert predict_source(kernel, TORCH, "out = mixed(x32)\nout = mixed(x64)") == []
