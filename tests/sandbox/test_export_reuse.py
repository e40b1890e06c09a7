"""Issue 45, "pay for nothing twice": what the export proved at one verdict is reused at the next only while it is
proven unchanged, never trusted blindly (kernel/witness.py).

Kernels of both environments (tests/kernel_envs.py), called on the transplant path (IPython 8 with a stand-in `jax`
module, as if the kernel refused to fork; IPython 9 with TensorFlow/Keras, loaded by the Keras case alone, the
module's last: a worker imports every library its kernel loaded, TensorFlow costs seconds in each of them, and no
other case reads anything of it). The export keeps the answers of its costliest proof (a library class's
own pickling code followed through modules, classes and closures) with a witness of everything it read:
- a second verdict on the same state reuses them (the kept answers are there, and used);
- a library function or method the notebook replaced after the first verdict (in a class's dict, in a module's
  globals the walk read, or a function's `__code__` swapped) is found at the next verdict: the export refuses,
  nothing of the notebook's runs in the kernel (a marker recorded from CRANE's kernel-side frames stays empty),
  and the kernel is unchanged (`Untouched`);
- objects the notebook mutated between verdicts (a DataFrame, an array, a dict, a fitted model, a Keras model's
  weights) are exported again: the copy's verdict follows the kernel's value.
Every worker imports the kernel's libraries again (most of a verdict's time): the patches follow one another on one
proven state, and the clean first verdicts of the mutated objects are one copied run.
"""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .marked_runs import HIT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = r"""
import os, sys, types
if {stand_in}:
    sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: transplant path
import numpy as np, pandas as pd
from sklearn.linear_model import LinearRegression
""" + HIT + r"""df = pd.DataFrame({{'a': [1.0, 2.0, 3.0]}})
arr = np.arange(4.0)
conf = {{'k': 1, 'rows': [1, 2]}}
lr = LinearRegression().fit(np.array([[0.0], [1.0], [2.0]]), np.array([0.0, 2.0, 4.0]))
"""
KERAS = r"""
if 'net' not in globals():
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    import tensorflow as tf, keras
    net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False, kernel_initializer='ones')])
"""

# What the walk kept (kernel/witness.py): the number of answers, and a function of a library module it read whose
# module binds it by its name (found in the kernel's private module: test code, not the notebook's)
KEPT = "len(sys.modules['_crane_transplant']._REACHED)"
WALKED = "sys.modules['_crane_transplant'].REACH_COUNTS['walked']"
FIND_GLOBAL = r"""
_w = [w for _l, _a, w in sys.modules['_crane_transplant']._REACHED.values()]
_found = [(f.__globals__['__name__'], f.__name__) for w in _w for f, *_ in w.fns.values()
          if f.__globals__.get(f.__name__) is f and f.__globals__.get('__name__', '').startswith('pandas')
          and not f.__closure__]
_target = sorted(set(_found))[0]
_real_fn = getattr(sys.modules[_target[0]], _target[1])
_holders = [m for m in list(sys.modules.values()) if type(m) is types.ModuleType
            and m.__dict__.get(_target[1]) is _real_fn]  # every module that binds it (imported under its name)
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def env(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"t45-{request.param}")
    kernel = start_kernel(work, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP.format(stand_in=request.param == "ipython8"), timeout=300)
    assert run.status == "ok", run
    yield {"name": request.param, "conn": conn}
    kernel.shutdown()


def _verdict(conn, cell: str):
    conn.evaluate("HITS.clear()")
    with Untouched(conn) as watch:
        v = transplant(conn, cell, 60.0)
    assert watch.unchanged, (watch.changes(), watch.outputs)
    assert conn.evaluate("list(HITS)") == [], v
    return v


def test_a_second_verdict_reuses_what_the_first_proved(env):
    conn = env["conn"]
    conn.evaluate("sys.modules['_crane_transplant'].forget() if '_crane_transplant' in sys.modules else 0")
    v1 = _verdict(conn, "assert df.a.sum() == 6.0")
    assert v1.verdict == "no-crash", v1
    kept, walked = conn.evaluate(KEPT), conn.evaluate(WALKED)
    assert kept > 0  # DataFrame's own pickling (NDFrame.__getstate__) was followed and its answer kept
    v2 = _verdict(conn, "assert df.a.sum() == 6.0")
    assert v2.verdict == "no-crash", v2
    assert (conn.evaluate(KEPT), conn.evaluate(WALKED)) == (kept, walked)  # reused: no walk done again


PATCHES = [  # (id, the notebook's patch after the first verdict, its undo)
    ("class-dict-property",
     "_real_attrs = pd.core.generic.NDFrame.__dict__['attrs']\n"
     "def _attrs(self):\n    hit('attrs')\n    return _real_attrs.fget(self)\n"
     "pd.core.generic.NDFrame.attrs = property(_attrs, _real_attrs.fset)",
     "pd.core.generic.NDFrame.attrs = _real_attrs"),
    ("module-global-function", FIND_GLOBAL
     + "def _wrapped(*a, **k):\n    hit('global')\n    return _real_fn(*a, **k)\n"
     "for _m in _holders:\n    setattr(_m, _target[1], _wrapped)",
     "for _m in _holders:\n    setattr(_m, _target[1], _real_fn)"),
    ("function-code-swapped", FIND_GLOBAL
     + "_real_code = _real_fn.__code__\ndef _other(*a, **k):\n    return None\n_real_fn.__code__ = _other.__code__",
     "_real_fn.__code__ = _real_code"),
]


def test_what_the_notebook_patched_since_is_proven_again(env):
    """The kept answer is not reused once something it read changed: the export finds the notebook's function
    (and refuses) without running it; undone, the state is copied again (and its answers kept again: the next
    patch's starting point)."""
    conn = env["conn"]
    assert _verdict(conn, "assert df.a.sum() == 6.0").verdict == "no-crash"
    for case, patch, undo in PATCHES:
        assert conn.evaluate(KEPT) > 0, case
        assert conn.run_cell(patch, timeout=60).status == "ok", patch
        try:
            v = _verdict(conn, "assert df.a.sum() == 6.0")
        finally:
            assert conn.run_cell(undo, timeout=60).status == "ok", undo
        assert v.verdict == "unavailable" and "notebook" in (v.reason or ""), (case, v)
        again = _verdict(conn, "assert df.a.sum() == 6.0")
        assert again.verdict == "no-crash", (case, again)


MUTATIONS = [  # (id, the cell checked, the notebook's change between the two verdicts)
    ("dataframe", "assert df.a.sum() == 6.0", "df.loc[0, 'a'] = 100.0"),
    ("dataframe-column-added", "assert list(df.columns) == ['a']", "df['b'] = 1"),
    ("array-in-place", "assert arr[0] == 0.0", "arr[0] = 5.0"),
    ("dict-item", "assert conf['k'] == 1", "conf['k'] = 2"),
    ("dict-nested-list", "assert conf['rows'] == [1, 2]", "conf['rows'].append(3)"),
    ("fitted-model", "assert abs(lr.predict(np.array([[3.0]]))[0] - 6.0) < 1e-6", "lr.coef_[0] = 5.0"),
]
KERAS_MUTATION = ("keras-weights", "assert float(net(np.ones((1, 2)))[0, 0]) == 2.0",
                  "net.layers[0].kernel.assign(np.full((2, 1), 3.0, dtype='float32'))")


def _exported_again(conn, cases) -> None:
    """Every cell first runs clean, for real and in one copied run (each cell followed by its marker: a false crash
    names its cell; each object exported and its proof kept); the notebook then changes each object; each cell now
    crashes for real, and its own copied run, which reads only that object, crashes as the kernel did."""
    for case, cell, _ in cases:
        assert conn.run_cell(cell, timeout=60).status == "ok", case
    first = _verdict(conn, "".join(f"{cell}\nprint('case {case} ran')\n" for case, cell, _ in cases))
    assert first.verdict == "no-crash", first
    assert [line for line in first.stdout.splitlines() if line.startswith("case ")] == [
        f"case {case} ran" for case, _, _ in cases], first.stdout
    for _, _, change in cases:
        assert conn.run_cell(change, timeout=60).status == "ok", change
    for case, cell, _ in cases:
        assert conn.run_cell(cell, timeout=60).status == "error", case  # the kernel's own verdict now
        second = _verdict(conn, cell)
        assert second.verdict == "crash" and second.ename == "AssertionError", (case, second)


def test_an_object_the_notebook_changed_is_exported_again(env):
    _exported_again(env["conn"], MUTATIONS)


def test_a_keras_models_changed_weights_are_exported_again(env):
    if env["name"] != "ipython9":
        pytest.skip("Keras is in today's environment only")
    conn = env["conn"]
    assert conn.run_cell(KERAS, timeout=300).status == "ok"
    _exported_again(conn, [KERAS_MUTATION])
