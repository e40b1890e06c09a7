"""tf.data pipelines in the copy (shared/tf_data.py, issue 42): a kernel of today's environment (TF 2.21 / Keras 3)
holding pipelines the notebook built — tensor slices of a tuple and of a dict, shuffled with an op seed, mapped and
filtered by the notebook's functions, batched, cached, repeated, prefetched — and a Keras model. The copy rebuilds
each pipeline in the worker from what its stages recorded (the same tf.data calls, the notebook's functions carried,
never called in the kernel: they write a marker file when called there), so a cell iterating it prints what the
same cell prints in the kernel, a `fit` on it is clean, and a pipeline whose batches do not fit the model is a
crash with the kernel's exception. A pipeline the copy cannot repeat exactly is `unavailable`, naming the stage and
why: a generator source, a shuffle seeded from TensorFlow's global seed. The kernel is unchanged (`Untouched`)."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox.options import SandboxOptions

from ..kernel_envs import require_today_python
from .marked_runs import speculate_unmarked as _check

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import os, numpy as np, tensorflow as tf, keras
MARKER, KERNEL_PID = {marker!r}, os.getpid()

def _mark(what):  # (in the kernel's process only: a copy traces `scale` when it rebuilds the pipeline)
    if os.getpid() == KERNEL_PID:
        with open(MARKER, "a") as f:
            f.write(what + "\\n")

def scale(x, y):
    _mark("scale traced")
    return x * 2.0, y

def keep(x, y):
    return tf.reduce_sum(x) > 1.0

rng = np.random.default_rng(0)
X = rng.random((40, 4)).astype("float32")
y = rng.integers(0, 2, (40, 1)).astype("float32")
X_wide = rng.random((40, 6)).astype("float32")
train = (tf.data.Dataset.from_tensor_slices((X, y)).shuffle(40, seed=7).map(scale)
         .filter(keep).batch(8).cache().prefetch(tf.data.AUTOTUNE))
same = train
feats = tf.data.Dataset.from_tensor_slices({{"b": X[:, :2], "a": np.arange(40)}}).batch(16, drop_remainder=True)
par = tf.data.Dataset.from_tensors(X).repeat(3).unbatch().skip(5).take(12).map(
    lambda r: r + 1.0, num_parallel_calls=tf.data.AUTOTUNE).batch(4, num_parallel_calls=2, deterministic=True)
wide = tf.data.Dataset.from_tensor_slices((X_wide, y)).batch(8)
gen = tf.data.Dataset.from_generator(lambda: iter(range(3)), output_signature=tf.TensorSpec((), tf.int32))
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy")
"""

SEEDED = """
tf.random.set_seed(3)
seeded = tf.data.Dataset.from_tensor_slices(X).shuffle(10)
"""

# what a cell sees of the pipelines: every element's sums, the dict's keys and shapes, the batches' shapes
EXPR = ("([round(float(np.asarray(a).sum()), 4) for a, b in train], same is train, "
        "[sorted(e) + [tuple(e['b'].shape)] for e in feats], [round(float(np.asarray(e).sum()), 4) for e in par], "
        "str(train.element_spec))")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    marker = str(tmp_path_factory.mktemp("tf-data-marker") / "called.txt")
    k = start_kernel(tmp_path_factory.mktemp("tf-data"), python=require_today_python())
    run = k.connection.run_cell(SETUP.format(marker=marker), timeout=300)
    assert run.status == "ok", run
    if os.path.exists(marker):
        os.unlink(marker)  # (tf.data traced `scale` once in the set-up: that is the notebook's own run)
    yield k.connection, marker
    k.shutdown()


def test_pipelines_are_rebuilt_and_give_the_kernels_elements(kernel):
    v = _check(kernel, f"print(repr({EXPR}))")
    assert v.mode == "transplant" and v.verdict == "no-crash", (v.reason, v.how())
    real = kernel[0].run_cell(f"print(repr({EXPR}))", timeout=120)
    assert real.status == "ok", real
    assert v.stdout.strip() == real.stdout.strip(), (v.stdout, real.stdout)


def test_a_fit_on_a_pipeline_runs_and_a_mismatched_one_is_a_certain_crash(kernel):
    v = _check(kernel, "model.fit(train, epochs=1, verbose=0)")
    assert v.verdict == "no-crash", (v.reason, v.how())
    v = _check(kernel, "model.fit(wide, epochs=1, verbose=0)")
    real = kernel[0].run_cell("model.fit(wide, epochs=1, verbose=0)", timeout=120)
    assert real.status == "error" and v.verdict == "crash" and v.ename == real.ename, (v, real)
    # (not asserted certain: the model is a Keras library model rebuilt by Keras's own saving, which keeps a crash
    # in Keras "likely" — kernel/environment's `_carried` — pipeline or not)


def test_the_portable_sandbox_rebuilds_them_too(kernel):
    v = _check(kernel, "print(sum(int(np.asarray(a).shape[0]) for a, b in train))",
               sandbox=SandboxOptions(confinement="portable"))
    assert v.mode == "portable" and v.verdict == "no-crash", (v.reason, v.how())
    real = kernel[0].run_cell("print(sum(int(np.asarray(a).shape[0]) for a, b in train))", timeout=120)
    assert v.stdout.strip() == real.stdout.strip(), (v.stdout, real.stdout)


def test_a_pipeline_the_copy_cannot_repeat_is_unavailable_and_named(kernel):
    v = _check(kernel, "for e in gen:\n    print(e)")
    assert v.verdict == "unavailable" and "`gen`" in (v.reason or "") and "tf.data pipeline" in v.reason, v
    assert "GeneratorDataset" in v.reason or "FlatMapDataset" in v.reason, v.reason
    run = kernel[0].run_cell(SEEDED, timeout=120)
    assert run.status == "ok", run
    v = _check(kernel, "print(list(seeded.as_numpy_iterator())[0])")
    assert v.verdict == "unavailable" and "`seeded`" in (v.reason or "") and "global seed" in v.reason, v
