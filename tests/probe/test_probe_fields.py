"""Field coverage of the probe on a real kernel: each kind of value gets the facts the rules rely on."""

from __future__ import annotations

import functools

import pytest

from crane.probe.facts import ProbeRequest

from ..library_versions import HAS_TORCH, needs_torch
from .conftest import torch_only
from .no_time_cap import NO_TIME_CAP


@pytest.fixture(scope="module")
def facts(probe):
    @functools.cache
    def get(name):
        res = probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=[name]))
        assert not res.errors, res.errors
        return res.facts[name]

    return get


def col(f, name):
    return next(c for c in f.columns if c.name == name)


def test_dataframe_columns_nan_counts_and_value_facts(facts):
    f = facts("df")
    assert f.kind == "dataframe" and f.type == "pandas.core.frame.DataFrame"
    assert f.shape == [6, 6] and f.has_nan is True and f.n_nan == 3
    assert [c.name for c in f.columns] == ["age", "sex", "price", "survived", "when", "cat"]
    age = col(f, "age")
    assert (age.dtype, age.n_nan, age.value_range, age.kind) == ("float64", 2, [22.0, 54.0], "categorical")
    sex = col(f, "sex")
    assert sex.kind == "binary" and sex.unique_values == ["f", "m"] and sex.numeric_parse == "none"
    assert sex.non_numeric_example == "'m'"
    price = col(f, "price")
    assert price.n_nan == 1 and price.numeric_parse == "some" and price.non_numeric_example == "'3,000'"
    surv = col(f, "survived")
    assert surv.dtype == "int64" and surv.kind == "binary" and surv.unique_values == [0, 1] and surv.n_nan == 0
    when = col(f, "when")
    assert when.kind == "datetime" and when.value_range[0].startswith("2021-01-01")
    assert col(f, "cat").kind == "categorical" and col(f, "cat").num_unique == 3
    assert f.index.type == "RangeIndex" and (f.index.start, f.index.stop, f.index.step) == (0, 6, 1)


def test_dataframe_string_index(facts):
    idx = facts("df_idx").index
    assert idx.type == "Index" and idx.dtype == "object" and idx.length == 3 and idx.unique is True


def test_wide_dataframe_is_capped_per_variable(facts):
    f = facts("wide")
    assert f.shape == [3, 400] and f.truncated and f.columns_truncated
    assert 0 < len(f.columns) < 400 and f.columns[0].name == "feature_000_with_a_long_name"


def test_series(facts):
    f = facts("s")
    assert f.kind == "series" and f.dtype == "float64" and f.length == 3
    assert f.n_nan == 1 and f.has_nan and f.value_range == [1.0, 3.0]
    assert f.index.dtype == "int64" and (f.index.min, f.index.max) == (10, 30)
    g = facts("s_str")
    assert g.numeric_parse == "some" and g.non_numeric_example == "'abc'"


def test_ndarrays(facts):
    x = facts("X")
    assert x.kind == "ndarray" and x.shape == [40, 3] and x.dtype == "float64" and x.has_nan is False
    assert 0 <= x.value_range[0] < x.value_range[1] <= 1 and x.value_kind == "continuous"
    y = facts("y")
    assert y.value_kind == "binary" and y.unique_values == [0, 1] and y.n_nan == 0
    a = facts("arr_nan")
    assert a.n_nan == 1 and a.has_nan and a.value_range == [1.0, 4.0]
    o = facts("obj_arr")
    assert o.dtype == "object" and o.numeric_parse == "some" and o.non_numeric_example == "'x'"


def test_large_array_nan_found_exactly_within_scan_budget(facts):
    f = facts("big_vec")
    assert f.shape == [3_000_000] and f.n_nan == 1 and f.has_nan
    assert f.value_range == [0.0, 2999998.0]


@needs_torch
def test_tensor(facts):
    f = facts("t")
    assert f.kind == "tensor" and f.shape == [2, 2] and f.dtype == "torch.float32"
    assert f.device == "cpu" and f.requires_grad is True and f.has_nan is True and f.n_nan == 1
    g = facts("labels_t")
    assert g.dtype == "torch.int64" and g.num_unique == 3 and g.value_range == [0, 2]


@needs_torch
def test_torch_module_structure(facts):
    tm = facts("net").torch_module
    assert [ly.type for ly in tm.layers] == ["Dropout", "Conv2d", "ReLU", "Flatten", "Linear"]
    assert tm.first_layer == "Conv2d" and tm.expected_input_rank == 4 and tm.expected_in_features == 1
    assert tm.layers[1].kernel_size == [3, 3] and tm.layers[4].in_features == 8 * 26 * 26
    assert tm.n_parameters == (8 * 9 + 8) + (8 * 26 * 26 * 10 + 10) and tm.training is True
    mlp = facts("mlp").torch_module
    assert mlp.expected_input_rank == 2 and mlp.expected_in_features == 20
    assert [(ly.name, ly.in_features, ly.out_features) for ly in mlp.layers] == [("fc1", 20, 16), ("out", 16, 2)]


@needs_torch
def test_dataloader(facts):
    d = facts("loader").dataloader
    assert (d.batch_size, d.num_examples, d.num_batches) == (16, 50, 4)
    assert d.dataset_type.endswith("TensorDataset")
    assert d.sample_shapes == ["[1, 28, 28]", "[]"] and d.batch_shapes == ["[16, 1, 28, 28]", "[16]"]
    assert d.sample_dtypes == ["torch.float32", "torch.int64"]


def test_estimators_fitted_and_not(facts):
    e = facts("clf").estimator
    assert e.class_name == "LogisticRegression" and e.is_fitted and e.n_features_in == 3
    assert e.classes == [0, 1] and e.params["C"] == "1.0" and "coef_" in e.fitted_attributes
    r = facts("rf").estimator
    assert r.is_fitted is False and r.n_features_in is None and r.params["n_estimators"] == "100"
    p = facts("pipe").estimator
    assert p.class_name == "Pipeline" and p.is_fitted and p.n_features_in == 3
    assert p.feature_names_in == ["a", "b", "c"]


def test_dict_bunch_defaultdict(facts):
    c = facts("cfg")
    assert c.kind == "dict" and c.length == 3 and c.keys == ["lr", "layers", "3"]
    assert c.preview == {"lr": "0.1", "layers": "[64, 32]", "3": "'three'"}
    iris = facts("iris")
    assert iris.kind == "dict" and "data" in iris.keys and iris.preview["data"] == "ndarray(shape=(150, 4), dtype=float64)"
    assert facts("counts").type == "collections.defaultdict"


def test_sequences_and_scalars(facts):
    lst = facts("lst")
    assert lst.kind == "list" and lst.length == 4 and lst.value == "[3, 1, 2, 3]" and lst.num_unique == 3
    assert lst.element_types == ["int"] * 4
    tup = facts("tup")
    assert tup.kind == "tuple" and tup.element_types == ["int", "str", "NoneType"]
    assert facts("st").kind == "set" and facts("st").length == 2
    assert facts("n_int").value == "42" and facts("n_int").kind == "scalar"
    assert facts("f_val").value == "3.5"
    assert facts("name_s").kind == "str" and facts("name_s").value == "'hello world'"


def test_modules_callables_classes(facts):
    np_ = facts("np")
    assert np_.kind == "module" and np_.module_name == "numpy"
    h = facts("helper")
    assert h.kind == "function"
    assert [(p.name, p.kind, p.has_default) for p in h.signature] == [
        ("a", "POSITIONAL_OR_KEYWORD", False),
        ("b", "POSITIONAL_OR_KEYWORD", True),
        ("args", "VAR_POSITIONAL", False),
        ("key", "KEYWORD_ONLY", True),
        ("kw", "VAR_KEYWORD", False),
    ]
    cls = facts("Thing")
    assert cls.kind == "class" and [p.name for p in cls.signature] == ["v"]
    assert facts("thing").kind == "other" and facts("thing").type == "__main__.Thing"
    assert facts("len").kind == "function"


def test_undefined_names_modules_and_paths(probe):
    res = probe.run(
        ProbeRequest(
            time_budget_ms=NO_TIME_CAP,
            names=["df", "undefined_thing", "print"],
            modules=["numpy", "sklearn.linear_model", "no_such_module_xyz", "sklearn.no_such_sub", "json"],
            paths=["data/train.csv", "data/Train.csv", "data/test.csv", "missing_dir/x.csv"],
        )
    )
    assert res.undefined == ["undefined_thing"]
    assert res.modules == {
        "numpy": True, "sklearn.linear_model": True, "no_such_module_xyz": False, "sklearn.no_such_sub": False,
        "json": True,
    }  # fmt: skip
    assert "numpy" in res.imported_modules and "no_such_module_xyz" not in res.imported_modules
    assert res.paths == {"data/train.csv": True, "data/Train.csv": False, "data/test.csv": False, "missing_dir/x.csv": False}
    assert res.path_suggestions["data/Train.csv"] == ["data/train.csv"]
    assert res.cwd and res.libraries["numpy"] and res.libraries["sklearn"]
    assert bool(res.libraries.get("torch")) == HAS_TORCH


def test_module_not_yet_imported_is_found_without_importing(probe, watcher):
    mods = ["wsgiref.simple_server", "wave", "wsgiref.no_such_sub"]
    before = watcher.evaluate(f"[m in __import__('sys').modules for m in {mods!r}]")
    assert before == "[False, False, False]"
    res = probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, modules=mods))
    assert res.modules == {"wsgiref.simple_server": True, "wave": True, "wsgiref.no_such_sub": False}
    assert res.imported_modules == []
    assert watcher.evaluate(f"[m in __import__('sys').modules for m in {mods + ['wsgiref']!r}]") == "[False] * 4".replace(
        "[False] * 4", "[False, False, False, False]"
    )


def test_attribute_checks(probe):
    res = probe.run(
        ProbeRequest(
            time_budget_ms=NO_TIME_CAP,
            attrs=[
                "clf.coef_", "rf.feature_importances_", "rf.coef_", "clf.predict", "plt.scatter", "np.float",
                "np.nosuchthing", "df.age", "df.agee", "df.shape", "df.shape.x", "thing.v",
                "thing.method", "thing.nope", "iris.data", "Thing.method", "undefined_root.x",
                *torch_only("mlp.fc1", "mlp.fc3"),
            ]
        )
    )
    a = {c.expr: c for c in res.attrs}
    assert a["clf.coef_"].present and a["clf.coef_"].facts.shape == [1, 3]
    assert a["rf.feature_importances_"].present is True  # a property: it exists (it raises until fitted)
    assert a["rf.coef_"].present is False
    assert [p.name for p in a["clf.predict"].signature] == ["X"]
    scatter = [p.name for p in a["plt.scatter"].signature]
    assert scatter[:3] == ["x", "y", "s"] and a["plt.scatter"].owner_type == "module"
    assert a["np.float"].present is False and "builtin" in a["np.float"].message
    assert a["np.nosuchthing"].present is False
    assert a["df.age"].present and a["df.age"].facts.kind == "series" and a["df.age"].facts.n_nan == 2
    assert a["df.agee"].present is False and "age" in a["df.agee"].suggestions
    assert a["df.shape"].present is True and a["df.shape.x"].present is None
    if HAS_TORCH:
        assert a["mlp.fc1"].present and a["mlp.fc1"].facts.torch_module.layers[0].in_features == 20
        assert a["mlp.fc3"].present is False and "fc1" in a["mlp.fc3"].suggestions
    assert a["thing.v"].facts.value == "5"
    assert [p.name for p in a["thing.method"].signature] == ["x", "y"]
    assert a["thing.nope"].present is False
    assert a["iris.data"].present and a["iris.data"].facts.shape == [150, 4]
    assert [p.name for p in a["Thing.method"].signature] == ["self", "x", "y"]
    assert a["undefined_root.x"].present is None


def test_key_checks(probe):
    res = probe.run(
        ProbeRequest(
            time_budget_ms=NO_TIME_CAP,
            keys=[
                ["df", "age", "columns"], ["df", "Age", "columns"], ["df", 3, "index"], ["df", 99, "index"],
                ["df_idx", "y", "index"], ["s", 20, "key"], ["cfg", "lr", "key"], ["cfg", 3, "key"],
                ["cfg", "LR", "key"], ["counts", "x", "key"], ["lst", 4, "key"], ["lst", -4, "key"],
                ["X", 40, "index"], ["undefined_root", "a", "key"], ["iris", "target", "key"],
            ]
        )
    )
    k = {(c.expr, str(c.key)): c for c in res.keys}
    assert k[("df", "age")].present is True
    assert k[("df", "Age")].present is False and k[("df", "Age")].suggestions == ["age"]
    assert k[("df", "3")].present is True and k[("df", "99")].present is False
    assert k[("df_idx", "y")].present is True and k[("s", "20")].present is True
    assert k[("cfg", "lr")].present is True and k[("cfg", "3")].present is True
    assert k[("cfg", "LR")].present is False and k[("cfg", "LR")].suggestions == ["lr"]
    assert k[("counts", "x")].present is False and k[("counts", "x")].missing_ok is True
    assert k[("lst", "4")].present is False and k[("lst", "4")].length == 4 and k[("lst", "-4")].present is True
    assert k[("X", "40")].present is False
    assert k[("undefined_root", "a")].present is None
    assert k[("iris", "target")].present is True
