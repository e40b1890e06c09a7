"""The kernel-side probe in-process: what it is made of (stdlib only, old-Python syntax), and that it never raises
and always stays within its caps whatever it is given."""

from __future__ import annotations
import __future__

import ast
import json
import sys
import types
from typing import Any

import msgspec
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from crane.probe.collect import PROBE_MODULE, PROBE_PARTS
from crane.probe.facts import Facts, decode_probe_result
from crane.probe.kernel import entry as kp
from crane.probe.kernel.common import Ctx, dumps

from .no_time_cap import NO_TIME_CAP


def test_installed_source_is_stdlib_only_and_parses_as_python_3_8():
    src = "\n".join(text for _, text in PROBE_MODULE.sources)
    tree = ast.parse(src, feature_version=(3, 8))
    imported: set[str] = set()
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
        tree = ast.parse(open(f"server/crane/probe/kernel/{part}").read())
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


def test_annotations_are_never_evaluated_in_the_kernel() -> None:
    """Every part compiles under `from __future__ import annotations`: its annotations (for the type checker)
    stay strings in the kernel, whose Python may be older than the daemon's (`X | None`) and which lacks the
    names the stripped sibling imports bring (`Ctx` in a part other than common's)."""
    ns: dict[str, Any] = {}
    for filename, text in PROBE_MODULE.sources:
        code = compile(text, filename, "exec", dont_inherit=True)  # as the kernel's bootstrap: not this file's flags
        assert code.co_flags & __future__.annotations.compiler_flag, filename
        exec(code, ns)
    functions = [f for f in ns.values() if isinstance(f, types.FunctionType)]
    functions += [m for c in ns.values() if isinstance(c, type) for m in vars(c).values()
                  if isinstance(m, types.FunctionType)]  # fmt: skip
    annotations = [ns["__annotations__"]] + [f.__annotations__ for f in functions]
    assert sum(len(d) for d in annotations) > 300  # the parts are annotated (mypy: disallow_untyped_defs)
    assert all(type(a) is str for d in annotations for a in d.values())


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
    ctx = Ctx(NO_TIME_CAP, scan_budget=10_000)
    f = kp.summarize(ctx, a, "a")
    assert f["sampled"] and "n_nan" not in f  # NaN at 5 is not on the sample's stride
    ctx = Ctx(NO_TIME_CAP, scan_budget=10_000_000)
    g = kp.summarize(ctx, a, "a")
    assert g["n_nan"] == 1 and g["value_range"] == [0.0, 0.0]  # exact (num_unique alone is sampled)
    df = pd.DataFrame({"v": np.arange(100_000.0), "s": ["x"] * 100_000})
    h = kp.summarize(Ctx(NO_TIME_CAP, scan_budget=1000), df, "df")
    assert all(c.get("sampled") for c in h["columns"]) and "n_nan" not in h


def test_fit_var_shrinks_then_falls_back_to_identity():
    df = pd.DataFrame({f"column_{i}": ["some text value %d" % j for j in range(10)] for i in range(80)})
    f = kp.summarize(Ctx(NO_TIME_CAP), df, "df")
    for cap in (4096, 1500, 300, 50):
        g = kp.fit_var(Ctx(NO_TIME_CAP), json.loads(json.dumps(f)), cap)
        assert g["truncated"] and g["name"] == "df" and g["shape"] == [10, 80]
        if cap >= 300:
            assert len(dumps(g)) <= cap
    assert kp.fit_var(Ctx(NO_TIME_CAP), {"name": "x", "type": "int"}, 4096) == {"name": "x", "type": "int"}


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
    req = {"names": ["df"], "attrs": ["df.c"], "time_budget_ms": 600_000}  # facts, not timing: no time cap
    res = decode_probe_result(kp.run(json.dumps(req), {"df": df}))
    assert not res.errors, res.errors
    columns = res.facts["df"].columns
    assert columns is not None
    c = columns[0]
    assert c.n_nan == sum(1 for x in data if x is None or (isinstance(x, float) and x != x))


def _lib_class(name: str, module: str, bases: tuple[type, ...] = (), **attrs: Any) -> Any:
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
    element_spec = res.facts["ds"].element_spec
    d = res.facts["it"].dataloader
    assert km is not None and element_spec is not None and d is not None
    assert res.facts["m"].kind == "keras_model" and km.input_shape == "(None, 28, 28)" and km.output_shape == "(None, 10)"
    assert km.built is True and km.n_layers == 3 and km.loss == "'categorical_crossentropy'"
    assert res.facts["ds"].kind == "tf_dataset" and element_spec.startswith("TensorSpec(shape=(None, 4)")
    assert (d.num_examples, d.batch_size, d.num_batches, d.num_classes) == (100, 32, 4, 3)
    assert d.image_shape == "[256, 256, 3]" and d.class_mode == "categorical"


def test_user_subclass_property_of_a_keras_model_is_not_called():
    calls = []
    Model: Any = _lib_class("Model", "keras.src.models.model")

    class Mine(Model):
        @property
        def input_shape(self):
            calls.append("input_shape")
            return (1,)

    res = decode_probe_result(kp.run(json.dumps({"names": ["m"]}), {"m": Mine()}))
    km = res.facts["m"].keras_model
    assert km is not None
    assert res.facts["m"].kind == "keras_model" and km.input_shape is None and not calls


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
    idx = res.facts["idx"].index
    assert idx is not None
    assert res.facts["idx"].kind == "index" and idx.unique is False
    assert res.facts["ts"].value == "2024-01-02 00:00:00"
    capped = decode_probe_result(kp.run(json.dumps({"names": ["df"], "time_budget_ms": 0.000001}), ns))
    assert capped.time_capped and capped.facts["df"].truncated and capped.facts["df"].columns is None


def _frame_facts(df, columns=None, **req):
    req.setdefault("time_budget_ms", NO_TIME_CAP)
    res = decode_probe_result(kp.run(json.dumps({"names": ["df"], "columns": columns, **req}), {"df": df}))
    assert not res.errors, res.errors
    columns = res.facts["df"].columns
    assert columns is not None
    return res.facts["df"], {c.name: c for c in columns}


def test_value_facts_only_for_mentioned_columns_and_exact_nan_for_all():
    rng = np.random.default_rng(0)
    n = 50_000
    data: dict[str, np.ndarray] = {f"c{i}": rng.random(n) for i in range(6)}
    data["c4"][[3, 99, n - 1]] = np.nan
    data["c5"][[5, 6]] = [np.inf, -np.inf]  # a NaN-free column whose sum is NaN: its own count decides
    data["txt"] = np.array(["1", "2", "x"] * (n // 3) + ["4"] * (n % 3), dtype=object)
    data["holes"] = np.array(["a", None] * (n // 2), dtype=object)
    data["k"] = np.arange(n)
    f, cols = _frame_facts(pd.DataFrame(data), ["c1", "txt", "not_a_column"])
    assert cols["c1"].value_range is not None and cols["c1"].kind == "continuous"
    assert cols["c0"].value_range is None and cols["c0"].kind is None and cols["c0"].dtype == "float64"
    assert (cols["c4"].n_nan, cols["c5"].n_nan, cols["holes"].n_nan, cols["k"].n_nan) == (3, 0, n // 2, 0)
    assert not any(c.sampled for c in cols.values() if c.dtype != "object")  # text: uniques of a sample
    assert f.n_nan == 3 + n // 2 and f.has_nan
    assert cols["txt"].numeric_parse == "some" and cols["txt"].non_numeric_example == "'x'"
    assert cols["holes"].numeric_parse == "none"  # text columns keep numeric_parse without being mentioned
    every, every_cols = _frame_facts(pd.DataFrame(data))  # no list: every column is detailed, as before
    assert every_cols["c0"].value_range is not None and every.n_nan == f.n_nan


def test_frames_from_2d_arrays_and_from_columns_give_the_same_facts():
    rng = np.random.default_rng(1)
    arr = rng.random((40_000, 12))
    arr[7, 3] = np.nan
    strided = pd.DataFrame(arr, columns=[f"c{i}" for i in range(12)])  # each column strided in memory
    contiguous = pd.DataFrame({f"c{i}": arr[:, i].copy() for i in range(12)})
    a, b = _frame_facts(strided, ["c3", "c9"]), _frame_facts(contiguous, ["c3", "c9"])
    assert a[0].n_nan == b[0].n_nan == 1
    assert a[1] == b[1]


def test_exactness_depends_on_the_frame_not_on_the_request():
    df = pd.DataFrame({"a": np.arange(300_000.0), "b": np.arange(300_000.0)})
    df.loc[299_999, "b"] = np.nan
    alone = kp.summarize(Ctx(NO_TIME_CAP, scan_budget=400_000), df, "df")
    other = np.zeros(350_000)
    ctx = Ctx(NO_TIME_CAP, scan_budget=400_000)
    kp.summarize(ctx, other, "other")  # spends the same amount first: the frame's facts do not change
    after = kp.summarize(ctx, df, "df")
    assert alone == after and alone["columns"][1]["n_nan"] == 1 and alone["n_nan"] == 1  # exact counts
    small = kp.summarize(Ctx(NO_TIME_CAP, scan_budget=100_000), df, "df")  # the frame does not fit: sampled, and said so
    assert small["columns"][1]["sampled"] and "n_nan" not in small["columns"][1] and "n_nan" not in small


def test_wide_frames_list_200_columns_count_every_nan_and_detail_mentioned_ones_beyond():
    df = pd.DataFrame(np.zeros((100, 500)), columns=[f"f{i}" for i in range(500)])
    df.iloc[10, 450] = np.nan
    f, cols = _frame_facts(df, ["f470"], max_var_bytes=100_000, max_total_bytes=200_000)
    assert f.columns_truncated and len(f.columns) == 201 and f.columns[-1].name == "f470"
    assert cols["f470"].value_range == [0.0, 0.0] and f.n_nan == 1 and f.has_nan


def test_small_frames_keep_value_facts_for_every_column_and_a_typo_names_its_column():
    small = pd.DataFrame({"age": [31.0, np.nan, 40.0], "name": ["a", "b", "c"]})
    _, cols = _frame_facts(small, ["Age"])
    assert cols["age"].value_range == [31.0, 40.0] and cols["name"].unique_values == ["a", "b", "c"]
    big = pd.DataFrame({"Age": np.arange(60_000.0), "other": np.arange(60_000.0)})
    _, cols = _frame_facts(big, [" age"])  # the cell's typo: the column it meant gets its value facts
    assert cols["Age"].value_range == [0.0, 59999.0] and cols["other"].value_range is None


def test_unnamed_columns_of_a_frame_over_its_budget_say_names_dtypes_and_what_a_sample_shows():
    rng = np.random.default_rng(2)
    n = 100_000
    df = pd.DataFrame({"a": rng.random(n), "b": rng.random(n), "c": rng.random(n), "k": np.arange(n)})
    df["t"] = rng.choice(np.array(["1", "2.5", "x"], dtype=object), n)
    df.loc[5, "a"] = np.nan
    df.loc[::100, "b"] = np.nan
    # the text column (16 units a value) does not fit the frame's budget: no unnamed column is counted at all
    f = kp.summarize(Ctx(NO_TIME_CAP, scan_budget=1_000_000, wanted={"a"}), df, "df")
    cols = {c["name"]: c for c in f["columns"]}
    assert cols["a"]["n_nan"] == 1 and cols["a"]["value_range"][1] < 1.0  # named: exact, on its own budget
    # a sample's NaN is evidence (what the estimator rules read when the whole frame goes into a model) ...
    assert cols["b"] == {"name": "b", "dtype": "float64", "sampled": True, "has_nan": True}
    assert cols["c"] == {"name": "c", "dtype": "float64", "sampled": True}  # ... its absence: unknown, never "none"
    assert cols["k"]["n_nan"] == 0  # an integer column cannot hold NaN
    assert cols["t"]["sampled"] and cols["t"]["numeric_parse"] == "some"  # what the float-conversion rules read
    assert "n_nan" not in f and f["has_nan"] is True  # a NaN was seen (a has one), no total is known
    whole = kp.summarize(Ctx(NO_TIME_CAP, scan_budget=3_000_000, wanted={"a"}), df, "df")  # all fit: exact again
    wcols = {c["name"]: c for c in whole["columns"]}
    assert wcols["b"]["n_nan"] == n // 100 and whole["n_nan"] == 1 + n // 100 and not wcols["b"].get("sampled")


def test_unnamed_strided_columns_over_the_budget_are_row_sampled_together():
    arr = np.random.default_rng(3).random((100_000, 6))
    arr[::50, 4] = np.nan
    df = pd.DataFrame(arr, columns=[f"c{i}" for i in range(6)])  # one 2-D block: each column strided
    f = kp.summarize(Ctx(NO_TIME_CAP, scan_budget=100_000, wanted={"c0"}), df, "df")
    cols = {c["name"]: c for c in f["columns"]}
    assert cols["c4"]["sampled"] and cols["c4"]["has_nan"] is True
    assert cols["c1"] == {"name": "c1", "dtype": "float64", "sampled": True}
    assert f["has_nan"] is True and "n_nan" not in f


def test_fit_var_cuts_a_huge_column_list_the_same_way_without_measuring_every_step(monkeypatch):
    df = pd.DataFrame(np.zeros((10, 300)), columns=[f"a_rather_long_feature_name_{i}" for i in range(300)])
    facts = kp.summarize(Ctx(NO_TIME_CAP), df, "df")
    assert kp._columns_alone_too_big(json.loads(dumps(facts)), kp.MAX_VAR_BYTES)
    fast = kp.fit_var(Ctx(NO_TIME_CAP), json.loads(dumps(facts)), kp.MAX_VAR_BYTES)
    monkeypatch.setattr(kp, "_columns_alone_too_big", lambda f, m: False)
    slow = kp.fit_var(Ctx(NO_TIME_CAP), json.loads(dumps(facts)), kp.MAX_VAR_BYTES)
    assert fast == slow and fast["columns_truncated"] and len(dumps(fast)) <= kp.MAX_VAR_BYTES
    assert 0 < len(fast["columns"]) < 200
