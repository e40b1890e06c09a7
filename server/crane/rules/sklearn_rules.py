"""scikit-learn misuse rules: unfitted estimators, inputs estimators reject (strings, NaN, 1-D, no samples,
inconsistent sample counts), feature names/count differing from fit, invalid hyper-parameters,
train_test_split on empty or inconsistent inputs, and classification metrics given multi-output input.

The pure decisions live in crane.rulekit.sklearn_checks / sklearn_params (tested with hand-built Facts); this
module finds the call sites in the cell and feeds them the flow-sensitive facts of the receiver and
arguments. A call that may not run (conditional code) or an estimator the cell may have changed before the
call (fitted, passed to a function, rebound) is not judged.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import EstimatorFacts, Facts
from crane.rulekit import sklearn_checks as C
from crane.rulekit import sklearn_params as P
from crane.rulekit import sklearn_tables as T
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, library_version, method_calls, qualname, state_may_change, value
from crane.rulekit.lib_helpers import NOVALUE, Verdict, describe, is_array_like, literal, n_samples, ndim, shape_of
from crane.rulekit.registry import rule


def _constructed_in_cell(ctx, name: str, at: ast.expr) -> tuple[ast.Call, str, str] | None:
    """`name = sklearn.Class(...)` as the last binding of `name` before `at`, at the top level of the cell:
    (constructor call, class name, public module)."""
    found = None
    for stmt in ctx.statements():
        if (stmt.lineno, stmt.col_offset) >= (at.lineno, at.col_offset):
            break
        binds = any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(stmt))
        if not binds:
            continue
        found = None
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Call)):
            q = qualname(ctx, stmt.value.func)
            if q and q.startswith("sklearn.") and "." in q:
                module, cls = q.rsplit(".", 1)
                if cls[:1].isupper():
                    found = (stmt.value, cls, module)
    return found


def _literal_kwargs(ctx, call: ast.Call) -> dict:
    out = {}
    for k in call.keywords:
        if k.arg is None:
            continue
        v = literal(k.value)
        if v is not NOVALUE:
            out[k.arg] = v
    return out


def _estimator(ctx, recv: ast.expr, call: ast.Call) -> tuple[EstimatorFacts, bool, dict | None] | None:
    """(estimator facts, facts come from the kernel (live), literal params when constructed in the cell)."""
    if not isinstance(recv, ast.Name):
        return None
    f = ctx.value(recv)
    ctor = _constructed_in_cell(ctx, recv.id, call)
    if ctor is not None:
        ctor_call, cls, module = ctor
        if any(isinstance(a, ast.Starred) for a in ctor_call.args) or any(k.arg is None for k in ctor_call.keywords):
            return None
        params: dict | None = _literal_kwargs(ctx, ctor_call)
        if ctor_call.args:
            params = None  # positional hyper-parameters: do not judge parameters
        est = EstimatorFacts(class_name=cls, module=module, is_fitted=False,
                             params={k: repr(v) for k, v in (params or {}).items()})
        return est, False, params
    if f is None or f.estimator is None:
        return None
    return f.estimator, True, None


@rule("sklearn-not-fitted", needs_probe=True)
def not_fitted(ctx: RuleContext) -> Iterator[Finding]:
    """predict/transform/score on an estimator that was never fitted."""
    for call, recv, method in method_calls(ctx):
        if method not in T.PREDICT_METHODS or not isinstance(recv, ast.Name) or not ctx.is_certain(call):
            continue
        got = _estimator(ctx, recv, call)
        if got is None or not got[1] or state_may_change(ctx, recv.id, call):
            continue
        v = C.check_not_fitted(recv.id, got[0], method)
        if v is not None:
            yield emit(ctx, call, "sklearn-not-fitted", v)
            return


def _x_y(ctx, call: ast.Call, method: str) -> tuple[ast.expr | None, ast.expr | None]:
    x = ctx.arg(call, 0, "X")
    y = ctx.arg(call, 1, "y") if method in T.FIT_METHODS or method == "score" else None
    return x, y


@rule("sklearn-input", needs_probe=True)
def estimator_input(ctx: RuleContext) -> Iterator[Finding]:
    """Data an estimator rejects in fit/predict/transform: strings, 1-D X, NaN, no samples, X/y sample counts
    that differ, and at predict time feature names or counts that differ from fit."""
    version = library_version(ctx, "sklearn")
    for call, recv, method in method_calls(ctx):
        if method not in T.X_METHODS or not isinstance(recv, ast.Name) or not ctx.is_certain(call):
            continue
        got = _estimator(ctx, recv, call)
        if got is None:
            continue
        est, live, _ = got
        if method in T.PREDICT_METHODS:
            if not live or state_may_change(ctx, recv.id, call):
                continue
            if not est.is_fitted:
                continue  # sklearn-not-fitted speaks
        x_node, y_node = _x_y(ctx, call, method)
        x = value(ctx, x_node)
        if x is None or not is_array_like(x):
            continue
        xl = label(ctx, x_node)
        verdict = None
        if method in T.PREDICT_METHODS:
            verdict = C.check_feature_names(xl, x, est, method)
        verdict = verdict or C.check_x(xl, x, est, method, version)
        if verdict is None and method in T.PREDICT_METHODS:
            verdict = C.check_n_features(xl, x, est, method)
        y = value(ctx, y_node)
        if verdict is None and y is not None and is_array_like(y):
            yl = label(ctx, y_node)
            verdict = C.check_y(yl, y, est, method)
            if verdict is None and method in T.FIT_METHODS and T.is_supervised(est.class_name, est.module):
                verdict = C.check_lengths([xl, yl], [x, y], C.estimator_line("estimator", est))
        if verdict is not None:
            yield emit(ctx, call, "sklearn-input", verdict)
            return


@rule("sklearn-params", needs_probe=True)
def invalid_params(ctx: RuleContext) -> Iterator[Finding]:
    """fit() on an estimator whose hyper-parameters the installed scikit-learn rejects."""
    version = library_version(ctx, "sklearn")
    for call, recv, method in method_calls(ctx):
        if method not in T.FIT_METHODS or not isinstance(recv, ast.Name) or not ctx.is_certain(call):
            continue
        got = _estimator(ctx, recv, call)
        if got is None:
            continue
        est, live, params = got
        if live:
            if state_may_change(ctx, recv.id, call):
                continue
            if est.params_error:  # the kernel's own scikit-learn rejected them (EstimatorFacts.params_error)
                yield emit(ctx, call, "sklearn-params", Verdict(
                    "InvalidParameterError", est.params_error, "API misuse",
                    [f"{recv.id}: {est.class_name} checked by its _validate_params in the kernel "
                     f"(scikit-learn {version or '?'})"], 0.9))
                return
            params = P.params_from_reprs(est.params)
        if not live:
            ctor = _constructed_in_cell(ctx, recv.id, call)
            kernel_error = ctx.probed.param_errors.get(ctx.text(ctor[0])) if ctor is not None else None
            if kernel_error:  # the kernel's own scikit-learn validated the literal keywords (ProbeRequest.constructions)
                yield emit(ctx, call, "sklearn-params", Verdict(
                    "InvalidParameterError", kernel_error, "API misuse",
                    [f"{recv.id} = {ctx.text(ctor[0])[:80]}: checked by {est.class_name}._validate_params in the "  # type: ignore[index]
                     f"kernel (scikit-learn {version or '?'})"], 0.9))
                return
        if not params:
            continue
        verdict = P.check_own_validation(est.module, est.class_name, params, version)
        verdict = verdict or P.check_cross_params(est.class_name, params, version)
        if verdict is not None:
            yield emit(ctx, call, "sklearn-params", verdict)
            return


# -- functions -----------------------------------------------------------------------------------------------
def _function_calls(ctx, names: set[str]):
    for call in ctx.calls():
        q = qualname(ctx, call.func)
        if not q or not q.startswith("sklearn."):
            continue
        short = q.rsplit(".", 1)[-1]
        if short in names and ctx.is_certain(call):
            yield call, short


def split_sizes(n: int, test_size, train_size) -> Verdict | None:
    """sklearn.model_selection._split._validate_shuffle_split for literal sizes (1.2)."""
    if test_size is None and train_size is None:
        test_size = 0.25
    for name, size in (("test_size", test_size), ("train_size", train_size)):
        if size is None:
            continue
        if isinstance(size, bool) or not isinstance(size, (int, float)):
            return None
        if isinstance(size, int) and (size >= n or size <= 0):
            return Verdict("ValueError", f"{name}={size} should be either positive and smaller than the number "
                           f"of samples {n} or a float in the (0, 1) range", "data confusion", [], 0.9)
        if isinstance(size, float) and (size <= 0 or size >= 1):
            return None  # other messages; not judged
    if isinstance(test_size, float) and isinstance(train_size, float) and test_size + train_size > 1:
        return None
    n_test = math.ceil(test_size * n) if isinstance(test_size, float) else test_size
    n_train = math.floor(train_size * n) if isinstance(train_size, float) else train_size
    if train_size is None:
        n_train = n - n_test
    elif test_size is None:
        n_test = n - n_train
    if n_train == 0:
        return Verdict("ValueError", f"With n_samples={n}, test_size={test_size} and train_size={train_size}, the "
                       "resulting train set will be empty. Adjust any of the aforementioned parameters.",
                       "data confusion", [], 0.9)
    return None


@rule("sklearn-split", needs_probe=True)
def split_inputs(ctx: RuleContext) -> Iterator[Finding]:
    """train_test_split on inputs of different lengths, or too few samples for the requested split."""
    for call, _ in _function_calls(ctx, {"train_test_split"}):
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            continue
        facts = [f for f in (value(ctx, a) for a in call.args) if f is not None]
        if not facts or len(facts) < len(call.args) or any(
                not (is_array_like(f) or f.kind in ("list", "tuple")) for f in facts):
            continue
        labels = [label(ctx, a) for a in call.args]
        v = C.check_lengths(labels, facts, "train_test_split needs the same number of samples in every array")
        if v is None:
            n = n_samples(facts[0])
            ts_node, tr_node = ctx.kwarg(call, "test_size"), ctx.kwarg(call, "train_size")
            ts = literal(ts_node) if ts_node is not None else None
            tr = literal(tr_node) if tr_node is not None else None
            if n is None or ts is NOVALUE or tr is NOVALUE:
                continue
            v = split_sizes(n, ts, tr)
            if v is not None:
                v.evidence = [describe(lbl, f) for lbl, f in zip(labels, facts, strict=False)]
        if v is not None:
            yield emit(ctx, call, "sklearn-split", v)
            return


CLASSIFICATION_METRICS = {
    "accuracy_score", "f1_score", "precision_score", "recall_score", "fbeta_score", "jaccard_score",
    "balanced_accuracy_score", "confusion_matrix", "classification_report", "precision_recall_fscore_support",
    "hamming_loss", "zero_one_loss", "cohen_kappa_score", "matthews_corrcoef", "multilabel_confusion_matrix",
}
REGRESSION_METRICS = {
    "mean_squared_error", "mean_absolute_error", "r2_score", "median_absolute_error", "explained_variance_score",
    "mean_absolute_percentage_error", "mean_squared_log_error", "max_error",
}


def _target_type(f: Facts) -> str | None:
    """type_of_target, when the facts decide it (multi-output kinds only from 2-D data)."""
    shp = shape_of(f)
    if shp is not None and len(shp) == 2 and shp[1] > 1:
        dtypes = [c.dtype for c in f.columns] if f.columns is not None else ([f.dtype] if f.dtype else [])
        if not dtypes:
            return "multioutput"
        if any(d.startswith("float") for d in dtypes):
            return "continuous-multioutput"  # float values: integral ones would make it multiclass-multioutput
        if all(d.startswith(("int", "uint", "bool")) for d in dtypes):
            return "multiclass-multioutput"
        return "multioutput"
    if ndim(f) == 1 or (shp is not None and len(shp) == 2 and shp[1] == 1):
        return "single-output"
    return None


def classification_mix(labels: list[str], facts: list[Facts]) -> Verdict | None:
    """A classification metric given one multi-column input and one 1-D input."""
    kinds = [_target_type(f) for f in facts]
    if None in kinds or len(facts) != 2:
        return None
    multi = [k for k in kinds if k != "single-output"]
    if len(multi) != 1:
        return None
    i = kinds.index(multi[0])
    other = facts[1 - i]
    other_kind = "binary" if other.num_unique is not None and other.num_unique <= 2 else "multiclass"
    a, b = (multi[0], other_kind) if i == 0 else (other_kind, multi[0])
    if multi[0] in ("multioutput",) or (multi[0] == "continuous-multioutput" and i == 1):
        msg = "Classification metrics can't handle a mix of multi-output and single-output targets"
    else:
        msg = f"Classification metrics can't handle a mix of {a} and {b} targets"
    return Verdict("ValueError", msg, "implementation error",
                   [describe(labels[0], facts[0]), describe(labels[1], facts[1])], 0.85)


@rule("sklearn-metrics", needs_probe=True)
def metric_inputs(ctx: RuleContext) -> Iterator[Finding]:
    """Metrics given inputs of different lengths, or a classification metric given a feature matrix."""
    for call, name in _function_calls(ctx, CLASSIFICATION_METRICS | REGRESSION_METRICS):
        a, b = ctx.arg(call, 0, "y_true"), ctx.arg(call, 1, "y_pred")
        fa, fb = value(ctx, a), value(ctx, b)
        if fa is None or fb is None or not (is_array_like(fa) or fa.kind == "list") or not (
                is_array_like(fb) or fb.kind == "list"):
            continue
        labels = [label(ctx, a), label(ctx, b)]
        v = C.check_lengths(labels, [fa, fb], f"{name} compares y_true and y_pred sample by sample",
                            "implementation error")
        if v is None and name in CLASSIFICATION_METRICS and is_array_like(fa) and is_array_like(fb):
            v = classification_mix(labels, [fa, fb])
        if v is not None:
            yield emit(ctx, call, "sklearn-metrics", v)
            return
