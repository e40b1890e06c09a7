"""The flow-sensitive abstract evaluator, on hand-built kernel facts (no kernel needed for the evaluator)."""

import ast

from crane.analysis.cell import analyze_cell
from crane.analysis.flow import evaluate_cell
from crane.probe.facts import ColumnFacts, EstimatorFacts, Facts, IndexFacts, ProbeResult

DF = Facts(
    name="df", type="pandas.core.frame.DataFrame", kind="dataframe", shape=[100, 3], length=100, has_nan=True, n_nan=5,
    index=IndexFacts(type="RangeIndex", dtype="int64", length=100),
    columns=[
        ColumnFacts(name="a", dtype="int64"),
        ColumnFacts(name="b", dtype="float64", n_nan=5),
        ColumnFacts(name="s", dtype="object", numeric_parse="none", non_numeric_example="x"),
    ],
)
MODEL = Facts(name="model", type="sklearn.svm._classes.SVC", kind="estimator",
              estimator=EstimatorFacts(class_name="SVC", module="sklearn.svm._classes", is_fitted=False))


def flow_of(src, **facts):
    facts = facts or {"df": DF, "model": MODEL}
    a = analyze_cell(src)
    return a, evaluate_cell(a, ProbeResult(facts=facts))


def value_at(src, line, expr=None, **facts):
    """Value of the (first) expression statement on `line`, or of the node whose text is `expr` there."""
    a, flow = flow_of(src, **facts)
    for node in ast.walk(a.tree):
        if getattr(node, "lineno", None) == line and isinstance(node, ast.expr):
            if expr is None or ast.unparse(node) == expr:
                return flow.value(node)
    raise AssertionError("no such node")


def test_live_value_until_rebound():
    assert value_at("df\ndf = 1\ndf", 1) is DF
    assert value_at("df\ndf = 1\ndf", 3).kind == "scalar"


def test_column_and_subframe():
    s = value_at("df['b']", 1)
    assert s.kind == "series" and s.dtype == "float64" and s.n_nan == 5 and s.length == 100
    sub = value_at("df[['a', 's']]", 1)
    assert [c.name for c in sub.columns] == ["a", "s"] and sub.shape == [100, 2]
    assert value_at("df['zz']", 1) is None  # unknown, not a guess


def test_drop_fillna_dropna_values():
    src = "x = df.drop(columns=['s'])\nx\ny = x.fillna(0)\ny\nz = df.dropna()\nz\nv = x.values\nv\nw = df.values\nw"
    x = value_at(src, 2)
    assert [c.name for c in x.columns] == ["a", "b"]
    assert value_at(src, 4).has_nan is False and all(c.n_nan == 0 for c in value_at(src, 4).columns)
    z = value_at(src, 6)
    assert z.has_nan is False and z.shape is None and z.truncated
    v = value_at(src, 8)
    assert v.kind == "ndarray" and v.dtype == "float64" and v.shape == [100, 2]
    w = value_at(src, 10)
    assert w.dtype == "object" and w.numeric_parse == "some" and w.non_numeric_example == "x"


def test_inplace_and_column_assignment():
    src = "df.drop('a', axis=1, inplace=True)\ndf\ndf['new'] = df['b']\ndf"
    assert [c.name for c in value_at(src, 2).columns] == ["b", "s"]
    cols = value_at(src, 4).columns
    assert [c.name for c in cols] == ["b", "s", "new"] and cols[-1].dtype == "float64"


def test_mutations_make_value_unknown():
    for src in ["df.x = 1\ndf", "df.insert(0, 'q', 1)\ndf", "df += 1\ndf", "clean(df)\ndf",
                "for i in range(3):\n    df = df.drop('a', axis=1)\ndf"]:
        last = src.count("\n") + 1
        assert value_at(src, last) is None, src
    assert value_at("import numpy as np\nnp.mean(df)\ndf", 3) is DF  # library calls do not mutate
    assert value_at("print(df.shape)\ndf", 2) is DF


def test_branches_merge_to_unknown_unless_equal():
    assert value_at("if c:\n    df = 1\ndf", 3) is None
    assert value_at("if c:\n    print(1)\ndf", 3) is DF


def test_reshape_and_train_test_split():
    arr = Facts(name="arr", type="numpy.ndarray", kind="ndarray", shape=[10], dtype="float64")
    assert value_at("arr.reshape(-1, 1)", 1, arr=arr).shape == [10, 1]
    src = ("from sklearn.model_selection import train_test_split\n"
           "X_tr, X_te, y_tr, y_te = train_test_split(df, arr, test_size=0.2)\nX_tr\ny_te")
    a, flow = flow_of(src, df=DF, arr=arr)
    assert flow.value(a.tree.body[2].value) is None  # 100 vs 10 rows: it raises, no value
    arr = Facts(name="arr", type="numpy.ndarray", kind="ndarray", shape=[100], dtype="float64")
    a, flow = flow_of(src, df=DF, arr=arr)
    xtr = flow.value(a.tree.body[2].value)
    yte = flow.value(a.tree.body[3].value)
    assert xtr.shape == [80, 3] and [c.name for c in xtr.columns] == ["a", "b", "s"]
    assert yte.shape == [20] and yte.kind == "ndarray"


def test_fit_marks_estimator_fitted():
    src = "model.fit(X, y)\nmodel"
    assert value_at(src, 2).estimator.is_fitted is True


def test_comprehension_locals_shadow_globals():
    a, flow = flow_of("[df for df in things]")
    name = a.tree.body[0].value.elt
    assert flow.value(name) is None


def test_is_live():
    a, flow = flow_of("df['a']\ndf = df.copy()\ndf['a']")
    first, last = a.tree.body[0].value, a.tree.body[2].value
    assert flow.is_live("df", first) and not flow.is_live("df", last)
