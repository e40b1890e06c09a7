"""Pure scikit-learn checks over hand-built Facts (no kernel): each crash kind and its non-crashing twin."""

from __future__ import annotations

import pytest

from crane.probe.facts import ColumnFacts, EstimatorFacts, Facts
from crane.rulekit import sklearn_checks as C
from crane.rulekit import sklearn_params as P
from crane.rulekit import sklearn_tables as T
from crane.rules.sklearn_rules import classification_mix, split_sizes

DF = "pandas.core.frame.DataFrame"
SER = "pandas.core.series.Series"


def frame(rows, cols, truncated=False):
    return Facts(name="X", type=DF, kind="dataframe", shape=[rows, len(cols)], length=rows, columns=cols,
                 truncated=truncated)


def num(name, n_nan=0):
    return ColumnFacts(name=name, dtype="float64", n_nan=n_nan)


def text(name, parse="none", example="'Rue 12'", position=0):
    return ColumnFacts(name=name, dtype="object", numeric_parse=parse, non_numeric_example=example,
                       non_numeric_position=position)


def series(n, dtype="int64", **kw):
    return Facts(name="y", type=SER, kind="series", length=n, shape=[n], dtype=dtype, **kw)


def array(shape, dtype="float64", **kw):
    return Facts(name="a", type="numpy.ndarray", kind="ndarray", shape=list(shape), dtype=dtype, **kw)


LR = EstimatorFacts(class_name="LinearRegression", module="sklearn.linear_model._base", is_fitted=False)
RF = EstimatorFacts(class_name="RandomForestClassifier", module="sklearn.ensemble._forest", is_fitted=False)
HGB = EstimatorFacts(class_name="HistGradientBoostingRegressor",
                     module="sklearn.ensemble._hist_gradient_boosting.gradient_boosting", is_fitted=False)
ENC = EstimatorFacts(class_name="OneHotEncoder", module="sklearn.preprocessing._encoders", is_fitted=False)


def test_tables_are_conservative():
    assert T.needs_numeric_x("LinearRegression", "sklearn.linear_model._base")
    assert T.needs_numeric_x("StandardScaler", "sklearn.preprocessing._data")
    assert not T.needs_numeric_x("OneHotEncoder", "sklearn.preprocessing._encoders")
    assert not T.needs_numeric_x("Pipeline", "sklearn.pipeline")
    assert not T.needs_numeric_x("MyModel", "mylib.models")
    assert T.rejects_nan("DecisionTreeClassifier", "sklearn.tree._classes", "1.2.2")
    assert not T.rejects_nan("DecisionTreeClassifier", "sklearn.tree._classes", "1.4.0")  # NaN support since 1.3
    assert not T.rejects_nan("HistGradientBoostingClassifier", "sklearn.ensemble._hist_gradient_boosting", "1.2.2")
    assert not T.rejects_nan("StandardScaler", "sklearn.preprocessing._data", "1.2.2")
    assert T.is_regressor("Ridge", "sklearn.linear_model._ridge")
    assert not T.is_regressor("LogisticRegression", "sklearn.linear_model._logistic")
    assert not T.is_supervised("KMeans", "sklearn.cluster._kmeans")
    assert not T.raises_not_fitted("FunctionTransformer", "sklearn.preprocessing._function_transformer")


def test_unfitted_predict_crashes_and_fitted_does_not():
    v = C.check_not_fitted("m", RF, "predict")
    assert v and v.ename == "NotFittedError" and "RandomForestClassifier" in v.message
    fitted = EstimatorFacts(class_name="RandomForestClassifier", module="sklearn.ensemble._forest", is_fitted=True)
    assert C.check_not_fitted("m", fitted, "predict") is None
    assert C.check_not_fitted("m", RF, "fit") is None
    stateless = EstimatorFacts(class_name="Normalizer", module="sklearn.preprocessing._data", is_fitted=False)
    assert C.check_not_fitted("m", stateless, "transform") is None


def test_string_columns_crash_numeric_estimators_only():
    x = frame(10, [num("area"), text("street")])
    v = C.check_x("X_train", x, LR, "fit", "1.2.2")
    assert v and v.ename == "ValueError" and v.message == "could not convert string to float: 'Rue 12'"
    assert "street (object, 'Rue 12')" in v.evidence[0]
    assert C.check_x("X_train", x, ENC, "fit", "1.2.2") is None  # encoders take strings
    ok = frame(10, [num("area"), text("zip", parse="all", example=None)])
    assert C.check_x("X_train", ok, LR, "fit", "1.2.2") is None  # "12" converts to float


def test_the_value_is_named_as_the_first_only_when_it_is():
    # the kernel names the first value that does not convert: the probe's example is that one only when it read
    # every row (it found the row) and the rows are all there in their order (the first text column's then: pandas
    # converts a frame column by column)
    hedged = [
        ("X_train", frame(10, [text("street", position=None)]), "not every row was read"),
        ("X_tr", frame(10, [text("street")], truncated=True), "X_tr is a subset of rows, whose order only a run shows"),
    ]
    for label, x, why in hedged:
        v = C.check_x(label, x, LR, "fit", "1.2.2")
        assert v and v.ename == "ValueError", (label, why)
        assert v.message == (f"could not convert string to float: a text value of {label} such as 'Rue 12' (which one "
                             f"comes first is known only when the cell runs: {why})"), v.message
    v = C.check_x("X_train", frame(10, [text("street"), text("city", example="'Paris'")]), LR, "fit", "1.2.2")
    assert v and v.message == "could not convert string to float: 'Rue 12'"


def test_row_subsets_only_trust_columns_where_nothing_parses():
    some = frame(10, [text("id", parse="some", example="'Order ID'")], truncated=True)
    assert C.check_x("X", some, LR, "fit", "1.2.2") is None
    none = frame(10, [text("city", parse="none", example="'Paris'")], truncated=True)
    assert C.check_x("X", none, LR, "fit", "1.2.2") is not None


def test_non_string_bad_values_are_not_called_value_errors():
    x = frame(5, [text("when", example="Timestamp('2020-01-01 00:00:00')")])
    assert C.check_x("X", x, LR, "fit", "1.2.2") is None


def test_nan_depends_on_estimator_and_version():
    x = frame(10, [num("a"), num("b", n_nan=3)])
    tree = EstimatorFacts(class_name="DecisionTreeRegressor", module="sklearn.tree._classes", is_fitted=False)
    v = C.check_x("X", x, tree, "fit", "1.2.2")
    assert v and v.message.startswith("Input X contains NaN.")
    assert C.check_x("X", x, tree, "fit", "1.5.0") is None
    assert C.check_x("X", x, HGB, "fit", "1.2.2") is None
    assert C.check_x("X", frame(10, [num("a"), num("b")]), tree, "fit", "1.2.2") is None


def test_one_dimensional_and_empty_x():
    v = C.check_x("x", series(10, dtype="float64"), LR, "fit", "1.2.2")
    assert v and v.message.startswith("Expected 2D array, got 1D array instead")
    v = C.check_x("x", array((0, 1)), LR, "fit", "1.2.2")
    assert v and "Found array with 0 sample(s) (shape=(0, 1))" in v.message
    assert C.check_x("x", array((5, 1)), LR, "fit", "1.2.2") is None


def test_y_strings_only_matter_for_regressors():
    y = series(10, dtype="object", numeric_parse="none", non_numeric_example="'No'", non_numeric_position=3)
    v = C.check_y("y", y, LR, "fit")
    assert v and v.message == "could not convert string to float: 'No'"
    logreg = EstimatorFacts(class_name="LogisticRegression", module="sklearn.linear_model._logistic",
                            is_fitted=False)
    assert C.check_y("y", y, logreg, "fit") is None
    v = C.check_y("y", series(10, n_nan=2), logreg, "fit")
    assert v and v.message == "Input y contains NaN."


def test_inconsistent_lengths():
    v = C.check_lengths(["X", "y"], [array((68, 3)), series(272)], "LinearRegression")
    assert v and v.message == "Found input variables with inconsistent numbers of samples: [68, 272]"
    assert C.check_lengths(["X", "y"], [array((68, 3)), series(68)], "LinearRegression") is None
    assert C.check_lengths(["X", "y"], [array((68, 3)), Facts(name="y", type="list", kind="list")], "m") is None


def test_feature_names_and_counts_at_predict():
    est = EstimatorFacts(class_name="RandomForestRegressor", module="sklearn.ensemble._forest", is_fitted=True,
                         n_features_in=3, feature_names_in=["a", "b", "c"])
    v = C.check_feature_names("test", frame(5, [num("a"), num("b")]), est, "predict")
    assert v and "seen at fit time, yet now missing: - c" in v.message
    v = C.check_feature_names("test", frame(5, [num("b"), num("a"), num("c")]), est, "predict")
    assert v and "same order" in v.message
    assert C.check_feature_names("test", frame(5, [num("a"), num("b"), num("c")]), est, "predict") is None
    # integer column labels: no feature names, sklearn only warns; the count still decides
    assert C.check_feature_names("test", frame(5, [num("0"), num("1"), num("2")]), est, "predict") is None
    v = C.check_n_features("arr", array((5, 4)), est, "predict")
    assert v and v.message == "X has 4 features, but RandomForestRegressor is expecting 3 features as input."
    assert C.check_n_features("arr", array((5, 3)), est, "predict") is None


def test_classification_metric_given_feature_matrix():
    x = frame(100, [num("a"), num("b"), num("c")])
    y = series(100, num_unique=8)
    v = classification_mix(["x", "y"], [x, y])
    assert v and v.message == ("Classification metrics can't handle a mix of continuous-multioutput and "
                               "multiclass targets")
    assert classification_mix(["p", "y"], [series(100, num_unique=8), y]) is None
    one_col = frame(100, [num("pred")])
    assert classification_mix(["p", "y"], [one_col, y]) is None


def test_split_sizes():
    v = split_sizes(0, 0.2, None)
    assert v and v.message.startswith("With n_samples=0, test_size=0.2 and train_size=None")
    assert split_sizes(100, 0.2, None) is None
    assert split_sizes(1, 0.5, None) is not None  # 1 test sample, 0 train samples
    v = split_sizes(3, 5, None)
    assert v and "test_size=5 should be either positive and smaller than the number of samples 3" in v.message


@pytest.mark.parametrize(
    "params, message",
    [
        ({"solver": "liblinear", "penalty": "elasticnet"}, "Only 'saga' solver supports elasticnet penalty"),
        ({"penalty": "l1"}, "Solver lbfgs supports only 'l2' or 'none' penalties, got l1 penalty."),
        ({"solver": "saga", "dual": True}, "Solver saga supports only dual=False"),
    ],
)
def test_logistic_regression_cross_params(params, message):
    v = P.check_cross_params("LogisticRegression", params, "1.2.2")
    assert v and v.message.startswith(message)


def test_logistic_regression_valid_combinations():
    for params in ({"solver": "liblinear", "penalty": "l1"}, {"solver": "saga", "penalty": "elasticnet",
                                                               "l1_ratio": 0.5}, {}, {"penalty": None}):
        assert P.check_cross_params("LogisticRegression", params, "1.2.2") is None


def test_linear_svc_penalty_loss():
    v = P.check_cross_params("LinearSVC", {"penalty": "l1"}, "1.2.2")
    assert v and "are not supported when dual=True" in v.message
    assert P.check_cross_params("LinearSVC", {"penalty": "l1", "dual": False}, "1.2.2") is None


def test_own_validation_same_version_only():
    version = P.local_sklearn_version()
    v = P.check_own_validation("sklearn.ensemble", "RandomForestRegressor", {"criterion": "mse"}, version)
    assert v and v.ename == "InvalidParameterError" and "'criterion' parameter" in v.message
    assert P.check_own_validation("sklearn.ensemble", "RandomForestRegressor", {"criterion": "squared_error"},
                                  version) is None
    assert P.check_own_validation("sklearn.ensemble", "RandomForestRegressor", {"criterion": "mse"}, "0.0.1") is None


def test_param_reprs_skip_truncated_values():
    assert P.params_from_reprs({"C": "1.0", "hidden": "[1, 2, ...]", "est": "SVC()"}) == {"C": 1.0}
