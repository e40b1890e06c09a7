"""Keras layers and models of classes a cell defined, in the copy (shared/keras_layers.py, issue 42): a kernel of
today's environment (TF 2.21 / Keras 3) holding a Sequential with a notebook Dense subclass, a subclassed
`keras.Model`, and a functional model calling a notebook layer, each compiled and fitted. The copy rebuilds them in
the worker from what Keras recorded (constructor arguments, build shapes, weights read by Keras's own `numpy`, the
optimizer's variables): a clean `predict` gives the kernel's own numbers, a shape mismatch in `model(x)` is a certain
crash with the kernel's exception. The notebook class's methods that Keras's own saving would call (`get_config`,
`get_build_config`, `save_own_variables`, `get_weights`) write a marker file: none is ever called in the kernel, and
the kernel is unchanged (`Untouched`). A layer made with an argument Keras could not record, and a library layer
whose own saving would call a notebook layer (`TimeDistributed(MyDense(2))`), are `unavailable`, named. Two
Sequential models sharing a library layer keep it shared in the copy."""

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
from keras import layers
MARKER = {marker!r}

def _mark(what):
    with open(MARKER, "a") as f:
        f.write(what + "\\n")

class MyDense(keras.layers.Layer):
    def __init__(self, units, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.units, self.scale = units, scale
        self.calls = 0
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal")
        self.b = self.add_weight(shape=(self.units,), initializer="zeros")
    def call(self, x):
        return (tf.matmul(x, self.w) + self.b) * self.scale
    def get_config(self):
        _mark("get_config")
        return {{**super().get_config(), "units": self.units, "scale": self.scale}}
    def get_build_config(self):
        _mark("get_build_config")
        return super().get_build_config()
    def save_own_variables(self, store):
        _mark("save_own_variables")
        return super().save_own_variables(store)
    def get_weights(self):
        _mark("get_weights")
        return super().get_weights()
    @property
    def doubled(self):
        _mark("doubled")
        return 2 * self.units

class Tower(keras.Model):
    def __init__(self, hidden=8):
        super().__init__()
        self.d1 = layers.Dense(hidden, activation="relu")
        self.d2 = MyDense(1, scale=0.5)
    def call(self, x):
        return self.d2(self.d1(x))
    def get_config(self):
        _mark("Tower.get_config")
        return {{"hidden": 8}}

class Scaled(keras.layers.Layer):
    def __init__(self, table, **kwargs):
        super().__init__(**kwargs)
        self.table = table
    def call(self, x):
        return x * self.table

keras.utils.set_random_seed(0)
X = np.random.rand(32, 4).astype("float32")
y = np.random.rand(32, 1).astype("float32")
X_bad = np.random.rand(32, 5).astype("float32")
seq = keras.Sequential([keras.Input((4,)), MyDense(8, name="md"), layers.Dense(1)])
seq.compile(optimizer="adam", loss="mse")
seq.fit(X, y, epochs=2, verbose=0)
seq.tag = "mine"
tower = Tower()
tower.compile(optimizer="sgd", loss="mse")
tower.fit(X, y, epochs=1, verbose=0)
inp = keras.Input((4,))
mid = MyDense(3, name="mid")
func = keras.Model(inp, layers.Dense(1)(mid(inp)))
scaled = Scaled(np.arange(4.0, dtype="float32"))
wrapped = keras.Sequential([keras.Input((3, 4)), layers.TimeDistributed(MyDense(2))])
class Block(keras.layers.Layer):
    def __init__(self, units=(6, 2), **kwargs):
        super().__init__(**kwargs)
        self.inner = MyDense(units[0])
        self.norm = layers.LayerNormalization()
        self.out = layers.Dense(units[1])
        self.seen = self.add_weight(shape=(), initializer="zeros", trainable=False)
    def call(self, x):
        self.seen.assign_add(1.0)
        return self.out(self.norm(self.inner(x)))

class TwoInputs(keras.Model):
    def __init__(self):
        super().__init__()
        self.a, self.b = layers.Dense(2), Block(units=[3, 2], dtype="float64")
    def call(self, inputs):
        left, right = inputs
        return self.a(left) + tf.cast(self.b(right), "float32")

blocky = keras.Sequential([keras.Input((4,)), Block(units=[6, 2]), layers.Dense(1)])
blocky(X); blocky(X)
two = TwoInputs()
two([X, X])
shared_dense = layers.Dense(3, name="shared_dense")
left = keras.Sequential([keras.Input((4,)), shared_dense, layers.Dense(1)], name="left")
right = keras.Sequential([keras.Input((4,)), shared_dense], name="right")
left.compile(optimizer="adam", loss="mse")
left.fit(X, y, epochs=1, verbose=0)
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    marker = str(tmp_path_factory.mktemp("keras-nb-marker") / "called.txt")
    k = start_kernel(tmp_path_factory.mktemp("keras-notebook-layers"), python=require_today_python())
    run = k.connection.run_cell(SETUP.format(marker=marker), timeout=300)
    assert run.status == "ok", run
    assert not os.path.exists(marker), open(marker).read()  # (Keras itself called none of them in the set-up)
    yield k.connection, marker
    k.shutdown()


def _kernel_value(kernel, expr: str) -> str:
    conn, _marker = kernel
    run = conn.run_cell(f"print(repr({expr}))", timeout=120)
    assert run.status == "ok", run
    return run.stdout.strip()


def _sums(call: str) -> str:
    models = ", ".join(f"round(float(np.asarray({call.format(m=m)}).sum()), 4)" for m in ("seq", "tower", "func"))
    return f"({models}, int(seq.optimizer.iterations), int(tower.optimizer.iterations), seq.layers[0].calls, " \
           "seq.layers[0].name, seq.tag)"


NESTED = ("(round(float(np.asarray(blocky(X)).sum()), 4), round(float(np.asarray(two([X, X])).sum()), 4), "
          "float(blocky.layers[0].seen.numpy()), float(two.b.seen.numpy()), two.b.compute_dtype)")
SHARED = ("shared_dense.kernel.assign(np.zeros((4, 3), 'float32'))\n"
          "shared_dense.bias.assign(np.ones(3, 'float32'))\n"
          "print(left.layers[0] is shared_dense, right.layers[0] is shared_dense, "
          "float(np.asarray(right(X)).sum()), int(left.optimizer.iterations))")
TRAINS = ("seq.fit(X, y, epochs=1, verbose=0)\n"
          "print(int(seq.optimizer.iterations), type(seq.layers[0]).__name__, func.layers[1] is mid, tower.d2.scale)")


def test_clean_cells_get_the_kernels_numbers_shared_layers_and_training(kernel):
    """The cells that run clean, in one copied run (each run is a worker importing TensorFlow), each followed by its
    marker (a false crash names its cell by the markers printed before it); no two read the same model but the last,
    whose fit changes `seq` after the first read it:
    - a clean predict gives the kernel's numbers (seq, tower, func);
    - nested notebook layers, several inputs and counters come as the kernel's (blocky, two);
    - Sequential models sharing a layer keep it shared (left, right);
    - the rebuilt model trains on and keeps its layers."""
    # (the kernel's numbers by an eager call: a `predict` there would trace its function, and a traced function
    # fails later calls differently, which a copy does not carry: see docs/sandbox.md)
    cells = {"predict": f"print(repr({_sums('{m}.predict(X, verbose=0)')}))", "nested": f"print(repr({NESTED}))",
             "shared": SHARED, "trains": TRAINS}
    v = _check(kernel, "".join(f"{cell}\nprint('ran {name}')\n" for name, cell in cells.items()))
    assert v.mode == "transplant" and v.verdict == "no-crash", (v.reason, v.how(), v.stdout)
    lines = v.stdout.strip().splitlines()
    assert lines[1::2] == [f"ran {name}" for name in cells], v.stdout
    predicted, nested, shared, trained = lines[0::2]
    assert predicted == _kernel_value(kernel, _sums("{m}(X)")), v.stdout
    assert nested == _kernel_value(kernel, NESTED), v.stdout
    assert shared == "True True 96.0 1", v.stdout
    assert trained == "3 MyDense True 0.5", v.stdout


def test_a_shape_mismatch_in_a_notebook_layer_is_a_certain_crash(kernel):
    for bad in ("seq(X_bad)", "tower(X_bad)", "func.predict(X_bad, verbose=0)"):
        v = _check(kernel, bad)
        real = kernel[0].run_cell(bad, timeout=120)
        assert real.status == "error" and v.verdict == "crash", (bad, v, real)
        assert v.ename == real.ename and v.line == 1, (bad, v, real)
        assert v.certain, (bad, v.how())


def test_a_layer_keras_could_not_record_is_unavailable_and_named(kernel):
    v = _check(kernel, "scaled(X)")
    assert v.verdict == "unavailable" and "`scaled`" in (v.reason or "") and "Scaled" in v.reason, v
    assert "constructor arguments" in v.reason, v.reason


def test_a_library_layer_whose_own_saving_would_call_a_notebook_layer_is_refused(kernel):
    # TimeDistributed is Keras's: its own saving would call the inner layer's get_config in the kernel
    v = _check(kernel, "wrapped(np.zeros((1, 3, 4), 'float32'))")
    assert v.verdict == "unavailable" and "`wrapped`" in (v.reason or "") and "MyDense" in v.reason, v


def test_the_portable_sandbox_rebuilds_them_too(kernel):
    portable = SandboxOptions(confinement="portable")
    v = _check(kernel, f"print(repr({_sums('{m}.predict(X, verbose=0)')}))", sandbox=portable)
    assert v.mode == "portable" and v.verdict == "no-crash", (v.reason, v.how())
    assert v.stdout.strip() == _kernel_value(kernel, _sums("{m}(X)")), v.stdout
    v = _check(kernel, "tower(X_bad)", sandbox=portable)
    assert v.verdict == "crash" and v.ename == "ValueError" and v.certain, (v.reason, v.how())
