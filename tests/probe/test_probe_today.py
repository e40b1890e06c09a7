"""Facts of today's libraries on a real kernel of the today environment (IPython 9, TensorFlow/Keras 3, jax, polars,
xgboost, lightgbm): TF tensors, variables, ragged and sparse tensors, jax arrays and jitted functions, compiled and
uncompiled Keras models, History, batched and unbatched tf.data datasets, polars DataFrame / LazyFrame (not
collected) / Series, gradient-boosting estimators, and the `versions` fact. The probe leaves the kernel untouched."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest

from ..kernel_envs import require_today_python

SETUP = """
import numpy as np, pandas as pd, polars as pl, tensorflow as tf, jax, jax.numpy as jnp
import xgboost as xgb, lightgbm as lgb
from functools import partial
from tensorflow import keras
tt = tf.constant([[1.0, float('nan')], [3.0, 4.0]])
tv = tf.Variable(tf.zeros((3, 2)))
tr = tf.ragged.constant([[1, 2], [3]])
ts = tf.sparse.SparseTensor(indices=[[0, 0]], values=[1.0], dense_shape=[4, 5])
ja = jnp.arange(12.0).reshape(3, 4)
labels = jnp.array([0, 1, 2, 1])
def loss(w, l2):
    if l2 > 0:
        return w * l2
    return w
@partial(jax.jit, static_argnames=('l2',))
def step(w, l2):
    return loss(w, l2)
compiled = keras.Sequential([keras.Input(shape=(28, 28, 1)), keras.layers.Conv2D(4, 3, activation='relu'),
                             keras.layers.Flatten(), keras.layers.Dense(10, activation='softmax')])
compiled.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
plain = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3)])
X = np.zeros((8, 28, 28, 1), dtype='float32')
y = np.arange(8) % 10
hist = compiled.fit(X, y, epochs=1, verbose=0)
ds = tf.data.Dataset.from_tensor_slices((X, y))
dsb = ds.shuffle(8).batch(4)
pf = pl.DataFrame({'a': [1, 2, None], 'd': ['2020-01-01', 'x', None]})
lf = pl.scan_csv('data.csv').with_columns(pl.col('a').alias('b'))
ps = pl.Series('s', [1.0, None, 3.0])
xg = xgb.XGBClassifier(n_estimators=2, enable_categorical=True)
lg = lgb.LGBMClassifier(n_estimators=2)
"""
NAMES = ["tt", "tv", "tr", "ts", "ja", "labels", "step", "compiled", "plain", "hist", "ds", "dsb", "pf", "lf", "ps",
         "xg", "lg"]  # fmt: skip


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("today")
    (cwd / "data.csv").write_text("a,c\n1,x\n2,y\n")
    k = start_kernel(cwd, python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=240)
    assert run.status == "ok", run
    yield k
    k.shutdown()


@pytest.fixture(scope="module")
def result(kernel):
    client = ProbeClient(kernel.connection)
    client.ensure_installed()
    with Untouched(kernel.connection) as check:
        res = client.run(ProbeRequest(names=NAMES, time_budget_ms=5000))
    assert check.unchanged, check.outputs
    assert not res.errors, res.errors
    return res


def test_tensorflow_tensors(result):
    tt, tv, tr, ts = (result.facts[n] for n in ("tt", "tv", "tr", "ts"))
    assert (tt.kind, tt.shape, tt.dtype, tt.has_nan, tt.value_range) == ("tensor", [2, 2], "float32", True, [1.0, 4.0])
    assert tt.device is not None and "CPU" in tt.device
    assert (tv.shape, tv.dtype, tv.requires_grad, tv.value_range) == ([3, 2], "float32", True, [0.0, 0.0])
    assert (tr.shape, tr.value_skipped) == ([2, -1], "ragged")
    assert (ts.shape, ts.dtype, ts.value_skipped) == ([4, 5], "float32", "sparse")


def test_jax_arrays_and_jit(result):
    ja, labels, step = result.facts["ja"], result.facts["labels"], result.facts["step"]
    assert (ja.kind, ja.shape, ja.dtype, ja.device, ja.value_range) == (
        "tensor",
        [3, 4],
        "float32",
        "cpu:0",
        [0.0, 11.0],
    )
    assert ja.committed is False
    assert labels.unique_values == [0, 1, 2] and labels.dtype == "int32"
    assert step.jit is not None
    assert (step.jit.function, step.jit.params, step.jit.static_argnames) == ("step", ["w", "l2"], ["l2"])
    assert step.jit.static_argnums == [1]
    assert step.jit.source is not None and "def step(w, l2):" in step.jit.source
    assert step.jit.callees is not None and "if l2 > 0:" in step.jit.callees["loss"]


def test_keras_models_history_and_datasets(result):
    km = result.facts["compiled"].keras_model
    assert km is not None
    assert (km.compiled, km.optimizer, km.losses, km.metrics) == (True, "Adam", ["sparse_categorical_crossentropy"],
                                                                  ["accuracy"])  # fmt: skip
    assert (km.inputs, km.outputs, km.sequential) == ([[-1, 28, 28, 1]], [[-1, 10]], True)
    assert km.layers is not None
    assert [(la.type, la.filters or la.units, la.activation) for la in km.layers] == [
        ("Conv2D", 4, "relu"), ("Flatten", None, None), ("Dense", 10, "softmax")]  # fmt: skip
    assert km.layers[0].min_ndim == 4
    plain = result.facts["plain"].keras_model
    assert plain is not None and plain.compiled is False and plain.losses is None
    hist = result.facts["hist"]
    assert (hist.kind, hist.length, sorted(hist.keys or [])) == ("keras_history", 1, ["accuracy", "loss"])
    ds, dsb = result.facts["ds"], result.facts["dsb"]
    assert (ds.kind, ds.batched, dsb.batched) == ("tf_dataset", False, True)
    assert ds.element_spec is not None and "shape=(28, 28, 1)" in ds.element_spec
    assert dsb.element_spec is not None and "shape=(None, 28, 28, 1)" in dsb.element_spec


def test_polars_objects(result):
    pf, lf, ps = result.facts["pf"], result.facts["lf"], result.facts["ps"]
    assert (pf.kind, pf.shape) == ("polars_frame", [3, 2])
    assert [(c.name, c.dtype, c.n_nan) for c in pf.columns or []] == [("a", "Int64", 1), ("d", "String", 1)]
    assert lf.kind == "polars_lazy" and lf.length is None  # the plan is not collected
    assert [(c.name, c.dtype) for c in lf.columns or []] == [("a", "Int64"), ("c", "String"), ("b", "Int64")]
    assert (ps.kind, ps.length, ps.dtype, ps.n_nan, ps.value_range) == ("polars_series", 3, "Float64", 1, [1.0, 3.0])


def test_boosting_estimators_and_versions(result):
    xg, lg = result.facts["xg"].estimator, result.facts["lg"].estimator
    assert xg is not None and lg is not None
    assert (xg.class_name, xg.is_fitted, xg.params.get("enable_categorical")) == ("XGBClassifier", False, "True")
    assert (lg.class_name, lg.is_fitted, lg.params.get("n_estimators")) == ("LGBMClassifier", False, "2")
    libs = result.libraries
    for lib in ("tensorflow", "keras", "jax", "polars", "xgboost", "lightgbm", "numpy", "pandas"):
        assert lib in libs, lib


def test_hover_and_diagnose_texts_show_the_new_facts(result):
    from crane.llm.facts_text import var_text
    from crane.lsp.facts_markdown import facts_markdown

    hover = {n: facts_markdown(result.facts[n]) for n in ("compiled", "plain", "step", "dsb", "lf", "tt")}
    assert "compiled (optimizer Adam" in hover["compiled"] and "Conv2D(4, relu)" in hover["compiled"]
    assert "compiled: **no**" in hover["plain"]
    assert "jax.jit of `step`" in hover["step"] and "['l2', '1']" not in hover["step"]
    assert "- batched" in hover["dsb"] and "not collected" in hover["lf"] and "| `b` | Int64 |" in hover["lf"]
    assert "shape `(2, 2)`" in hover["tt"] and "dtype `float32`" in hover["tt"]
    texts = {n: var_text(n, result.facts[n], set()) for n in ("compiled", "step", "pf", "lf", "ja", "hist", "ds")}
    assert "compiled=True" in texts["compiled"] and "Dense(10,softmax)" in texts["compiled"]
    assert "static=['1', 'l2']" in texts["step"]
    assert texts["pf"].startswith("pf: polars DataFrame 3x2") and "String" in texts["pf"]
    assert texts["lf"].startswith("lf: polars LazyFrame (not collected)")
    assert texts["ja"].startswith("ja: jaxlib._jax.ArrayImpl float32 (3,4)")
    assert texts["hist"] == "hist: keras History epochs=1 keys=accuracy,loss"
    assert "unbatched" in texts["ds"]
