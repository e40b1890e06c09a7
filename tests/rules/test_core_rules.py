"""Core rules on real kernel state (tests/rules/conftest.py): for each rule a crashing target and the closest
non-crashing one; where cheap, the crashing target is then run for real to check the predicted exception."""

import sys

from crane.analysis.scope import NotebookScope

from .conftest import predict_source, run_target

SETUP = (
    "import numpy as np, pandas as pd\n"
    "from sklearn.svm import SVC\n"
    "from sklearn.ensemble import RandomForestClassifier\n"
    "from collections import defaultdict\n"
    "df = pd.DataFrame({'a': [1, 2, 3], 'b': [0.5, None, 1.5], 's': ['x', 'y', 'z']})\n"
    "X_train = df[['a', 'b']].values\n"
    "svc = SVC()\n"
    "rf = RandomForestClassifier(n_estimators=2).fit([[0], [1]], [0, 1])\n"
    "d = {'k': 1}\n"
    "dd = defaultdict(int)\n"
)


def rules_of(findings):
    return [(f.rule, f.ename, f.line) for f in findings]


def check(kernel, target, expected, setup=SETUP, verify=True):
    findings = predict_source(kernel, setup, target)
    assert rules_of(findings)[:1] == expected[:1], findings
    if verify and expected:
        run = run_target(kernel, target)
        assert run.ename == expected[0][1], (run.ename, run.evalue)
    if verify and not expected:
        run = run_target(kernel, target)
        assert run.status == "ok", (run.ename, run.evalue)
    return findings


# -- undefined-name --------------------------------------------------------------------------------------
def test_undefined_name(kernel):
    f = check(kernel, "y = df['a'] * 2\nprint(undefined_thing)", [("undefined-name", "NameError", 2)])
    assert "undefined_thing" in f[0].message and f[0].col == 6


def test_name_defined_earlier_in_the_cell(kernel):
    check(kernel, "undefined_thing = 3\nprint(undefined_thing)", [])


def test_name_only_in_branch_or_uncalled_function_is_not_reported(kernel):
    check(kernel, "if len(df) > 100:\n    print(nope)\ndef f():\n    return nope2", [])


def test_name_used_by_called_function(kernel):
    check(kernel, "def f():\n    return nope\nf()", [("undefined-name", "NameError", 2)])


def test_deleted_name(kernel):
    check(kernel, "del d\nd['k']", [("undefined-name", "NameError", 2)])


def test_undefined_name_related_cell(kernel):
    scope = NotebookScope.from_cells([(1, 1, SETUP), (2, None, "model = svc"), (3, None, "model.fit(X_train, [0,1,0])")])
    f = predict_source(kernel, SETUP, "model.fit(X_train, [0, 1, 0])", scope=scope, target_cell=3)
    assert f[0].ename == "NameError" and f[0].related[0].cell == 2 and f[0].root_cause == "NB specific"


# -- missing-key ----------------------------------------------------------------------------------------
def test_missing_column(kernel):
    check(kernel, "df['c']", [("missing-key", "KeyError", 1)])


def test_present_column(kernel):
    check(kernel, "df['a']", [])


def test_missing_column_after_in_cell_drop(kernel):
    check(kernel, "df = df.drop(columns=['a'])\ndf['a'].sum()", [("missing-key", "KeyError", 2)])


def test_column_added_in_cell(kernel):
    check(kernel, "df['c'] = 1\ndf['c'].sum()", [])


def test_drop_missing_columns_and_index(kernel):
    check(kernel, "df.drop(['zz'], axis=1)", [("missing-key", "KeyError", 1)])
    check(kernel, "df.drop([7])", [("missing-key", "KeyError", 1)])


def test_drop_with_errors_ignore_or_present(kernel):
    check(kernel, "df.drop(['zz'], axis=1, errors='ignore')", [])
    check(kernel, "df.drop([2])", [])


def test_dict_keys(kernel):
    check(kernel, "d['z']", [("missing-key", "KeyError", 1)])
    check(kernel, "d['k']", [])
    check(kernel, "dd['z']", [])  # defaultdict: no KeyError


# -- missing-attribute ----------------------------------------------------------------------------------
def test_ndarray_has_no_join(kernel):
    check(kernel, "X_train.join(df)", [("missing-attribute", "AttributeError", 1)])


def test_dataframe_has_join(kernel):
    check(kernel, "df.join(df, rsuffix='_r')", [])


def test_attribute_of_estimator(kernel):
    check(kernel, "svc.feature_importances_", [("missing-attribute", "AttributeError", 1)])
    check(kernel, "rf.feature_importances_", [])


def test_attribute_after_rebinding_is_not_judged(kernel):
    check(kernel, "svc = rf\nsvc.feature_importances_", [])


# -- missing-module / missing-file -----------------------------------------------------------------------
def test_missing_module(kernel):
    check(kernel, "import no_such_module_xyz", [("missing-module", "ModuleNotFoundError", 1)])
    check(kernel, "try:\n    import no_such_module_xyz\nexcept ImportError:\n    pass", [])
    check(kernel, "import json", [])


def test_missing_file(kernel, kernel_cwd):
    (kernel_cwd / "present.csv").write_text("a,b\n1,2\n")
    check(kernel, "pd.read_csv('absent.csv')", [("missing-file", "FileNotFoundError", 1)])
    check(kernel, "pd.read_csv('present.csv')", [])
    check(kernel, "with open('absent.txt') as fh:\n    fh.read()", [("missing-file", "FileNotFoundError", 1)])
    check(kernel, "with open('absent_w.txt', 'w') as fh:\n    fh.write('x')", [])
    check(kernel, "df.to_csv('later.csv')\npd.read_csv('later.csv')", [])


# -- syntax-error ---------------------------------------------------------------------------------------
def test_syntax_error(kernel):
    # IPython compiles with codeop's flags: the cell ends inside the open bracket, "incomplete input" at its end
    incomplete = "SyntaxError" if sys.version_info < (3, 13) else "_IncompleteInputError"  # the kernel's Python's
    f = check(kernel, "%matplotlib inline\nx = (1,\nprint(x)", [("syntax-error", incomplete, 3)])
    assert f[0].message == f"{incomplete}: incomplete input" and "'(' was never closed (line 2)" in f[0].evidence[0]
    check(kernel, "%matplotlib inline\nx = (1,\ny = 2\n", [("syntax-error", "SyntaxError", 2)])
    check(kernel, "%matplotlib inline\nx = (1,)\nprint(x)", [], verify=False)


def test_first_crash_first(kernel):
    f = predict_source(kernel, SETUP, "a = 1\nd['z']\nprint(nope)")
    assert [x.ename for x in f] == ["KeyError", "NameError"]
