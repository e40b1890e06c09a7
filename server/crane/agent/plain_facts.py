"""Runtime facts in plain words, one short line a variable, for the focused ask (crane.agent.focused).

The verdict prompts' notation (crane.llm.facts_text: `model: sklearn.tree._classes.DecisionTreeRegressor fitted
n_features_in=24 features=...`, `X_test: DataFrame 79x24, no NaN index=Index[4..390] @In[25]`) is dense; a 0.5B
model given it sent a NameError's line back unchanged, and given the same facts in words (`model:
DecisionTreeRegressor (fitted, 24 features)`, `X_test: DataFrame 79 rows x 24 columns`) used them
(`model.predict(X_test)`). Data, models and callables are described; anything else by its type.
"""

from __future__ import annotations

from crane.probe.facts import Facts
from crane.text import short_type

MAX_COLUMNS = 8
MAX_LINE = 200
# the kinds a fix in an ML notebook reaches for first: models, then data, then the rest
_RANK = {"dataframe": 1, "polars_frame": 1, "ndarray": 2, "tensor": 2, "series": 3, "polars_series": 3,
         "dataloader": 3, "tf_dataset": 3, "function": 5, "class": 5}


def rank(f: Facts) -> int:
    """Models first, then tables, arrays and series; functions and the rest after."""
    if f.estimator is not None or f.torch_module is not None or f.keras_model is not None:
        return 0
    return _RANK.get(f.kind, 6)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def _shape(f: Facts) -> str:
    if f.shape:
        return "(" + ", ".join(map(str, f.shape)) + ("," if len(f.shape) == 1 else "") + ")"
    return ""


def plain_line(name: str, f: Facts, columns: bool = True) -> str:
    """`name: what it is` in words (`X_test: DataFrame 79 rows x 24 columns: a (int64), b (object), ...`; the
    columns only with `columns`)."""
    k = f.kind
    if f.estimator is not None:
        e = f.estimator
        bits = ["fitted" if e.is_fitted else "not fitted"]
        if e.n_features_in is not None:
            bits.append(f"{e.n_features_in} features")
        if e.classes is not None:
            bits.append(f"{len(e.classes)} classes")
        return _cut(f"{name}: {e.class_name} ({', '.join(bits)})")
    if f.torch_module is not None or f.keras_model is not None:
        return _cut(f"{name}: {short_type(f.type)} (a neural network model)")
    if k in ("dataframe", "polars_frame") and f.shape and len(f.shape) == 2:
        line = f"{name}: DataFrame {f.shape[0]} rows x {f.shape[1]} columns"
        cols = [f"{c.name} ({c.dtype})" for c in (f.columns or [])[:MAX_COLUMNS]] if columns else []
        if cols:
            more = ", ..." if len(f.columns or []) > MAX_COLUMNS or f.columns_truncated else ""
            line += ": " + ", ".join(cols) + more
        return _cut(line)
    if k in ("series", "polars_series"):
        n = f.shape[0] if f.shape else f.length
        line = f"{name}: Series ({f.dtype}) {n} values"
        if f.unique_values is not None and len(f.unique_values) <= 5:
            line += ": " + ", ".join(map(repr, f.unique_values))
        return _cut(line)
    if k in ("ndarray", "tensor"):
        return _cut(f"{name}: {'numpy array' if k == 'ndarray' else short_type(f.type)} ({f.dtype}) shape {_shape(f)}")
    if k in ("function", "class"):
        params = ", ".join(p.name for p in (f.signature or [])[:6])
        return _cut(f"{name}: {k}({params})")
    line = f"{name}: {short_type(f.type)}"
    if f.value is not None:
        line += f" = {f.value}"
    elif f.length is not None:
        line += f" of {f.length}"
    return _cut(line)
