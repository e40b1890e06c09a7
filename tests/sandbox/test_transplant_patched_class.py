"""Methods the notebook added to a library class travel with the copy (issue 42 part 2, benchmarks/dl-fresh).

dl-fresh's `xgboost_random_split_patched_frame` adds `pd.DataFrame.random_split` in one cell and calls it in the
target. The copy carried the DataFrame but not the method: on the copy paths both twins raised AttributeError
("likely"), a missed crash and a false warning. Now the export carries every function of the notebook's found in
the dicts of the library classes of copied values (the class by reference, the function by value, never called in
the kernel: it writes a marker there) and the worker sets it again on its class: a call runs as in the kernel,
clean or a certain crash with the kernel's exception, on the OS and the portable sandbox; the kernel is unchanged.
"""

from __future__ import annotations

import os
import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox.options import SandboxOptions

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .marked_runs import speculate_unmarked

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

# the kernel cannot be forked (the fork sandbox recognises CuPy by its module), so every run is a copy
SETUP = """
import os, sys, types
sys.modules['cupy'] = types.ModuleType('cupy')
import pandas as pd
MARKER, KERNEL_PID = {marker!r}, os.getpid()

def _mark(what):
    if os.getpid() == KERNEL_PID:
        with open(MARKER, 'a') as f:
            f.write(what + '\\n')

def double(self):
    _mark('double')
    return self * 2

def first_missing(self):
    _mark('first_missing')
    return self['no_such_column']

pd.DataFrame.double = double
pd.DataFrame.first_missing = first_missing
pd.Series.scaled = staticmethod(lambda s, k: s * k)
df = pd.DataFrame({{'a': [1, 2, 3]}})
"""
CLEAN = "print(df.double()['a'].tolist(), pd.Series.scaled(df['a'], 3).tolist())"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    marker = str(tmp_path_factory.mktemp("patched-marker") / "called.txt")
    k = start_kernel(tmp_path_factory.mktemp("patched"), python=kernel_python(request.param))
    run = k.connection.run_cell(SETUP.format(marker=marker), timeout=120)
    assert run.status == "ok", run
    yield k.connection, marker
    k.shutdown()


@pytest.mark.parametrize("confinement", ["os", "portable"])
def test_a_method_the_notebook_added_runs_in_the_copy(kernel, confinement):
    options = {} if confinement == "os" else {"sandbox": SandboxOptions(confinement="portable")}
    v = speculate_unmarked(kernel, CLEAN, **options)
    assert v.mode in ("transplant", "portable") and v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
    assert v.stdout.strip() == "[2, 4, 6] [3, 6, 9]", v.stdout
    v = speculate_unmarked(kernel, "df.first_missing()", **options)
    real = kernel[0].run_cell("df.first_missing()", timeout=60)
    os.unlink(kernel[1])  # (the real run above is the notebook's own: it marked)
    assert real.status == "error" and v.verdict == "crash" and v.ename == real.ename == "KeyError", (v, real)
    assert v.certain is True, v.how()
