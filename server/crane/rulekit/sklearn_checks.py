"""Pure scikit-learn checks over runtime Facts: what `est.<method>(X, y)` raises, decided from the facts of
the estimator and its inputs alone (no kernel, no context). Each returns a Verdict or None (cannot decide).

The order of the checks follows scikit-learn 1.2's own validation order (check_is_fitted, then check_array:
conversion to float, 2-D, NaN, minimum samples; then y; then consistent lengths), so that the predicted
message is the one the real call raises first.
"""

from __future__ import annotations

import re

from crane.probe.facts import EstimatorFacts, Facts
from crane.rulekit import sklearn_tables as T
from crane.rulekit.lib_helpers import (
    Verdict,
    bad_columns,
    column_names,
    describe,
    is_array_like,
    is_dataframe,
    is_series,
    n_columns,
    n_samples,
    nan_count,
    ndim,
    non_numeric_text,
    shape_of,
    shape_text,
)
from crane.rulekit.python_versions import parse_version


def estimator_line(label: str, est: EstimatorFacts) -> str:
    state = "fitted" if est.is_fitted else "not fitted"
    text = f"{label}: {est.class_name} ({est.module.split('._')[0]}), {state}"
    if est.is_fitted and est.n_features_in is not None:
        text += f", {est.n_features_in} features seen in fit"
    return text


def check_not_fitted(label: str, est: EstimatorFacts, method: str) -> Verdict | None:
    """`est.predict(...)` (or transform/score/...) on an estimator that was never fitted."""
    if est.is_fitted or method not in T.PREDICT_METHODS:
        return None
    boost = {"xgboost": "need to call fit or load_model beforehand",
             "lightgbm": "Estimator not fitted, call fit before exploiting the model."}  # fmt: skip
    lib = est.module.split(".")[0]
    if lib in boost and est.class_name.startswith(("XGB", "LGBM")) and method in ("predict", "predict_proba"):
        # their sklearn wrappers raise sklearn's NotFittedError with their own text (xgboost 3.2, LightGBM 4.7)
        return Verdict("NotFittedError", boost[lib], "API misuse", [estimator_line(label, est)], 0.9)
    if not T.raises_not_fitted(est.class_name, est.module):
        return None
    return Verdict(
        "NotFittedError",
        f"This {est.class_name} instance is not fitted yet. Call 'fit' with appropriate arguments before "
        f"using this estimator.",
        "API misuse",
        [estimator_line(label, est)],
        0.9,
    )


def _non_numeric(x: Facts) -> tuple[str, list] | None:
    """(first bad value, [(column, example)...]) when X holds values float() rejects."""
    if is_dataframe(x):
        bad = bad_columns(x)
        if bad:
            return bad[0][1], bad
        return None
    example = non_numeric_text(x, x.truncated)
    if example is not None:
        return example, []
    return None


def _convert_message(label: str, x: Facts, example: str, cols: list) -> str:
    """numpy's words for the first value that does not convert. pandas converts a frame column by column (its
    text columns, one block, in their order), an array in its order: the value is the first column's example when
    that is the first in row order — all rows read (the probe found its row), not a row subset (a shuffled
    split's first row is known only by running). Otherwise the example is named as one, and why the first is not
    known."""
    if x.truncated:
        why = f"{label} is a subset of rows, whose order only a run shows"
    elif (cols[0][0] if cols else x).non_numeric_position is None:
        why = "not every row was read"
    else:
        return f"could not convert string to float: {example!r}"
    return (f"could not convert string to float: a text value of {label} such as {example!r} (which one comes first "
            f"is known only when the cell runs: {why})")


def one_d_message(x: Facts, version: str | None) -> str:
    """check_array's words for a 1-D X on the kernel's scikit-learn: from 1.4 a pandas Series is "Expected a
    2-dimensional container", naming its class as the kernel's repr does (`<class 'pandas.core.series.Series'>` on
    pandas 2, `<class 'pandas.Series'>` on pandas 3: the probe's type name); an array (a Series before 1.4) "Expected
    2D array", whose printed values the facts do not carry: left out. An unknown version is a current one."""
    found = parse_version(version)
    if is_series(x) and (found is None or found >= (1, 4)):
        return (f"Expected a 2-dimensional container but got <class '{x.type}'> instead. Pass a DataFrame "
                "containing a single row (i.e. single sample) or a single column (i.e. single feature) instead.")
    return ("Expected 2D array, got 1D array instead. Reshape your data either using array.reshape(-1, 1) if your "
            "data has a single feature or array.reshape(1, -1) if it contains a single sample.")


def check_x(label: str, x: Facts, est: EstimatorFacts, method: str, version: str | None) -> Verdict | None:
    """X given to a numeric estimator: strings, 1-D, NaN, no samples."""
    if not T.needs_numeric_x(est.class_name, est.module) or method not in T.X_METHODS:
        return None
    if not is_array_like(x):
        return None
    est_line = estimator_line("estimator", est)
    bad = _non_numeric(x)
    if bad is not None:
        example, cols = bad
        ev = [describe(label, x, cols), est_line]
        msg = _convert_message(label, x, example, cols) if example else "could not convert string to float"
        return Verdict("ValueError", msg, "data confusion" if cols else "API misuse", ev, 0.9)
    if ndim(x) == 1:
        return Verdict("ValueError", one_d_message(x, version), "API misuse", [describe(label, x), est_line], 0.85)
    if T.rejects_nan(est.class_name, est.module, version):
        n = nan_count(x)
        if n and not x.truncated:
            cols = [(c, None) for c in (x.columns or []) if c.n_nan]
            return Verdict(
                "ValueError",
                f"Input X contains NaN. {est.class_name} does not accept missing values encoded as NaN natively.",
                "data confusion",
                [describe(label, x, cols) + f" ({n} NaN)", est_line],
                0.85,
            )
    rows = n_samples(x)
    if rows == 0:
        shp = shape_of(x)
        return Verdict(
            "ValueError",
            f"Found array with 0 sample(s) (shape={shape_text(shp)}) while a minimum of 1 is required by "
            f"{est.class_name}.",
            "data confusion",
            [describe(label, x), est_line],
            0.9,
        )
    return None


def check_y(label: str, y: Facts, est: EstimatorFacts, method: str) -> Verdict | None:
    """y given to fit: strings for a regressor, NaN."""
    if method not in T.FIT_METHODS or not T.is_supervised(est.class_name, est.module):
        return None
    if not is_array_like(y):
        return None
    est_line = estimator_line("estimator", est)
    if T.is_regressor(est.class_name, est.module):
        bad = _non_numeric(y)
        if bad is not None:
            return Verdict(
                "ValueError",
                _convert_message(label, y, bad[0], bad[1]),
                "data confusion",
                [describe(label, y, bad[1]), est_line],
                0.85,
            )
    n = nan_count(y)
    if n and not y.truncated and (is_series(y) or ndim(y) == 1):
        return Verdict("ValueError", "Input y contains NaN.", "data confusion",
                       [describe(label, y) + f" ({n} NaN)", est_line], 0.85)
    return None


def check_lengths(labels: list[str], values: list[Facts], what: str, root_cause: str = "data confusion") -> Verdict | None:
    """sklearn's check_consistent_length: all inputs must have the same number of samples."""
    counts = [n_samples(v) for v in values]
    if len(values) < 2 or any(c is None for c in counts) or len(set(counts)) == 1:
        return None
    ev = [describe(lbl, v) for lbl, v in zip(labels, values, strict=False)]
    return Verdict(
        "ValueError",
        f"Found input variables with inconsistent numbers of samples: {counts}",
        root_cause,
        ev + [what],
        0.9,
    )


_NON_STR_NAME = re.compile(r"^(-?\d+(\.\d*)?|\(.*\)|None|True|False|Timestamp\(.*\))$")


def _judged_at_predict(est: EstimatorFacts, method: str) -> bool:
    return (est.is_fitted and method in T.PREDICT_METHODS and method != "inverse_transform"
            and T.needs_numeric_x(est.class_name, est.module) and not est.class_name.startswith("Dummy"))


def check_feature_names(label: str, x: Facts, est: EstimatorFacts, method: str) -> Verdict | None:
    """predict-time DataFrame columns against the feature names seen in fit (checked before conversion)."""
    if not _judged_at_predict(est, method):
        return None
    names = column_names(x)
    fit_names = est.feature_names_in
    if names is None or fit_names is None or names == list(fit_names):
        return None
    if any(_NON_STR_NAME.match(n) for n in names):
        return None  # non-string labels: X has no feature names, sklearn only warns
    unseen = sorted(set(names) - set(fit_names))
    missing = sorted(set(fit_names) - set(names))

    def listed(found: list[str]) -> str:  # scikit-learn's own list: sorted, five at most
        return "".join(f" - {n}" for n in found[:5]) + (" - ..." if len(found) > 5 else "")

    # scikit-learn's message (the same from 1.0 to 1.9), its line breaks as spaces
    message = "The feature names should match those that were passed during fit."
    if unseen:
        message += " Feature names unseen at fit time:" + listed(unseen)
    if missing:
        message += " Feature names seen at fit time, yet now missing:" + listed(missing)
    if not unseen and not missing:
        message += " Feature names must be in the same order as they were in fit."
    return Verdict(
        "ValueError",
        message,
        "data confusion",
        [describe(label, x) + f", {len(names)} columns",
         estimator_line("estimator", est) + f" ({len(fit_names)} named features)"],
        0.9,
    )


def check_n_features(label: str, x: Facts, est: EstimatorFacts, method: str) -> Verdict | None:
    """predict-time feature count against n_features_in_ (checked after conversion)."""
    if not _judged_at_predict(est, method):
        return None
    width = n_columns(x)
    if width is None or est.n_features_in is None or width == est.n_features_in:
        return None
    return Verdict(
        "ValueError",
        f"X has {width} features, but {est.class_name} is expecting {est.n_features_in} features as input.",
        "data confusion",
        [describe(label, x), estimator_line("estimator", est)],
        0.9,
    )
