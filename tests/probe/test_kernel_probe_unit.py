"""The kernel-side probe in-process: what it is made of (stdlib only, old-Python syntax), and that it never raises
and always stays within its caps whatever it is given."""

from __future__ import annotations

import ast
import json
import sys

import msgspec
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from crane.probe import kernel_probe as kp
from crane.probe.collect import PROBE_MODULE, PROBE_PARTS
from crane.probe.facts import Facts, decode_probe_result
from crane.probe.kp_common import Ctx, dumps


def test_installed_source_is_stdlib_only_and_parses_as_python_3_8():
    src = "\n".join(text for _, text in PROBE_MODULE.sources)
    tree = ast.parse(src, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"print", "input", "breakpoint", "repr_all"}
    assert "crane" not in src.replace("CRANE", "").replace("crane_probe", "").replace("crane-probe", "")


def test_parts_define_each_top_level_name_once() -> None:
    seen: dict[str, str] = {}
    for part in PROBE_PARTS:
        tree = ast.parse(open(f"server/crane/probe/{part}").read())
        for node in tree.body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for n in names:
                assert n not in seen or n == "__all__", f"{n} defined in {seen.get(n)} and {part}"
                seen[n] = part


def test_installed_source_runs_like_the_module() -> None:
    ns: dict = {}
    for filename, text in PROBE_MODULE.sources:
        exec(compile(text, filename, "exec"), ns)
    user = {"df": pd.DataFrame({"a": [1, None]}), "x": 3}
    req = json.dumps({"names": ["df", "x", "nope"]})
    a, b = json.loads(ns["run"](req, user)), json.loads(kp.run(req, user))
    for r in (a, b):
        r.pop("elapsed_ms"), r.pop("payload_bytes")
    assert a == b and a["undefined"] == ["nope"] and a["facts"]["df"]["n_nan"] == 1


def test_bad_requests_are_answered_with_errors():
    for req in ["not json", "[]", "null", '{"names": 5}', '{"keys": [[1], "x", null]}', '{"names": [1, null]}']:
        res = decode_probe_result(kp.run(req, {}))
        assert isinstance(res.errors, list)
    assert "probe failed" in decode_probe_result(kp.run("not json", {})).errors[0]
    ok = decode_probe_result(kp.run('{"names": [1, "x"], "keys": [["x", "a"]], "attrs": ["x..y", ""]}', {"x": {}}))
    assert ok.keys[0].present is False and not ok.facts["x"].truncated


def test_large_values_are_sampled_within_the_scan_budget():
    a = np.zeros(100_000)
    a[5] = np.nan
    ctx = Ctx(scan_budget=10_000)
    f = kp.summarize(ctx, a, "a")
    assert f["sampled"] and "n_nan" not in f  # NaN at 5 is not on the sample's stride
    ctx = Ctx(scan_budget=10_000_000)
    g = kp.summarize(ctx, a, "a")
    assert g["n_nan"] == 1 and g["value_range"] == [0.0, 0.0]  # exact (num_unique alone is sampled)
    df = pd.DataFrame({"v": np.arange(100_000.0), "s": ["x"] * 100_000})
    h = kp.summarize(Ctx(scan_budget=1000), df, "df")
    assert all(c.get("sampled") for c in h["columns"]) and "n_nan" not in h


def test_fit_var_shrinks_then_falls_back_to_identity():
    df = pd.DataFrame({f"column_{i}": ["some text value %d" % j for j in range(10)] for i in range(80)})
    f = kp.summarize(Ctx(), df, "df")
    for cap in (4096, 1500, 300, 50):
        g = kp.fit_var(Ctx(), json.loads(json.dumps(f)), cap)
        assert g["truncated"] and g["name"] == "df" and g["shape"] == [10, 80]
        if cap >= 300:
            assert len(dumps(g)) <= cap
    assert kp.fit_var(Ctx(), {"name": "x", "type": "int"}, 4096) == {"name": "x", "type": "int"}


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=300),
    st.binary(max_size=50), st.complex_numbers(allow_nan=True),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=30), st.tuples(inner, inner), st.dictionaries(st.one_of(st.text(), st.integers()), inner, max_size=40),
        st.frozensets(st.integers(), max_size=10),
    ),
    max_leaves=200,
)


@settings(max_examples=150, deadline=None)
@given(v=values)
def test_any_builtin_value_gives_decodable_bounded_facts(v):
    out = kp.run(json.dumps({"names": ["v"], "keys": [["v", "k", "key"], ["v", 0, "key"]]}), {"v": v})
    res = decode_probe_result(out)
    assert not res.errors, res.errors
    f = res.facts["v"]
    assert isinstance(f, Facts) and len(msgspec.json.encode(f)) <= kp.MAX_VAR_BYTES + 64


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.one_of(st.none(), st.floats(), st.text(max_size=30), st.integers(-(2**70), 2**70)), max_size=60),
)
def test_any_object_column_gives_decodable_facts(data):
    df = pd.DataFrame({"c": pd.Series(data, dtype=object)})
    res = decode_probe_result(kp.run(json.dumps({"names": ["df"], "attrs": ["df.c"]}), {"df": df}))
    assert not res.errors, res.errors
    c = res.facts["df"].columns[0]
    assert c.n_nan == sum(1 for x in data if x is None or (isinstance(x, float) and x != x))


def _lib_class(name, module, bases=(), **attrs):
    """A class that claims to live in `module` (TensorFlow/Keras cannot be installed here)."""
    for v in attrs.values():
        fget = getattr(v, "fget", None)
        if fget is not None:
            fget.__module__ = module
    return type(name, bases, {"__module__": module, **attrs})


def test_keras_and_tf_objects_by_library_and_class_name():
    Model = _lib_class("Model", "keras.src.models.model", input_shape=property(lambda self: (None, 28, 28)),
                       output_shape=property(lambda self: (None, 10)))  # fmt: skip
    Sequential = _lib_class("Sequential", "keras.src.models.sequential", (Model,))
    m = Sequential()
    m.__dict__.update(built=True, _layers=[1, 2, 3], loss="categorical_crossentropy")
    DatasetV2 = _lib_class("DatasetV2", "tensorflow.python.data.ops.dataset_ops",
                           element_spec=property(lambda self: "TensorSpec(shape=(None, 4), dtype=tf.float32)"))  # fmt: skip
    Iterator = _lib_class("Iterator", "keras.src.legacy.preprocessing.image")
    DirIt = _lib_class("DirectoryIterator", "keras.src.legacy.preprocessing.image", (Iterator,))
    it = DirIt()
    it.__dict__.update(n=100, batch_size=32, num_classes=3, image_shape=(256, 256, 3), class_mode="categorical")
    ns = {"m": m, "ds": DatasetV2(), "it": it}
    res = decode_probe_result(kp.run(json.dumps({"names": ["m", "ds", "it"]}), ns))
    km = res.facts["m"].keras_model
    assert res.facts["m"].kind == "keras_model" and km.input_shape == "(None, 28, 28)" and km.output_shape == "(None, 10)"
    assert km.built is True and km.n_layers == 3 and km.loss == "'categorical_crossentropy'"
    assert res.facts["ds"].kind == "tf_dataset" and res.facts["ds"].element_spec.startswith("TensorSpec(shape=(None, 4)")
    d = res.facts["it"].dataloader
    assert (d.num_examples, d.batch_size, d.num_batches, d.num_classes) == (100, 32, 4, 3)
    assert d.image_shape == "[256, 256, 3]" and d.class_mode == "categorical"


def test_user_subclass_property_of_a_keras_model_is_not_called():
    calls = []
    Model = _lib_class("Model", "keras.src.models.model")

    class Mine(Model):
        @property
        def input_shape(self):
            calls.append("input_shape")
            return (1,)

    res = decode_probe_result(kp.run(json.dumps({"names": ["m"]}), {"m": Mine()}))
    assert res.facts["m"].kind == "keras_model" and res.facts["m"].keras_model.input_shape is None and not calls


def test_sparse_index_timestamp_and_time_cap():
    import scipy.sparse

    ns = {
        "sp": scipy.sparse.csr_matrix(np.eye(4)),
        "idx": pd.Index(["a", "b", "a"]),
        "ts": pd.Timestamp("2024-01-02"),
        "df": pd.DataFrame({"a": [1.0]}),
    }
    res = decode_probe_result(kp.run(json.dumps({"names": ["sp", "idx", "ts"]}), ns))
    sp = res.facts["sp"]
    assert (sp.kind, sp.shape, sp.dtype, sp.value) == ("sparse", [4, 4], "float64", "nnz=4")
    assert res.facts["idx"].kind == "index" and res.facts["idx"].index.unique is False
    assert res.facts["ts"].value == "2024-01-02 00:00:00"
    capped = decode_probe_result(kp.run(json.dumps({"names": ["df"], "time_budget_ms": 0.000001}), ns))
    assert capped.time_capped and capped.facts["df"].truncated and capped.facts["df"].columns is None
