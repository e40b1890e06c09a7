"""Random state and `trainable` flags in the copy (shared/carry.py, shared/keras_layers.py; issue 42): a kernel of
today's environment (TF 2.21 / Keras 3) where the notebook seeded Keras (`keras.utils.set_random_seed`) and drew
from Keras's global `SeedGenerator` and TensorFlow's eager random ops, built a layer of its own class holding a
Dropout (its seed generator advanced by a training call), then froze one sublayer and one weight alone. The copy
carries Keras's global seed and generator state, TensorFlow's global seed and the generator of its operation seeds,
the layer's seed generators and every `trainable` flag; the worker's own rebuilding draws nothing from the
notebook's `random`/numpy generators. So the next random numbers, the dropout mask and the trainable weights in the
copy are the kernel's own: each cell's output equals what the same cell prints in the kernel afterwards (the copy
ran first: the kernel is unchanged, `Untouched`), on the OS sandbox and `--sandbox portable`."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions

from ..kernel_envs import require_today_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import random, numpy as np, tensorflow as tf, keras
from keras import layers

keras.utils.set_random_seed(11)
_ = keras.random.normal((2,))   # Keras's global SeedGenerator made and advanced
_ = tf.random.uniform((2,))     # TensorFlow's operation-seed generator advanced

class Block(keras.layers.Layer):
    def __init__(self, units=4, rate=0.5, **kwargs):
        super().__init__(**kwargs)
        self.inner = layers.Dense(units)
        self.drop = layers.Dropout(rate)
        self.out = layers.Dense(1)
    def call(self, x, training=False):
        return self.out(self.drop(self.inner(x), training=training))

X = np.random.rand(8, 3).astype("float32")
blk = Block()
blk(X)
blk(X, training=True)           # the Dropout's seed generator advanced
blk.inner.trainable = False     # a sublayer frozen after it was made
blk.out.bias.trainable = False  # one weight frozen alone
_ = random.random()
"""

# what a cell can see of that state: the next numbers of each generator, the dropout's seed state and mask, the flags
EXPR = ("(round(float(np.asarray(keras.random.normal((3,))).sum()), 6), "
        "round(float(np.asarray(tf.random.uniform((3,))).sum()), 6), "
        "blk.drop.seed_generator.state.numpy().tolist(), "
        "[l.trainable for l in (blk, blk.inner, blk.drop, blk.out)], [w.trainable for w in blk.weights], "
        "len(blk.trainable_weights), round(float(np.asarray(blk(X, training=True)).sum()), 5), "
        "random.random(), float(np.random.rand()))")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("keras-seeds"), python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=300)
    assert run.status == "ok", run
    yield k.connection
    k.shutdown()


def _copy_then_kernel(conn, **options) -> tuple:
    """The cell's output in the copy (the kernel unchanged), then the same cell's output in the kernel."""
    with Untouched(conn) as watch:
        v = speculate(conn, f"print(repr({EXPR}))", 120.0, **options)
    assert watch.unchanged, (watch.changes(), v)
    real = conn.run_cell(f"print(repr({EXPR}))", timeout=120)
    assert real.status == "ok", real
    return v, real.stdout.strip()


def test_random_state_and_trainable_flags_are_the_kernels(kernel):
    v, real = _copy_then_kernel(kernel)
    assert v.mode == "transplant" and v.verdict == "no-crash", (v.reason, v.how())
    assert v.stdout.strip() == real, (v.stdout, real)
    assert "[True, False, True, True]" in real and "[False, False, True, False]" in real, real  # (the setup's flags)


def test_the_portable_sandbox_carries_them_too(kernel):
    v, real = _copy_then_kernel(kernel, sandbox=SandboxOptions(confinement="portable"))
    assert v.mode == "portable" and v.verdict == "no-crash", (v.reason, v.how())
    assert v.stdout.strip() == real, (v.stdout, real)


def test_a_keras_crash_stays_certain_with_the_random_state_carried(kernel):
    with Untouched(kernel) as watch:
        v = speculate(kernel, "blk(np.zeros((2, 5), 'float32'))", 120.0)
    assert watch.unchanged, watch.changes()
    real = kernel.run_cell("blk(np.zeros((2, 5), 'float32'))", timeout=120)
    assert real.status == "error" and v.verdict == "crash" and v.ename == real.ename, (v, real)
    assert v.certain, v.how()
