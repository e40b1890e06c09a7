"""Invalid scikit-learn hyper-parameters that `fit` rejects: known cross-parameter constraints
(LogisticRegression solver/penalty/dual, LinearSVC penalty/loss/dual) and each parameter's own constraint,
checked by the estimator class's own `_validate_params` (scikit-learn >= 1.2).

`_validate_params` is asked of the class in THIS process only when its scikit-learn version is exactly the
kernel's (the probe reports the kernel's versions); constructing an estimator only stores its parameters and
`_validate_params` only reads them, so this is side-effect free. Parameters whose value is not a plain
literal are left at their defaults (always valid), so only literal values can be blamed.
"""

from __future__ import annotations

import importlib
from typing import Any

from crane import pyast
from crane.rulekit.lib_helpers import Verdict, unwrap_numpy_repr

_UNSET = object()


def _has_ellipsis(v: Any) -> bool:
    if v is Ellipsis:
        return True
    if isinstance(v, (list, tuple, set)):
        return any(_has_ellipsis(x) for x in v)
    if isinstance(v, dict):
        return any(_has_ellipsis(x) for x in list(v.keys()) + list(v.values()))
    return False


def params_from_reprs(reprs: dict[str, str]) -> dict[str, Any]:
    """EstimatorFacts.params (short reprs) -> the values that are plain, complete literals."""
    out = {}
    for k, r in reprs.items():
        try:
            v = pyast.literal_eval(unwrap_numpy_repr(r))
        except Exception:
            continue
        if not _has_ellipsis(v):
            out[k] = v
    return out


def _at_least(version: str | None, minimum: tuple[int, int]) -> bool:
    parts = (version or "").split(".")[:2]
    return len(parts) == 2 and all(p.isdigit() for p in parts) and (int(parts[0]), int(parts[1])) >= minimum


def check_cross_params(class_name: str, params: dict[str, Any], version: str | None) -> Verdict | None:
    """Constraints between parameters that fit() enforces (scikit-learn 1.0-1.5)."""
    if class_name == "LogisticRegression":
        solver = params.get("solver", "lbfgs")
        penalty = params.get("penalty", "l2")
        if penalty == "deprecated":  # scikit-learn >= 1.8's placeholder: fit derives the penalty from l1_ratio / C
            penalty = effective_penalty(params)
            if penalty is _UNSET:
                return None
        dual = params.get("dual", False)
        if not isinstance(solver, str) or not (penalty is None or isinstance(penalty, str)):
            return None
        ev = [f"LogisticRegression(solver={solver!r}, penalty={penalty!r}"
              + (f", dual={dual!r}" if "dual" in params else "") + ")"]
        if solver not in ("liblinear", "saga") and penalty not in ("l2", "none", None):
            none = "None" if _at_least(version, (1, 4)) else "'none'"  # 'none' was removed in 1.4
            return Verdict("ValueError", f"Solver {solver} supports only 'l2' or {none} penalties, got {penalty} "
                           f"penalty.", "API misuse", ev, 0.9)
        if solver != "liblinear" and dual is True:
            return Verdict("ValueError", f"Solver {solver} supports only dual=False, got dual={dual}",
                           "API misuse", ev, 0.9)
        if penalty == "elasticnet" and solver != "saga":
            return Verdict("ValueError", f"Only 'saga' solver supports elasticnet penalty, got solver={solver}.",
                           "API misuse", ev, 0.9)
        if solver == "liblinear" and penalty == "none":
            return Verdict("ValueError", "penalty='none' is not supported for the liblinear solver",
                           "API misuse", ev, 0.9)
        if penalty == "elasticnet" and "l1_ratio" in params:
            r = params["l1_ratio"]
            if r is None or (isinstance(r, (int, float)) and not 0 <= r <= 1):
                return Verdict("ValueError", f"l1_ratio must be between 0 and 1; got (l1_ratio={r!r})",
                               "API misuse", ev + [f"l1_ratio={r!r}"], 0.9)
        return None
    if class_name == "LinearSVC":
        penalty = params.get("penalty", "l2")
        loss = params.get("loss", "squared_hinge")
        if "dual" in params:
            dual = params["dual"]
        elif version and version.split(".")[:2] in (["1", "0"], ["1", "1"], ["1", "2"]):
            dual = True
        else:
            return None
        if dual not in (True, False) or params.get("multi_class", "ovr") != "ovr":
            return None
        table = {"hinge": {"l2": {True}}, "squared_hinge": {"l1": {False}, "l2": {False, True}}}
        if loss not in table or not isinstance(penalty, str):
            return None  # other losses belong to other classes; unknown penalties: _validate_params
        if penalty not in table[loss]:
            why = f"The combination of penalty='{penalty}' and loss='{loss}' is not supported"
        elif dual not in table[loss][penalty]:
            why = f"The combination of penalty='{penalty}' and loss='{loss}' are not supported when dual={dual}"
        else:
            return None
        return Verdict(
            "ValueError",
            f"Unsupported set of arguments: {why}, Parameters: penalty={penalty!r}, loss={loss!r}, dual={dual!r}",
            "API misuse",
            [f"LinearSVC(penalty={penalty!r}, loss={loss!r}, dual={dual!r})"],
            0.85,
        )
    return None


def effective_penalty(params: dict[str, Any]) -> Any:
    """The penalty LogisticRegression.fit uses when `penalty` is left at scikit-learn 1.8+'s 'deprecated'
    placeholder (l1_ratio 0/None: l2, 1: l1, else elasticnet; C=inf: none); _UNSET when not literal."""
    ratio = params.get("l1_ratio", 0.0)
    c = params.get("C", 1.0)
    if not isinstance(ratio, (int, float, type(None))) or not isinstance(c, (int, float)):
        return _UNSET
    if c == float("inf"):
        return None
    if ratio is None or ratio == 0:
        return "l2"
    return "l1" if ratio == 1 else "elasticnet"


def local_sklearn_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("scikit-learn")
    except Exception:
        return None


def check_own_validation(module: str, class_name: str, params: dict[str, Any],
                         kernel_version: str | None) -> Verdict | None:
    """Ask the estimator class's own `_validate_params` about the literal parameters (same version only)."""
    if not module.startswith("sklearn.") or not params or not kernel_version:
        return None
    if local_sklearn_version() != kernel_version:
        return None
    try:
        cls = getattr(importlib.import_module(module), class_name)
        from sklearn.utils._param_validation import InvalidParameterError
    except Exception:
        return None
    if not hasattr(cls, "_validate_params") or not getattr(cls, "_parameter_constraints", None):
        return None
    try:
        est = cls(**params)
    except Exception:
        return None  # not constructible this way: nothing to say
    try:
        est._validate_params()
    except InvalidParameterError as exc:
        text = str(exc).splitlines()[0] if str(exc) else "invalid parameter"
        shown = ", ".join(f"{k}={v!r}" for k, v in list(params.items())[:6])
        return Verdict("InvalidParameterError", text, "API misuse",
                       [f"{class_name}({shown}) checked by {class_name}._validate_params "
                        f"(scikit-learn {kernel_version})"], 0.9)
    except Exception:
        return None
    return None
