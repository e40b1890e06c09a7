"""Static cell analysis: IPython syntax, names in execution order, keys, paths, syntax errors, probe plans."""

from crane.analysis.cell import analyze_cell, plan_probe


def free(src):
    return analyze_cell(src).free_names


def test_assignment_value_before_target_and_augassign():
    assert free("x = x + 1") == ["x"]
    assert free("y = 1\ny += z") == ["z"]
    assert free("n += 1") == ["n"]


def test_comprehension_and_lambda_locals_are_not_free():
    assert free("[i * k for i in items if i > t]") == ["items", "t", "k"]  # filter runs first
    assert free("f = lambda a: a + hidden") == []
    assert free("{k: v for k, v in d.items()}") == ["d"]


def test_function_defined_only_does_not_count_but_called_does():
    assert free("def f():\n    return g_missing\n") == []
    a = analyze_cell("def f():\n    return g_missing + bound\nbound = 1\nf()\n")
    assert a.free_names == ["g_missing"]
    assert a.free_loads[0].via is not None
    # bound before the call, not before the def: fine
    assert free("def f():\n    return later\nlater = 2\nf()") == []


def test_del_makes_later_loads_free():
    a = analyze_cell("x = 1\ndel x\nprint(x)")
    assert [ld.name for ld in a.free_loads if ld.after_delete] == ["x"]
    assert a.deleted_names == {"x"}


def test_star_import_and_run_magic_stop_free_names():
    assert free("a1\nfrom m import *\nb1") == ["a1"]
    assert free("%run other.py\nb1") == ["get_ipython"]
    assert free("%matplotlib inline\nb1") == ["get_ipython", "b1"]


def test_imports_bind_names():
    a = analyze_cell("import numpy as np\nimport os.path\nfrom sklearn.svm import SVC\nnp, os, SVC")
    assert [n for n in a.free_names] == []
    assert [(i.module, i.bound, i.target) for i in a.imports] == [
        ("numpy", "np", "numpy"), ("os.path", "os", "os"), ("sklearn.svm", "SVC", "sklearn.svm.SVC")]


def test_class_body_runs_and_has_own_scope():
    assert free("class A:\n    x = base\n    y = x\n") == ["base"]


def test_magics_keep_original_lines():
    src = "%matplotlib inline\n!pip install foo\nimport pandas as pd\ndf = pd.read_csv('a.csv')\nmissing_name"
    a = analyze_cell(src)
    load = next(ld for ld in a.free_loads if ld.name == "missing_name")
    assert a.original_span(load.node) == (5, 0, 5, 12)


def test_cell_magic_body_is_analysed_with_offset():
    a = analyze_cell("%%time\nx = 1\ny = undefined_thing\n")
    load = next(ld for ld in a.free_loads if ld.name == "undefined_thing")
    assert a.original_span(load.node)[0] == 3
    assert analyze_cell("%%bash\necho $x\n").free_names == ["get_ipython"]


def test_syntax_errors_on_original_lines():
    a = analyze_cell("%matplotlib inline\nx = (1,\n")
    assert a.syntax_error is not None
    assert a.tree is None and a.syntax_error.line == 2
    a = analyze_cell("!ls\nreturn 3")
    assert a.syntax_error is not None
    assert a.syntax_error.line == 2 and "outside function" in a.syntax_error.message
    a = analyze_cell("if x:\nprint(1)")
    assert a.syntax_error is not None
    assert a.syntax_error.ename == "IndentationError"
    assert analyze_cell("await something()").syntax_error is None  # IPython allows top-level await


def test_literal_keys_drops_and_paths():
    a = analyze_cell(
        "df['a']\ndf[['b', 'c']]\ndf['new'] = 1\ndf.drop(columns=['d'])\ndf.drop(['e'], axis=1)\n"
        "df.drop([10])\ndf.drop('z', axis=1, errors='ignore')\nd['k'] += 1\n"
        "pd.read_csv('data/x.csv')\nopen('out.txt', 'w')\nnp.load('arr.npy')\nm.load('x')\n"
    )
    keys = [(k.expr, k.keys, k.axis, k.op) for k in a.literal_keys]
    assert keys == [
        ("df", ["a"], "key", "load"), ("df", ["b", "c"], "key", "load"), ("df", ["d"], "columns", "drop"),
        ("df", ["e"], "columns", "drop"), ("df", [10], "index", "drop"), ("d", ["k"], "key", "load"),
    ]
    modes = {(p.path, p.mode) for p in a.paths}
    assert ("data/x.csv", "read") in modes and ("out.txt", "write") in modes and ("arr.npy", "read") in modes
    assert ("x", "unknown") in modes


def test_plan_probe():
    a = analyze_cell("import sklearn, nosuch.sub\nmodel.feature_importances_\ndf['a']\nprint(len(x))\n"
                     "pd.read_csv('f.csv')\nlocal = 1\nlocal.attr")
    req = plan_probe(a)
    assert req.names == ["model", "df", "x", "pd"]
    assert req.attrs == ["model.feature_importances_", "pd.read_csv"]
    assert req.keys == [["df", "a", "key"]]
    assert req.modules == ["sklearn", "nosuch"]
    assert req.paths == ["f.csv"]


def test_plan_probe_names_the_columns_the_cell_mentions():
    a = analyze_cell("m = df['price'].mean() + df.qty.sum()\nsns.scatterplot(data=df, x='age', y=\"b\")\n"
                     "z = df[3] + df.iloc[:, -1]\ncols = ['u', 'v']\n")
    labels = plan_probe(a).columns
    assert labels is not None
    assert {"price", "qty", "age", "b", "u", "v", 3, "mean", "sum"} <= set(labels)
    assert -1 not in labels and all(type(x) in (str, int) for x in labels)
    assert plan_probe(analyze_cell("def f(:\n")).columns == []
    many = analyze_cell("x = [" + ", ".join(f"'c{i}'" for i in range(500)) + "]")
    many_labels = plan_probe(many).columns
    assert many_labels is not None and len(many_labels) == 200


def test_never_raises_on_garbage():
    for src in ["", "\x00", "(" * 500 + ")" * 500, "def f(:", "%%%", "x = '''", "\t\tx"]:
        analyze_cell(src)


def test_possibly_mutated_names_cover_in_place_changes():
    from crane.analysis.extract import possibly_mutated

    tree = analyze_cell(
        "df['c'] = 0\n"
        "m.coef_ = w\n"
        "del d[k]\n"
        "x[i] += 1\n"
        "frame.drop(columns=['a'], inplace=True)\n"
        "rng.shuffle(arr)\n"
        "for row[0] in items: pass\n"
        "y = 1\n"
        "print(z)\n"
    ).tree
    assert tree is not None
    got = possibly_mutated(tree)
    assert {"df", "m", "d", "x", "frame", "rng", "arr", "row"} <= got
    assert "y" not in got  # a plain binding is a store, not an in-place change
    assert "print" not in got and "i" not in got and "w" not in got
