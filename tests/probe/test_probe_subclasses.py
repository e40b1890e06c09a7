"""The probe calls no method or property a user-defined ndarray subclass overrides (`shape`, `__len__`,
`reshape`, `min`, `dtype`, ...): it reads the array's memory through a plain ndarray view. On kernels of both
environments (IPython 8 / numpy 1.26 and IPython 9 / numpy 2)."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .no_time_cap import NO_TIME_CAP

SETUP = """
import numpy as np
calls = []
class Spy(np.ndarray):
    def __array_finalize__(self, obj):
        calls.append('finalize')
    @property
    def shape(self):
        calls.append('shape'); return (999,)
    @property
    def ndim(self):
        calls.append('ndim'); return 9
    @property
    def size(self):
        calls.append('size'); return 9
    def __len__(self):
        calls.append('len'); return 999
    def reshape(self, *a, **k):
        calls.append('reshape'); return np.ndarray.reshape(self, *a, **k)
    def min(self, *a, **k):
        calls.append('min'); return 0
    def max(self, *a, **k):
        calls.append('max'); return 0
    def view(self, *a, **k):
        calls.append('view'); return np.ndarray.view(self, *a, **k)
    def __getitem__(self, k):
        calls.append('getitem'); return np.ndarray.__getitem__(self, k)
    def __repr__(self):
        calls.append('repr'); return 'Spy'
spy = np.arange(12, dtype=float).reshape(3, 4).view(Spy)
spy1 = np.array([1.0, np.nan, 3.0]).view(Spy)
mm = np.memmap('mm.dat', dtype='int16', mode='w+', shape=(5,))
lst = [spy]
calls.clear()
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("subclass"), python=kernel_python(request.param))
    run = k.connection.run_cell(SETUP)
    assert run.status == "ok", run
    yield k
    k.shutdown()


def test_no_overridden_member_of_an_ndarray_subclass_runs(kernel):
    probe = ProbeClient(kernel.connection)
    res = probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["spy", "spy1", "mm", "lst"], keys=[["spy", 1, "index"]],
                                 attrs=["spy.T"]))
    assert kernel.connection.evaluate("list(calls)") == []
    spy, spy1 = res.facts["spy"], res.facts["spy1"]
    assert spy.kind == "ndarray" and spy.shape == [3, 4] and spy.dtype == "float64"
    assert spy1.shape == [3] and spy1.has_nan is True
    assert res.facts["mm"].shape == [5] and res.facts["mm"].dtype == "int16"  # numpy's own subclass, as before
