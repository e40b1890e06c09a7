"""Rules for today's libraries (Keras 3, jax, polars, xgboost/lightgbm) on a real kernel of the today environment:
each with a crashing cell and a clean look-alike, and, where cheap, the prediction checked against the real run."""

from __future__ import annotations

import pytest

from crane.analysis.scope import NotebookScope
from crane.kernel.manager import start_kernel

from ..kernel_envs import require_today_python
from .conftest import predict_source, run_target

KERAS = """
import numpy as np
from tensorflow import keras
conv = keras.Sequential([keras.Input(shape=(28, 28, 1)), keras.layers.Conv2D(2, 3, activation='relu'),
                         keras.layers.Flatten(), keras.layers.Dense(10, activation='softmax')])
conv.compile(optimizer='adam', loss='sparse_categorical_crossentropy')
mlp = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(4, activation='softmax')])
mlp.compile(optimizer='adam', loss='categorical_crossentropy')
sparse = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(4, activation='softmax')])
sparse.compile(optimizer='adam', loss='sparse_categorical_crossentropy')
raw = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(4, activation='softmax')])
flat = np.zeros((8, 784), dtype='float32')
images = np.zeros((8, 28, 28), dtype='float32')
ids = np.array([0, 1, 2, 3, 0, 1, 2, 3])
ids5 = np.array([0, 1, 2, 3, 4, 1, 2, 3])
onehot = np.eye(4, dtype='float32')[ids]
import pandas as pd
words = pd.Series(['cat', 'dog', 'cat', 'eel', 'cat', 'dog', 'cat', 'eel'])
words_obj = words.astype(object)
words_u = words.to_numpy().astype(str)
codes = pd.Series(ids)
import tensorflow as tf
ds_images = tf.data.Dataset.from_tensor_slices((images, ids)).batch(4)
ds_flat = tf.data.Dataset.from_tensor_slices((flat, ids)).batch(4)
ds_unbatched = tf.data.Dataset.from_tensor_slices((flat, ids))
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("today-rules"), python=require_today_python())
    yield k
    k.shutdown()


def crash(findings):
    return [(f.rule, f.ename) for f in findings][:1]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("conv.fit(flat, ids, epochs=1, verbose=0)", [("keras-model", "ValueError")]),
        ("conv.fit(images, ids, epochs=1, verbose=0)", []),  # Keras 3 adds the trailing axis of size 1
        ("conv.predict(flat, verbose=0)", [("keras-model", "ValueError")]),
        ("conv.predict(images[..., None], verbose=0)", []),
        ("sparse.fit(flat, ids, epochs=1, verbose=0, validation_data=(images, ids))", [("keras-model", "ValueError")]),
        ("sparse.fit(flat, ids, epochs=1, verbose=0, validation_data=(flat, ids))", []),
        ("mlp.fit(flat, ids, epochs=1, verbose=0)", [("keras-model", "ValueError")]),
        ("mlp.fit(flat, onehot, epochs=1, verbose=0)", []),
        ("sparse.fit(flat, ids5, epochs=1, verbose=0)", [("keras-model", "InvalidArgumentError")]),
        ("sparse.fit(flat, ids, epochs=1, verbose=0)", []),
        ("raw.fit(flat, ids, epochs=1, verbose=0)", [("keras-model", "ValueError")]),
        (
            "raw.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\nraw.fit(flat, ids, epochs=1, verbose=0)",
            [],
        ),
        ("sparse.fit(flat, words, epochs=1, verbose=0)", [("keras-model", "ValueError")]),  # Invalid dtype: str
        ("sparse.fit(flat, words_obj, epochs=1, verbose=0)", [("keras-model", "ValueError")]),
        ("sparse.fit(flat, words_u, epochs=1, verbose=0)", [("keras-model", "ValueError")]),  # str96
        ("sparse.evaluate(flat, words, verbose=0)", [("keras-model", "ValueError")]),
        ("sparse.fit(flat, codes, epochs=1, verbose=0)", []),
        ("sparse.fit(ds_images, epochs=1, verbose=0)", [("keras-model", "ValueError")]),  # element_spec (None, 28, 28)
        ("sparse.fit(ds_unbatched, epochs=1, verbose=0)", [("keras-model", "ValueError")]),  # (784,): not batched
        ("sparse.fit(ds_flat, epochs=1, verbose=0)", []),
        ("conv.fit(ds_images, epochs=1, verbose=0)", []),  # the trailing axis of size 1 is added
        ("sparse.fit(flat, words.astype('category').cat.codes, epochs=1, verbose=0)", []),
        ("conv.predict_classes(images)", [("missing-attribute", "AttributeError")]),
        ("conv.save('saved_model_dir')", [("keras-model", "ValueError")]),
        ("conv.save('model.keras')", []),
    ],
)
def test_keras(kernel, target, expected):
    findings = predict_source(kernel, KERAS, target)
    assert crash(findings) == expected
    run = run_target(kernel, target)
    assert (run.status == "error") == bool(expected), (run.ename, run.evalue)
    if expected:
        assert run.ename == expected[0][1]
        if findings[0].message.startswith("Invalid dtype"):  # labels Keras cannot read: its exact message
            assert findings[0].message == run.evalue
        if "fit(ds_" in target:  # the shape Keras reports for the dataset's elements
            assert findings[0].message.rsplit("incompatible shape ", 1)[1] in run.evalue


JAX = """
from functools import partial
import jax, jax.numpy as jnp
def loss(w, l2):
    if l2 > 0:
        return jnp.sum(w) * l2
    return jnp.sum(w)
@jax.jit
def traced(w, l2):
    return jax.grad(loss)(w, l2)
@partial(jax.jit, static_argnames=('l2',))
def static(w, l2):
    return jax.grad(loss)(w, l2)
@jax.jit
def by_shape(w):
    if w.shape[0] > 1:
        return w * 2
    return w
w = jnp.ones(3)
"""


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("traced(w, 0.1)", [("jax-traced-control-flow", "TracerBoolConversionError")]),
        ("static(w, 0.1)", []),
        ("by_shape(w)", []),
        ("jax.grad(lambda v: jnp.sin(v) * 2.0)(w)", [("jax-grad-output", "TypeError")]),
        ("def sq(v):\n    return v ** 2\njax.grad(sq)(w)", [("jax-grad-output", "TypeError")]),
        ("jax.value_and_grad(lambda v: jnp.tanh(v) + 1)(w)", [("jax-grad-output", "TypeError")]),
        ("jax.grad(lambda v: jnp.sum(v ** 2))(w)", []),
        ("jax.grad(lambda v: v ** 2)(2.0)", []),
        ("def sq(v):\n    return (v ** 2).mean()\njax.grad(sq)(w)", []),
    ],
)
def test_jax(kernel, target, expected):
    scope = NotebookScope.from_cells([(1, 1, JAX), (2, None, target)])  # the notebook's imports (names in lambdas)
    findings = predict_source(kernel, JAX, target, scope=scope, target_cell=2)
    assert crash(findings) == expected
    run = run_target(kernel, target)
    assert (run.ename if run.status == "error" else None) == (expected[0][1] if expected else None)
    if expected and expected[0][0] == "jax-grad-output":
        assert findings[0].message == run.evalue


POLARS = """
import polars as pl
orders = pl.DataFrame({'Order Date': ['2020-01-02', '2021-03-04'], 'Sales': [1.0, 2.0]})
parsed = orders.with_columns(pl.col('Order Date').str.to_date())
lazy = orders.lazy()
ids = pl.DataFrame({'k': [1, 2], 'v': [1.0, 2.0]})
names = pl.DataFrame({'k': ['1', '2'], 'w': ['a', 'b']})
small = pl.DataFrame({'k': [1, 2], 'w': ['a', 'b']}, schema={'k': pl.Int32, 'w': pl.String})
more_ids = pl.DataFrame({'k': [3], 'v': [3.0]})
ids_i32 = pl.DataFrame({'k': [3], 'v': [3.0]}, schema={'k': pl.Int32, 'v': pl.Float64})
swapped = pl.DataFrame({'v': [3.0], 'k': [3]})
"""


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            "orders.with_columns(pl.col('Order Date').dt.year().alias('y'))",
            [("polars-columns", "InvalidOperationError")],
        ),
        ("parsed.with_columns(pl.col('Order Date').dt.year().alias('y'))", []),
        ("lazy.select(pl.col('sales')).collect()", [("polars-columns", "ColumnNotFoundError")]),
        ("lazy.select(pl.col('Sales')).collect()", []),
        ("orders.groupby('Sales')", [("missing-attribute", "AttributeError")]),
        ("orders.group_by('Sales').len()", []),
        ("orders.to_pandas().groupby('Sales')['Order Date'].count()", []),
        ("ids.join(names, on='k')", [("polars-join-keys", "SchemaError")]),
        ("ids.join(small, on='k')", []),  # i64 and i32 keys: polars casts to a common type
        ("orders.with_columns(pl.col('Sales').str.contains('1'))", [("polars-columns", "InvalidOperationError")]),
        ("ids.select(pl.col('k').str.len_chars())", [("polars-columns", "SchemaError")]),
        ("orders.select(pl.col('Order Date').str.len_chars())", []),
        ("ids.select(pl.col('k').cast(pl.String).str.len_chars())", []),
        ("pl.concat([ids, names])", [("polars-concat", "SchemaError")]),  # 'k': str vs i64 (before 'v' vs 'w')
        ("pl.concat([ids, more_ids, ids_i32])", [("polars-concat", "SchemaError")]),  # i32 vs i64: strict vstack
        ("pl.concat([ids, swapped])", [("polars-concat", "ShapeError")]),
        ("pl.concat([ids, more_ids])", []),
        ("pl.concat([ids, ids_i32], how='vertical_relaxed')", []),
        ("pl.concat([ids, swapped], how='diagonal')", []),
    ],
)
def test_polars(kernel, target, expected):
    findings = predict_source(kernel, POLARS, target)
    assert crash(findings) == expected
    run = run_target(kernel, target)
    assert (run.ename if run.status == "error" else None) == (expected[0][1] if expected else None)
    if expected and (".str." in target or "concat" in target):  # polars' own first line
        assert findings[0].message == run.evalue.split("\n")[0]


BOOST = """
import pandas as pd, xgboost as xgb, lightgbm as lgb
X = pd.DataFrame({'city': ['a', 'b', 'a', 'b'] * 5, 'n': range(20)})
Xc = X.astype({'city': 'category'})
y = [0, 1] * 10
unfitted_xgb = xgb.XGBClassifier(n_estimators=2, enable_categorical=True)
unfitted_lgb = lgb.LGBMClassifier(n_estimators=2, verbose=-1)
fitted_lgb = lgb.LGBMClassifier(n_estimators=2, verbose=-1, min_child_samples=1).fit(Xc, y)
N = pd.DataFrame({'a': range(20), 'b': [1.0, 2.0] * 10, 'c': [0, 1, 2, 3] * 5})
fitted_xgb_n = xgb.XGBClassifier(n_estimators=2).fit(N, y)
fitted_lgb_n = lgb.LGBMClassifier(n_estimators=2, verbose=-1, min_child_samples=1).fit(N, y)
"""


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("m = xgb.XGBClassifier(n_estimators=2)\nm.fit(X, y)", [("boosting-input", "ValueError")]),
        (
            "m = xgb.XGBClassifier(n_estimators=2, enable_categorical=True)\nm.fit(X, y)",
            [("boosting-input", "ValueError")],
        ),
        ("m = xgb.XGBClassifier(n_estimators=2)\nm.fit(Xc, y)", [("boosting-input", "ValueError")]),
        ("m = xgb.XGBClassifier(n_estimators=2, enable_categorical=True)\nm.fit(Xc, y)", []),
        ("m = lgb.LGBMClassifier(n_estimators=2, verbose=-1)\nm.fit(X, y)", [("boosting-input", "ValueError")]),
        ("unfitted_xgb.predict(Xc)", [("sklearn-not-fitted", "NotFittedError")]),
        ("unfitted_lgb.predict_proba(Xc)", [("sklearn-not-fitted", "NotFittedError")]),
        ("fitted_lgb.predict(Xc)", []),
        ("fitted_xgb_n.predict(N[['a', 'b']])", [("boosting-input", "ValueError")]),  # feature_names mismatch
        ("fitted_xgb_n.predict(N[['c', 'b', 'a']])", [("boosting-input", "ValueError")]),  # order matters
        ("fitted_xgb_n.predict(N[['a', 'b']].to_numpy())", [("boosting-input", "ValueError")]),  # shape mismatch
        ("fitted_xgb_n.predict(N[['a', 'b', 'c']])", []),
        ("fitted_xgb_n.predict(N.to_numpy())", []),
        ("fitted_lgb_n.predict(N[['a', 'b']])", [("boosting-input", "LightGBMError")]),
        ("fitted_lgb_n.predict(N[['c', 'b', 'a']])", []),  # LightGBM checks only the count
        ("fitted_lgb_n.predict(N[['a', 'b']].to_numpy())", [("boosting-input", "ValueError")]),
        ("m = lgb.LGBMClassifier(n_estimators=2, verbose=-1, min_child_samples=1)\nm.fit(Xc, y)", []),
    ],
)
def test_boosting(kernel, target, expected):
    findings = predict_source(kernel, BOOST, target)
    assert crash(findings) == expected
    run = run_target(kernel, target)
    assert (run.ename if run.status == "error" else None) == (expected[0][1] if expected else None)
    if expected and "fitted_" in target:  # the library's own first line
        assert findings[0].message == run.evalue.split("\n")[0]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("x = np.NaN", [("missing-attribute", "AttributeError")]),
        ("x = np.nan", []),
        ("x = np.random.rand(2)", []),
        ("x = np.linalg.norm(np.ones(2))", []),
    ],
)
def test_numpy2_module_attributes(kernel, target, expected):
    findings = predict_source(kernel, "import numpy as np", target)
    assert crash(findings) == expected
    if expected:
        assert findings[0].message.startswith("`np.NaN` was removed in the NumPy 2.0 release.")
    run = run_target(kernel, target)
    assert (run.ename if run.status == "error" else None) == (expected[0][1] if expected else None)


SKLEARN = """
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.ensemble import RandomForestClassifier
X = np.array([[0.0], [1.0], [2.0], [3.0]])
y = np.array([0, 1, 0, 1])
Xs = np.array([['a'], ['b'], ['a'], ['b']])
lr = LogisticRegression()
rf_auto = RandomForestClassifier(max_features='auto')
"""


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("lr.fit(X, y)", []),  # scikit-learn 1.9's penalty='deprecated' placeholder is not a user's penalty
        ("rf_auto.fit(X, y)", [("sklearn-params", "InvalidParameterError")]),  # validated by the kernel's sklearn
        ("lr.fit(Xs, y)", [("sklearn-input", "ValueError")]),  # numpy 2 reprs: np.str_('a')
    ],
)
def test_sklearn_today(kernel, target, expected):
    assert crash(predict_source(kernel, SKLEARN, target)) == expected
    run = run_target(kernel, target)
    assert (run.ename if run.status == "error" else None) == (expected[0][1] if expected else None)


def test_torch_device_mismatch_from_facts():
    """No GPU here (torch is the CPU build): the decision is checked on the facts a CUDA kernel's probe gives."""
    from crane.probe.facts import Facts, LayerFacts, TorchModuleFacts
    from crane.rules.torch_rules import device_mismatch, input_verdict

    layer = LayerFacts(name="0", type="Linear", in_features=4, out_features=2)
    model = Facts(name="net", type="torch.nn.modules.container.Sequential", kind="torch_module",
                  torch_module=TorchModuleFacts(layers=[layer], device="cuda:0", dtype="torch.float32"))  # fmt: skip
    x = Facts(name="x", type="torch.Tensor", kind="tensor", shape=[8, 4], dtype="torch.float32", device="cpu")
    v = input_verdict("net", model, "x", x)
    assert v is not None and v.ename == "RuntimeError"
    assert v.message == "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    x_gpu = Facts(name="x", type="torch.Tensor", kind="tensor", shape=[8, 4], dtype="torch.float32", device="cuda")
    assert input_verdict("net", model, "x", x_gpu) is None  # "cuda" is cuda:0
    assert device_mismatch("meta", "cpu") is None and device_mismatch(None, "cuda:0") is None


SHAPES = """
import jax.numpy as jnp, tensorflow as tf
a = jnp.ones((3, 4)); b = jnp.ones((3, 4)); bt = jnp.ones((4, 3)); c = jnp.ones((5,)); d = jnp.ones((4,))
ta = tf.ones((3, 4)); tb = tf.ones((3, 4)); tbt = tf.ones((4, 3))
"""


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("a @ b", [("numpy-shapes", "TypeError")]),
        ("a @ bt", []),
        ("a + c", [("numpy-shapes", "ValueError")]),
        ("a + d", []),
        ("a.reshape(5, 5)", [("numpy-shapes", "TypeError")]),
        ("a.reshape(4, 3)", []),
        ("ta @ tb", [("numpy-shapes", "InvalidArgumentError")]),
        ("ta @ tbt", []),
    ],
)
def test_jax_and_tf_shapes(kernel, target, expected):
    """numpy-shapes on jax and TF tensors: their own exception names (not torch's RuntimeError)."""
    assert crash(predict_source(kernel, SHAPES, target)) == expected
    run = run_target(kernel, target)
    assert (run.ename if run.status == "error" else None) == (expected[0][1] if expected else None)
