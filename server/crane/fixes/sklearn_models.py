"""Candidates for using a scikit-learn estimator in the wrong state.

- `use-fitted`: NotFittedError on `est.predict(...)` → a fitted estimator of the same class the state holds
  (e.g. the search's `best_estimator`), or a fitted search object's `best_estimator_`.
- `fit-first`: NotFittedError → fit it first with what the notebook fits it on (the arguments of a
  `est.fit(...)` call, or of the fit of a search built on `est`, in any cell), inserted before the statement.
- `select-features`: "The feature names should match those that were passed during fit" / "X has N features,
  but ... is expecting M" → select the columns seen at fit (`X[est.feature_names_in_]`), or align them
  (`X.reindex(columns=est.feature_names_in_, fill_value=0)`, e.g. one-hot columns the input lacks).
- `metric-predictions`: a metric given a feature matrix where predictions belong ("can't handle a mix of
  continuous-multioutput and multiclass targets") → the predictions vector of the same length the state holds.
- `other-estimator`: AttributeError for a fitted attribute the estimator does not have (`feature_importances_`
  on an SVC) → another fitted estimator in the state that has it.
"""

from __future__ import annotations

import ast
import re

from crane.analysis.cell import is_predefined
from crane.fixes.context import FixContext
from crane.fixes.sklearn_inputs import estimator_calls
from crane.probe.facts import Facts


def _state_estimators(ctx: FixContext) -> dict[str, Facts]:
    """Estimators bound to names of the notebook (any cell) in the crash-point state."""
    names: set[str] = set()
    for d in ctx.scope.cells:
        names |= {n for n in d.binds if not is_predefined(n)}
    names |= ctx.known_names()
    facts = ctx.more_facts(sorted(names)) if ctx.ask is not None else {}
    for n in ctx.known_names():
        f = ctx.facts(n)
        if f is not None:
            facts.setdefault(n, f)
    return {n: f for n, f in facts.items() if f.estimator is not None}


def _owner(call: ast.Call) -> ast.expr | None:
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def _fit_calls(ctx: FixContext, est: str) -> list[tuple[str, list[str]]]:
    """(fitted object, argument texts) of `X.fit(args)` calls in the notebook where X is `est` or a search built
    on it (`GridSearchCV(est, ...)`), last cell first."""
    wrappers = {est}
    out = []
    cells = sorted(ctx.scope.cells, key=lambda d: d.number, reverse=True)
    for d in cells:
        tree = d.analysis.tree
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args \
                    and isinstance(node.value.args[0], ast.Name) and node.value.args[0].id == est:
                wrappers |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for d in cells:
        tree = d.analysis.tree
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fit" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in wrappers and node.args:
                args = [ast.get_source_segment(d.analysis.python, a) or ast.unparse(a) for a in node.args]
                out.append((node.func.value.id, args))
    # fitted only inside cross-validation (`cross_val_score(est, X, y, cv=5)` fits clones): its data, after them
    for d in cells:
        tree = d.analysis.tree
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (_callee(node) or "").startswith("cross_val") and len(node.args) >= 2 and \
                    isinstance(node.args[0], ast.Name) and node.args[0].id == est:
                y = node.args[2] if len(node.args) > 2 else next((k.value for k in node.keywords if k.arg == "y"), None)
                args = [ast.get_source_segment(d.analysis.python, a) or ast.unparse(a)
                        for a in [node.args[1]] + ([y] if y is not None else [])]
                out.append((f"{_callee(node)}({est}, ...)", args))
    return out


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def not_fitted(ctx: FixContext):
    if ctx.crash.ename != "NotFittedError":
        return
    for call in estimator_calls(ctx):
        owner = _owner(call)
        if not isinstance(owner, ast.Name):
            continue
        est = owner.id
        mine = ctx.facts(est) or ctx.more_facts([est]).get(est)
        cls = mine.estimator.class_name if mine is not None and mine.estimator is not None else None
        stmt = ctx.statement_of(call)
        others = _state_estimators(ctx)
        for name, f in sorted(others.items()):
            e = f.estimator
            if name == est or e is None or not e.is_fitted:
                continue
            if cls is not None and e.class_name == cls:
                ed = ctx.editor()
                try:
                    new = ed.replace(owner, name).apply()
                except ValueError:
                    continue
                yield ctx.candidate("use-fitted", f"Use the fitted {name}", new,
                                    detail=f"{est} was never fitted; {name} is a fitted {cls}")
            elif e.class_name.endswith("SearchCV") or "best_estimator_" in (e.fitted_attributes or []):
                ed = ctx.editor()
                try:
                    new = ed.replace(owner, f"{name}.best_estimator_").apply()
                except ValueError:
                    continue
                yield ctx.candidate("use-fitted", f"Use {name}.best_estimator_", new, penalty=3.0,
                                    detail=f"{est} was never fitted; {name} ({e.class_name}) holds the best fitted one")
        if stmt is None:
            return
        tried = set()
        for fitted, args in _fit_calls(ctx, est)[:4]:
            key = tuple(args)
            if key in tried:
                continue
            tried.add(key)
            names = {n.id for a in args for n in ast.walk(ast.parse(a, mode="eval")) if isinstance(n, ast.Name)}
            have = ctx.more_facts(sorted(names)) if ctx.ask is not None else {}
            if ctx.ask is not None and any(n not in have and not is_predefined(n) for n in names):
                continue  # what the notebook fits on is not in the state
            ed = ctx.editor()
            try:
                new = ed.insert_before(stmt, [f"{est}.fit({', '.join(args)})"]).apply()
            except ValueError:
                continue
            via = f" (as {fitted}.fit does)" if fitted != est and "(" not in fitted else \
                f" ({fitted} fits copies of it only)" if fitted != est else ""
            yield ctx.candidate("fit-first", f"Fit {est} first: {est}.fit({', '.join(args)})", new, penalty=4.0,
                                detail=f"{est} was never fitted{via}")
        return


_FEATURES = re.compile(r"feature names should match|features, but \w+ is expecting|Feature names unseen at fit|"
                       r"Feature names seen at fit time, yet now missing")


def feature_mismatch(ctx: FixContext):
    if ctx.crash.ename != "ValueError" or not _FEATURES.search(ctx.crash.evalue):
        return
    for call in estimator_calls(ctx):
        owner = _owner(call)
        if owner is None or not call.args:
            continue
        est = ctx.text(owner)
        arg = call.args[0]
        x = ctx.text(arg)
        f = ctx.facts(x) if isinstance(arg, ast.Name) else None
        ef = ctx.facts(est) if isinstance(owner, ast.Name) else None
        names = ef.estimator.feature_names_in if ef is not None and ef.estimator is not None else None
        if names is None and ef is not None:
            continue  # fitted without feature names: nothing to select by
        have = {c.name for c in f.columns} if f is not None and f.columns and not f.columns_truncated else None
        wrap = x if isinstance(arg, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) else f"({x})"
        if have is None or names is None or set(names) <= have:
            ed = ctx.editor()
            try:
                new = ed.replace(arg, f"{wrap}[{est}.feature_names_in_]").apply()
                yield ctx.candidate("select-features", f"Select the columns {est} was fitted on", new,
                                    detail=f"{est}.feature_names_in_ lists the columns seen at fit")
            except ValueError:
                pass
        if have is None or names is None or not set(names) <= have:
            ed = ctx.editor()
            try:
                new = ed.replace(arg, f"{wrap}.reindex(columns={est}.feature_names_in_, fill_value=0)").apply()
                missing = sorted(set(names or []) - (have or set()))
                yield ctx.candidate("select-features", f"Align the columns of {x} to those {est} was fitted on",
                                    new, penalty=6.0, detail=f"{x} lacks {missing[:5]}" if missing else "")
            except ValueError:
                pass
        return


_NO_ATTR = re.compile(r"'(\w+)' object has no attribute '(\w+_)'")


def other_estimator(ctx: FixContext):
    m = _NO_ATTR.search(ctx.crash.evalue) if ctx.crash.ename == "AttributeError" else None
    if m is None:
        return
    attr = m.group(2)
    for node in ctx.crash_nodes(ast.Attribute):
        if not (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)):
            continue
        est = node.value.id
        for name, f in sorted(_state_estimators(ctx).items()):
            e = f.estimator
            if name == est or e is None or not e.is_fitted or attr not in (e.fitted_attributes or []):
                continue
            ed = ctx.editor()
            try:
                for other in ctx.all_nodes(ast.Attribute):
                    if isinstance(other, ast.Attribute) and other.attr == attr and isinstance(other.value, ast.Name) \
                            and other.value.id == est:
                        ed.replace(other.value, name)
                new = ed.apply()
            except ValueError:
                continue
            yield ctx.candidate("other-estimator", f"Use {name}.{attr} ({e.class_name})", new, penalty=3.0,
                                detail=f"{est} ({m.group(1)}) has no {attr}; {name} is a fitted {e.class_name} that has it")
        return


METRICS = {"accuracy_score", "balanced_accuracy_score", "f1_score", "precision_score", "recall_score", "fbeta_score",
           "confusion_matrix", "classification_report", "r2_score", "mean_squared_error", "mean_absolute_error",
           "median_absolute_error", "mean_absolute_percentage_error", "explained_variance_score", "roc_auc_score",
           "log_loss", "matthews_corrcoef", "cohen_kappa_score", "jaccard_score", "hamming_loss", "zero_one_loss"}
_TARGETS = re.compile(r"can't handle a mix of|continuous-multioutput|multioutput|inconsistent numbers of samples|"
                      r"y_true and y_pred have different number of output")
_PREDICTION_NAME = re.compile(r"pred|y_?hat|forecast", re.IGNORECASE)


def _length(f: Facts) -> int | None:
    if f.shape:
        return f.shape[0]
    return f.length


def _is_matrix(f: Facts) -> bool:
    return (f.kind == "dataframe" and len(f.columns or []) > 1) or \
        (f.kind in ("ndarray", "tensor") and bool(f.shape) and len(f.shape or []) == 2 and (f.shape or [0, 0])[1] > 1)


def _is_vector(f: Facts) -> bool:
    if f.kind == "series":
        return True
    if f.kind in ("ndarray", "tensor") and f.shape is not None:
        return len(f.shape) == 1 or (len(f.shape) == 2 and f.shape[1] == 1)
    return f.kind == "list"


def metric_predictions(ctx: FixContext):
    """A metric given a feature matrix where predictions belong → a predictions vector of the same length the
    state holds (a name saying "pred")."""
    if ctx.crash.ename != "ValueError" or not _TARGETS.search(ctx.crash.evalue):
        return
    for call in ctx.crash_nodes(ast.Call):
        if not isinstance(call, ast.Call) or len(call.args) < 2:
            continue
        fname = ctx.text(call.func).split(".")[-1]
        if fname not in METRICS:
            continue
        a, b = call.args[0], call.args[1]
        if not (isinstance(a, ast.Name) and isinstance(b, ast.Name)):
            continue
        fa, fb = ctx.facts(a.id), ctx.facts(b.id)
        if fa is None or fb is None:
            continue
        if _is_matrix(fa) and _is_vector(fb):
            bad, good, fgood = a, b, fb
        elif _is_matrix(fb) and _is_vector(fa):
            bad, good, fgood = b, a, fa
        else:
            continue
        n = _length(fgood)
        pool = {nm for d in ctx.scope.cells for nm in d.binds if _PREDICTION_NAME.search(nm)} - {good.id, bad.id}
        have = ctx.more_facts(sorted(pool))
        for name, f in sorted(have.items()):
            if not _is_vector(f) or (n is not None and _length(f) not in (n, None)):
                continue
            ed = ctx.editor()
            try:
                new = ed.replace(bad, name).apply()
            except ValueError:
                continue
            yield ctx.candidate("metric-predictions", f"Score the predictions {name} instead of {bad.id}", new,
                                penalty=4.0, detail=f"{bad.id} is a feature matrix; {fname} compares labels "
                                                    f"with predictions")
        return
