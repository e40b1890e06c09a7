"""Keras functional graphs in the copy (shared/keras_graph.py): a kernel of today's environment (TF 2.21 / Keras 3)
holding a two-input functional model with a shared layer, its symbolic tensors, and a nested encoder/decoder.
Copied in one pickle, identity survives (`model.layers[2] is shared`), a new model built from copied symbolic
tensors runs clean (it raised a false IndexError: the layers came back without their nodes), a fitted model's
history and flags come along, and a shape mismatch is a certain crash with the kernel's own exception. A tf.data
pipeline is rebuilt from its stages (shared/tf_data.py). The user's kernel is unchanged (`Untouched`)."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate

from ..kernel_envs import require_today_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import numpy as np, tensorflow as tf, keras
from keras import layers
np.random.seed(0)
inp_a = keras.Input((8,), name="a")
inp_b = keras.Input((8,), name="b")
shared = layers.Dense(4, activation="relu", name="shared")
xa, xb = shared(inp_a), shared(inp_b)
merged = layers.concatenate([xa, xb])
model = keras.Model([inp_a, inp_b], layers.Dense(1)(merged))
model.compile(optimizer="adam", loss="mse")
A = np.random.rand(16, 8).astype("float32")
B = np.random.rand(16, 8).astype("float32")
y = np.random.rand(16, 1).astype("float32")
enc = keras.Model(inp_a, layers.Dense(3, name="code")(inp_a), name="enc")
dec_in = keras.Input((3,))
dec = keras.Model(dec_in, layers.Dense(8)(dec_in), name="dec")
auto = keras.Model(inp_a, dec(enc(inp_a)), name="auto")
auto.compile(optimizer="adam", loss="mse")
auto.fit(A, A, epochs=1, verbose=0)
auto.n_classes = 3
ds = tf.data.Dataset.from_tensor_slices((A, y)).shuffle(16).batch(4)
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("keras-graph"), python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=300)
    assert run.status == "ok", run
    yield k.connection
    k.shutdown()


def _check(conn, source: str):
    with Untouched(conn) as watch:
        v = speculate(conn, source, 120.0)
    assert watch.unchanged, (watch.changes(), v)
    return v


# the cells that run clean, in one copied run (each run is a worker importing TensorFlow), each followed by its
# marker (a false crash names its cell by the markers printed before it); the fit last (it changes the models the
# first cell reads)
CLEAN = {
    "symbolic tensors and shared layers keep their graph": (
        "m2 = keras.Model(inp_a, layers.Dense(2)(xa))\nm3 = keras.Model([inp_a, inp_b], layers.Dense(3)(merged))\n"
        "print(repr((m2.predict(A, verbose=0).shape, m3.predict([A, B], verbose=0).shape, "
        "model.layers[2] is shared, auto.layers[1] is enc)))", "((16, 2), (16, 3), True, True)"),
    # (shared/tf_data.py; what it refuses, named: tests/sandbox/test_keras_tf_data.py)
    "a tf.data pipeline is rebuilt": ("for xb, yb in ds.take(1):\n    print(xb.shape)", "(4, 8)"),
    "a fitted model trains on with its history and attributes": (
        "model.fit([A, B], y, epochs=1, verbose=0)\nauto.fit(A, A, epochs=1, verbose=0)\n"
        "print(repr((len(auto.history.epoch), auto.n_classes, enc.predict(A, verbose=0).shape)))", "(1, 3, (16, 3))"),
}


def test_the_graph_the_pipeline_and_the_fitted_model_come_as_the_kernels(kernel):
    v = _check(kernel, "".join(f"{cell}\nprint('ran: {name}')\n" for name, (cell, _) in CLEAN.items()))
    assert v.mode == "transplant" and v.verdict == "no-crash", (v.reason, v.stdout, v)
    lines = v.stdout.strip().splitlines()
    assert lines[1::2] == [f"ran: {name}" for name in CLEAN], v.stdout
    assert lines[0::2] == [out for _, out in CLEAN.values()], v.stdout


def test_a_shape_mismatch_is_a_certain_crash_with_the_kernels_exception(kernel):
    bad = "model.predict([A, B[:, :5]], verbose=0)"
    v = _check(kernel, bad)
    real = kernel.run_cell(bad, timeout=120)
    assert real.status == "error" and v.verdict == "crash" and v.ename == real.ename and v.line == 1, (v, real)
    assert v.certain, v.how()
