"""Issue 42: carried state (sandbox/shared/carry.py) read, applied and compared; and when a copied crash is certain
(transplant.crash_certain). The read/apply round trips run in a fresh interpreter of the daemon's environment (a
process of its own: the state it changes is process-wide); the kernel-side reads are covered on real kernels by
tests/sandbox/test_export_by_construction.py."""

from __future__ import annotations

import json
import subprocess
import sys

from crane.sandbox.transplant import crash_certain
from crane.sandbox.verdict import SandboxVerdict

ROUND_TRIP = r"""
import decimal, json, random, sys, warnings
import numpy as np, pandas as pd
from crane.sandbox.shared import carry
lib = carry.WorkerLib()
# the "kernel": state a fresh interpreter would not have
sys.set_int_max_str_digits(0)
decimal.getcontext().prec = 5
decimal.getcontext().traps[decimal.Inexact] = True
warnings.filterwarnings('error', category=RuntimeWarning, message='.*divide.*')
random.seed(3); random.random()
np.random.seed(3); np.random.rand()
np.seterr(all='raise')
pd.set_option('display.max_rows', 7)
kernel = carry.read_carried(lib, 3000)
expected = (random.random(), float(np.random.rand()))
# the "worker": everything back to a fresh interpreter's defaults, then the kernel's state applied and compared
sys.set_int_max_str_digits(4300)
decimal.setcontext(decimal.Context())
warnings.resetwarnings()
random.seed(); np.random.seed(None)
np.seterr(all='warn'); pd.reset_option('display.max_rows')
missed = carry.apply_carried(json.loads(json.dumps(kernel)))
print(json.dumps({"unread": kernel["unread"], "missed": missed, "keys": sorted(kernel),
                  "same": [random.random(), float(np.random.rand())] == list(expected),
                  "digits": sys.get_int_max_str_digits(), "prec": decimal.getcontext().prec,
                  "inexact": decimal.getcontext().traps[decimal.Inexact],
                  "filter": [f[0] for f in warnings.filters if f[2] is RuntimeWarning],
                  "seterr": np.geterr()["divide"], "rows": pd.get_option("display.max_rows")}))
"""


def test_carried_state_round_trips_through_json_and_is_proven_equal():
    out = subprocess.run([sys.executable, "-c", ROUND_TRIP], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["unread"] == [] and got["missed"] == [], got
    assert {"interpreter", "decimal", "warnings", "random", "numpy_random", "numpy", "pandas"} <= set(got["keys"])
    assert got["same"], got  # both global generators continue where the kernel's would
    assert (got["digits"], got["prec"], got["inexact"], got["seterr"], got["rows"]) == (0, 5, True, "raise", 7)
    assert got["filter"] == ["error"], got


UNPROVABLE = r"""
import json, warnings
from crane.sandbox.shared import carry
def make():
    class Mine(Warning):  # a category no name reaches: it cannot be found again in another process
        pass
    return Mine
warnings.filterwarnings('error', category=make())
state = carry.read_carried(carry.WorkerLib(), 1000)
print(json.dumps({"unread": state["unread"], "missed": carry.apply_carried(state)}))
"""


def test_state_that_cannot_be_carried_is_named_missed():
    out = subprocess.run([sys.executable, "-c", UNPROVABLE], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "warnings" in got["unread"] and "warnings" in got["missed"], got


def _crash(ename: str, evalue: str, frames: list[str] | None = None, line: int = 1) -> SandboxVerdict:
    return SandboxVerdict(verdict="crash", ename=ename, evalue=evalue, line=line,
                          traceback=[*(frames or []), f"cell:{line}"])


def test_a_crash_resting_on_state_not_proven_equal_is_likely():
    warn = _crash("RuntimeWarning", "divide by zero encountered in log")
    assert crash_certain(warn, "np.log(x)", [])
    assert not crash_certain(warn, "np.log(x)", [], missed=["warnings"])
    dec = _crash("Inexact", "[<class 'decimal.Inexact'>]")
    assert crash_certain(dec, "d / 3", []) and not crash_certain(dec, "d / 3", [], missed=["decimal"])
    digits = _crash("ValueError", "Exceeds the limit (4300 digits) for integer string conversion")
    assert not crash_certain(digits, "str(n)", [], missed=["interpreter"])
    in_numpy = _crash("ValueError", "operands could not be broadcast",
                      frames=["/site-packages/numpy/core/fromnumeric.py:59 in _wrapfunc"])
    assert crash_certain(in_numpy, "np.sum(a)", []) and not crash_certain(in_numpy, "np.sum(a)", [], missed=["numpy"])
    assert crash_certain(warn, "np.log(x)", [], missed=["decimal", "pandas"])  # unrelated state: still certain
    rng = _crash("AssertionError", "")
    assert not crash_certain(rng, "assert np.random.rand() > 0.5", [], missed=["numpy_random"])
    in_sklearn = _crash("AttributeError", "'numpy.ndarray' object has no attribute 'columns'",
                        frames=["/site-packages/sklearn/utils/_set_output.py:310 in wrapped"])
    assert crash_certain(in_sklearn, "s.fit_transform(df)", [])
    assert not crash_certain(in_sklearn, "s.fit_transform(df)", [], missed=["sklearn"])
    pdf = _crash("AssertionError", "", line=3)
    assert crash_certain(pdf, "plt.plot([1])\nplt.savefig(buf)\nassert buf.getvalue()[:4] == b'%PDF'", [])
    assert not crash_certain(pdf, "plt.plot([1])\nplt.savefig(buf)\nassert buf.getvalue()[:4] == b'%PDF'", [],
                             missed=["matplotlib"])
    assert crash_certain(pdf, "a = 1\nb = 2\nassert a == b", [], missed=["matplotlib"])  # (no figure in the cell)


def test_an_attribute_missing_on_a_patched_library_class_or_a_kernel_pid_is_likely():
    attr = _crash("AttributeError", "'DataFrame' object has no attribute 'double'")
    assert crash_certain(attr, "df.double()", [("df", "pandas.core.frame.DataFrame")])
    assert not crash_certain(attr, "df.double()", [("df", "pandas.core.frame.DataFrame")], patched=["DataFrame"])
    for ename in ("ProcessLookupError", "NoSuchProcess"):
        assert not crash_certain(_crash(ename, "[Errno 3] No such process"), "os.kill(PID, 0)", [])


def test_a_crash_in_a_carried_runtime_is_certain_only_while_carried():
    vmap = _crash("ValueError", "vmap got inconsistent sizes for array axes to be mapped",
                  frames=["/site-packages/jax/_src/api.py:1234 in vmap_f"])
    assert not crash_certain(vmap, "jax.vmap(f)(a, b)", [])
    assert crash_certain(vmap, "jax.vmap(f)(a, b)", [], carried=["jax", "jaxlib"])
