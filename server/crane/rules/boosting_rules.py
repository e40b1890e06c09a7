"""Gradient-boosting rules: pandas DataFrames with string columns given to xgboost/lightgbm estimators.

xgboost 3.2 (`data._invalid_dataframe_dtype`): every pandas column must be int, float, bool or (with
`enable_categorical=True`) category; object and str columns are rejected whatever `enable_categorical` says, and
category columns without it ("DataFrame.dtypes for data must be int, float, bool or category ..."). LightGBM 4.7
(`basic._check_for_bad_pandas_dtypes`) rejects object/str columns; it encodes category columns itself. The
estimator is one the cell builds with literal keyword arguments, or a live one whose parameters the probe read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import EstimatorFacts, Facts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, method_calls, qualname, state_may_change, value
from crane.rulekit.lib_helpers import Verdict, column_names, is_dataframe, shape_of
from crane.rulekit.registry import rule

_TEXT = ("object", "str", "string")
_FIT = {"fit", "predict", "predict_proba"}


def _constructor(ctx: RuleContext, name: str, at: ast.AST) -> tuple[str, dict[str, object]] | None:
    """(qualified class, literal keyword arguments) of the last `name = <lib>.<Class>(...)` before `at` in the cell."""
    found = None
    for node in ctx.nodes(ast.Assign):
        if (getattr(node, "lineno", 0), getattr(node, "col_offset", 0)) >= (
            getattr(at, "lineno", 0),
            getattr(at, "col_offset", 0),
        ):
            break
        assign = node
        if not isinstance(assign, ast.Assign):
            continue
        if (
            len(assign.targets) == 1
            and isinstance(assign.targets[0], ast.Name)
            and assign.targets[0].id == name
            and isinstance(assign.value, ast.Call)
        ):
            q = qualname(ctx, assign.value.func) or ""
            kwargs: dict[str, object] = {}
            for kw in assign.value.keywords:
                if kw.arg is None:
                    return None
                kwargs[kw.arg] = ctx.literal(kw.value, ...)
            found = (q, kwargs)
    return found


def _library(q: str) -> str | None:
    for lib in ("xgboost", "lightgbm"):
        if q.startswith(lib + ".") or q.startswith(lib[:3] + "."):
            return lib
    return None


def frame_verdict(lib: str, enable_cat: object, xlabel: str, x: Facts, est_label: str) -> Verdict | None:
    if not is_dataframe(x) or x.columns is None:
        return None
    text = [c for c in x.columns if c.dtype in _TEXT]
    cats = [c for c in x.columns if c.dtype == "category"]
    if lib == "xgboost":
        bad = text + (cats if enable_cat is False else [])
        if not bad or (not text and enable_cat is not False):
            return None
        fields = ", ".join(f"{c.name}: {c.dtype}" for c in x.columns if c in bad)
        msg = (
            "DataFrame.dtypes for data must be int, float, bool or category. When categorical type is supplied, "
            "the experimental DMatrix parameter`enable_categorical` must be set to `True`.  Invalid columns:" + fields
        )
    else:
        if not text:
            return None
        fields = ", ".join(f"{c.name}: {c.dtype}" for c in text)
        msg = f"pandas dtypes must be int, float or bool.\nFields with bad pandas dtypes: {fields}"
        bad = text
    ev = [
        f"{xlabel}: DataFrame with {len(bad)} column(s) of dtype {', '.join(sorted({c.dtype for c in bad}))} "
        f"({', '.join(c.name for c in bad[:5])}{', ...' if len(bad) > 5 else ''})",
        f"{est_label}: {lib} estimator" + (f", enable_categorical={enable_cat!r}" if lib == "xgboost" else ""),
    ]
    return Verdict("ValueError", msg, "API misuse", ev, 0.9)


def features_verdict(lib: str, est: EstimatorFacts, xlabel: str, x: Facts, est_label: str) -> Verdict | None:
    """predict/predict_proba of a fitted model on other features than it was trained on: xgboost compares a
    DataFrame's column names with the Booster's (order included), else the count; LightGBM only the count."""
    n_fit, names = est.n_features_in, est.feature_names_in
    if n_fit is None:
        return None
    ev = [f"{est_label}: {est.class_name} trained on {n_fit} features"
          + (f" {names[:8]}" if names else "") + " (probe)"]
    if is_dataframe(x):
        cols = column_names(x)
        if cols is None:
            return None
        ev.append(f"{xlabel}: DataFrame with columns {cols[:8]}")
        if lib == "xgboost" and names is not None and cols != names:
            return Verdict("ValueError", f"feature_names mismatch: {names} {cols}", "data confusion", ev, 0.9)
        if lib == "lightgbm" and len(cols) != n_fit:
            return Verdict("LightGBMError", f"The number of features in data ({len(cols)}) is not the same as it was "
                           f"in training data ({n_fit}).", "data confusion", ev, 0.9)
        return None
    shp = shape_of(x)
    if x.kind != "ndarray" or shp is None or len(shp) != 2 or shp[1] == n_fit:
        return None
    ev.append(f"{xlabel}: array {tuple(shp)}")
    if lib == "xgboost":
        return Verdict("ValueError", f"Feature shape mismatch, expected: {n_fit}, got {shp[1]}", "data confusion", ev,
                       0.9)
    return Verdict("ValueError", f"X has {shp[1]} features, but {est.class_name} is expecting {n_fit} features as "
                   "input.", "data confusion", ev, 0.9)


@rule("boosting-input", needs_probe=True)
def boosting_input(ctx: RuleContext) -> Iterator[Finding]:
    """String (and, without enable_categorical, category) columns given to an xgboost / lightgbm estimator."""
    for call, recv, meth in method_calls(ctx):
        if meth not in _FIT or not isinstance(recv, ast.Name) or not call.args or not ctx.is_certain(call):
            continue
        built = _constructor(ctx, recv.id, call)
        if built is not None:
            lib = _library(built[0])
            enable_cat = built[1].get("enable_categorical", False)
        else:
            f = ctx.facts(recv.id)
            if f is None or f.estimator is None or not ctx.is_live(recv.id, call):
                continue
            lib = _library(f.estimator.module)
            raw = f.estimator.params.get("enable_categorical")
            enable_cat = {"True": True, "False": False}.get(raw or "", ...)
            if meth != "fit" and not f.estimator.is_fitted:
                continue
        x = value(ctx, call.args[0])
        if lib is None or x is None:
            continue
        v = None
        if enable_cat is not ...:
            v = frame_verdict(lib, enable_cat, label(ctx, call.args[0]), x, recv.id)
        if v is None and built is None and meth != "fit" and not state_may_change(ctx, recv.id, call):
            est = ctx.facts(recv.id)
            if est is not None and est.estimator is not None:
                v = features_verdict(lib, est.estimator, label(ctx, call.args[0]), x, recv.id)
        if v is not None:
            yield emit(ctx, call, "boosting-input", v)
            return
