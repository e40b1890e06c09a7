"""Facts the rules need beyond values, on a real kernel: qualified names of classes and functions, whether a
signature is the callable's own (plain functions, bound methods, plain classes) or may be rewritten
(functools.wraps, matplotlib's _api decorators, partials, C code), Series names, index level names and the
dtype of a torch module's parameters. None of them may run user code."""

from __future__ import annotations

import textwrap

import pytest

from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest

from ..library_versions import HAS_TORCH, kernel_library, needs_torch
from .no_time_cap import NO_TIME_CAP

SETUP = textwrap.dedent(
    """
    import functools, numpy as np, pandas as pd
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.linear_model import LinearRegression
    from sklearn.metrics import accuracy_score
    from pandas import merge

    def helper(a, b=1, *, c):
        return a
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper
    @deco
    def wrapped(a):
        return a
    part = functools.partial(helper, 1)
    class Plain:
        def __init__(self, x, *, y=2):
            self.x = x
        def method(self, a):
            return a
    class WithNew:
        def __new__(cls, *a):
            return object.__new__(cls)
        def __init__(self, x):
            pass
    class NoInit:
        pass
    calls = []
    class Meta(type):
        def __call__(cls, *a, **k):
            calls.append("meta_call")
            return super().__call__(*a, **k)
        def __getattr__(cls, n):
            calls.append(("meta_getattr", n)); raise AttributeError(n)
    class Metaclassed(metaclass=Meta):
        def __init__(self, x):
            pass
    obj = Plain(1)
    named = pd.Series([1.0, 2.0], name="price")
    unnamed = pd.Series([1, 2])
    int_named = pd.Series([1, 2], name=3)
    frame = pd.DataFrame({"k": [1, 2], "v": [3, 4]}).set_index("k")
    multi = pd.DataFrame({"a": [1, 2], "b": [3, 4], "v": [5, 6]}).set_index(["a", "b"])
    flat = pd.DataFrame({"v": [1, 2]})
    calls.clear()
    """
)
TORCH_SETUP = textwrap.dedent(
    """
    import torch
    lin32 = torch.nn.Sequential(torch.nn.Linear(3, 2))
    lin64 = torch.nn.Linear(3, 2).double()
    mixed = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2).double())
    """
)


@pytest.fixture(scope="module")
def client(start, tmp_path_factory):
    k = start(tmp_path_factory.mktemp("probe-callables"))
    run = k.connection.run_cell(SETUP + (TORCH_SETUP if HAS_TORCH else ""), timeout=120)
    assert run.status == "ok", (run.ename, run.evalue)
    yield ProbeClient(k.connection)
    k.shutdown()


def facts(client, *names):
    res = client.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=list(names)))
    assert not res.errors, res.errors
    return [res.facts[n] for n in names]


def attr(client, expr):
    res = client.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, attrs=[expr]))
    assert not res.errors, res.errors
    return res.attrs[0]


def test_qualified_and_public_names(client):
    lr, acc, mg, hp = facts(client, "LinearRegression", "accuracy_score", "merge", "helper")
    assert (lr.kind, lr.qualname, lr.public_name) == (
        "class", "sklearn.linear_model._base.LinearRegression", "sklearn.linear_model.LinearRegression")
    assert acc.qualname == "sklearn.metrics._classification.accuracy_score"
    assert acc.public_name == "sklearn.metrics.accuracy_score"
    assert (mg.qualname, mg.public_name) == ("pandas.core.reshape.merge.merge", "pandas.merge")
    assert (hp.qualname, hp.public_name) == ("__main__.helper", None)
    (length,) = facts(client, "len")
    assert length.qualname == "len" and length.public_name is None


def test_own_signatures(client):
    hp, plain, meth = facts(client, "helper", "Plain", "obj")[0], facts(client, "Plain")[0], attr(client, "obj.method")
    assert hp.signature_own and hp.signature_name == "helper" and hp.signature_bound == 0
    assert [p.name for p in hp.signature] == ["a", "b", "c"]
    assert plain.signature_own and plain.signature_name == "Plain.__init__" and plain.signature_bound == 1
    assert [p.name for p in plain.signature] == ["x", "y"]
    assert meth.present and meth.signature_own and meth.signature_name == "Plain.method"
    assert meth.signature_bound == 1 and [p.name for p in meth.signature] == ["a"]
    (lr,) = facts(client, "LinearRegression")
    assert lr.signature_own and lr.signature_name == "LinearRegression.__init__"


@pytest.mark.parametrize("name", ["wrapped", "part", "WithNew", "NoInit", "Metaclassed", "len"])
def test_signatures_that_may_be_rewritten_are_not_own(client, name):
    (f,) = facts(client, name)
    assert not f.signature_own and f.signature_name is None


# matplotlib's _api.make_keyword_only wraps plt.figure up to 3.7 (facecolor) and Axes.get_tightbbox from 3.8
# (call_axes_locator); from 3.8 plt.figure is a plain function (pyplot.figure below)
MPL_3_8 = kernel_library("matplotlib") >= (3, 8)
KEYWORD_ONLY_WRAPPED = "plt.Axes.get_tightbbox" if MPL_3_8 else "plt.figure"


@pytest.mark.parametrize("expr", [KEYWORD_ONLY_WRAPPED, "plt.Axes.scatter"])
def test_matplotlib_decorated_functions_are_not_own(client, expr):
    chk = attr(client, expr)
    assert chk.present and chk.signature and not chk.signature_own


def test_pyplot_function_without_decorators_is_own(client):
    chk = attr(client, "plt.hist")
    assert chk.signature_own and chk.signature_name == "hist" and chk.qualname == "matplotlib.pyplot.hist"
    if MPL_3_8:
        chk = attr(client, "plt.figure")
        assert chk.signature_own and chk.signature_name == "figure" and chk.qualname == "matplotlib.pyplot.figure"


def test_metaclass_code_never_runs(client):
    facts(client, "Metaclassed")
    attr(client, "Metaclassed.nothing_here")
    assert client.conn.evaluate("calls") == []


def test_series_names(client):
    named, unnamed, int_named = facts(client, "named", "unnamed", "int_named")
    assert (named.series_name, named.has_name) == ("price", True)
    assert (unnamed.series_name, unnamed.has_name) == (None, False)
    assert (int_named.series_name, int_named.has_name) == ("3", True)
    col = attr(client, "flat.v")
    assert col.facts.series_name == "v" and col.facts.has_name is True


def test_index_level_names(client):
    frame, multi, flat, named = facts(client, "frame", "multi", "flat", "named")
    assert frame.index.names == ["k"] and frame.index.type == "Index"
    assert multi.index.names == ["a", "b"] and multi.index.type == "MultiIndex"
    assert flat.index.names == [None] and flat.index.type == "RangeIndex"
    assert named.index.names == [None]


@needs_torch
def test_torch_parameter_dtype(client):
    lin32, lin64, mixed = facts(client, "lin32", "lin64", "mixed")
    assert lin32.torch_module.dtype == "torch.float32" and not lin32.torch_module.mixed_dtypes
    assert lin64.torch_module.dtype == "torch.float64"
    assert mixed.torch_module.dtype is None and mixed.torch_module.mixed_dtypes
