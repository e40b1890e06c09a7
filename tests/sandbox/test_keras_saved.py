"""Issue 45, "pay for nothing twice": a Keras model's saved bytes are reused by the next export only while its
content key is equal (kernel/keras_saved.py), never trusted blindly.

A kernel of today's environment (TensorFlow/Keras 3) on the transplant path, a small compiled model `net` and an
`IntegerLookup` layer `lk` (a class that saves assets: never keyed). Verdicts in sequence on one kernel (each a
copied run; the kernel unchanged, `Untouched`):
- the second verdict on the unchanged model reuses its saved bytes (the kernel's counts: saved once, reused once),
  while the lookup layer is saved anew at each (unkeyed, the reason named);
- a weight the notebook assigned since, and then a `trainable` flag it turned off (the configuration), are each
  seen by the next verdict: the model is saved again and the copy's cell crashes as the kernel's would (with the
  first verdict's bytes reused, the copy would hold the old weight or flag: each case fails without the key);
- a fit (weights, the optimizer's step count) is saved again and seen; the verdict after it reuses the new bytes.
"""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.transplant import transplant

from ..kernel_envs import require_today_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import os, sys
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
import numpy as np, tensorflow as tf, keras
X = np.random.rand(32, 4).astype('float32')
net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='relu'), keras.layers.Dense(1)])
net.compile(optimizer='adam', loss='mse')
lk = keras.layers.IntegerLookup(vocabulary=[1, 2, 3])
"""
SAVES = "dict(sys.modules['_crane_transplant'].KERAS_SAVES)"
# crashes only where the copy holds the kernel's changes (the weight assigned, the flag turned off, the fit's steps)
CELL = ("y = net(X[:2])\nn = int(lk(np.array([2]))[0])\n"
        "assert float(net.layers[0].kernel.numpy()[0, 0]) != 5.0, 'weight'\n"
        "assert net.layers[0].trainable, 'trainable'\n"
        "assert int(net.optimizer.iterations.numpy()) == 0, 'fit'")


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp("keras-saved"), python=require_today_python())
    run = kernel.connection.run_cell(SETUP, timeout=600)
    assert run.status == "ok", run
    yield kernel.connection
    kernel.shutdown()


def _verdict(conn, cell: str = CELL):
    with Untouched(conn) as watch:
        v = transplant(conn, cell, 60.0)
    assert watch.unchanged, (watch.changes(), watch.outputs)
    return v


def _counts(conn) -> tuple[int, int]:
    c = conn.evaluate(SAVES)
    return c["saved"], c["reused"]


def _kernel_says(conn, what: str) -> None:
    """The kernel itself fails the cell's assertion named `what` now (what the copy must say too)."""
    run = conn.run_cell(f"try:\n    exec({CELL!r})\nexcept AssertionError as e:\n    _why = str(e)\n", timeout=120)
    assert run.status == "ok", run
    assert conn.evaluate("_why") == what


def test_unchanged_bytes_reused_and_every_change_saved_again(conn):
    v1 = _verdict(conn)
    assert v1.verdict == "no-crash", v1
    saved, reused = _counts(conn)
    assert saved == 2 and reused == 0  # net (kept) and lk (unkeyed: it saves assets)
    c = conn.evaluate(SAVES)
    assert c["unkeyed"] == 1 and "assets" in c["why"], c
    v2 = _verdict(conn)
    assert v2.verdict == "no-crash", v2
    assert _counts(conn) == (saved + 1, 1)  # net's bytes reused; lk saved again
    steps = [("net.layers[0].kernel.assign(np.full((4, 3), 5.0, dtype='float32'))", "weight",
              "net.layers[0].kernel.assign(np.zeros((4, 3), dtype='float32'))"),
             ("net.layers[0].trainable = False", "trainable", "net.layers[0].trainable = True"),
             ("net.fit(X, X[:, :1], epochs=1, verbose=0)", "fit", None)]
    for change, what, undo in steps:
        assert conn.run_cell(change, timeout=300).status == "ok"
        _kernel_says(conn, what)
        before = _counts(conn)
        v = _verdict(conn)
        assert v.verdict == "crash" and v.ename == "AssertionError" and what in (v.evalue or ""), (what, v)
        assert _counts(conn) == (before[0] + 2, before[1]), what  # net saved again (and lk)
        if undo:
            assert conn.run_cell(undo, timeout=120).status == "ok"
    v = _verdict(conn)  # nothing changed since the fit: its bytes are reused, and still say so
    assert v.verdict == "crash" and "fit" in (v.evalue or ""), v
    assert _counts(conn)[1] == 2
