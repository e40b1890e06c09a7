"""Synthesised Facts for derived values (`df['a']`, `df.drop(...)`, `.values`, `train_test_split`, ...).

Each function takes Facts (and literal arguments; `_NO`-like sentinels or non-literals mean "not a literal")
and returns new Facts, a tuple of them, or None when the result cannot be computed exactly. A synthesised
value's `name` is its expression text. `truncated=True` marks row subsets whose per-column statistics
(n_nan, num_unique, value_range, unique_values, example_values) are upper bounds, not exact; columns whose
dtype is unknown carry dtype "unknown". Never guesses: anything uncertain gives None.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from crane.probe.facts import ColumnFacts, EstimatorFacts, Facts

SERIES = "pandas.core.series.Series"
FRAME = "pandas.core.frame.DataFrame"
NDARRAY = "numpy.ndarray"
_NUMERIC_PREFIXES = ("int", "uint", "float")


def series_type(f: Facts) -> str:
    """The type name of a Series made from frame or Series `f`, as the kernel's pandas names it: pandas 3 names its
    classes at the top level (pandas.DataFrame, pandas.Series), pandas 2 by their modules."""
    return "pandas.Series" if f.type in ("pandas.DataFrame", "pandas.Series") else SERIES


def _replace(f: Facts, **kw: Any) -> Facts:
    return msgspec.structs.replace(f, **kw)


def constant(value: Any) -> Facts | None:
    if isinstance(value, bool) or isinstance(value, (int, float, complex)):
        return Facts(name=repr(value), type=f"builtins.{type(value).__name__}", kind="scalar", value=repr(value)[:80])
    if isinstance(value, str):
        return Facts(name=repr(value)[:80], type="builtins.str", kind="str", value=repr(value)[:80], length=len(value))
    return None


def rows(f: Facts) -> int | None:
    if f.shape:
        return f.shape[0]
    if f.index is not None:
        return f.index.length
    return f.length


def _complete_columns(f: Facts) -> list[ColumnFacts] | None:
    if f.kind != "dataframe" or f.columns is None or f.columns_truncated:
        return None
    return f.columns


def _frame(f: Facts, cols: list[ColumnFacts], text: str, n: int | None = None, **kw: Any) -> Facts:
    n = rows(f) if n is None else n
    return _replace(
        f, name=text, columns=cols, shape=[n, len(cols)] if n is not None else None, length=n,
        has_nan=any(c.n_nan for c in cols) if not f.truncated else f.has_nan,
        n_nan=sum(c.n_nan for c in cols) if not f.truncated else None, **kw,
    )


def column(f: Facts, name: Any, text: str) -> Facts | None:
    cols = _complete_columns(f)
    if cols is None:
        return None
    c = next((c for c in cols if c.name == (name if isinstance(name, str) else repr(name))), None)
    if c is None:
        return None
    n = rows(f)
    return Facts(
        name=text, type=series_type(f), kind="series", length=n, shape=[n] if n is not None else None, dtype=c.dtype,
        has_nan=(c.n_nan > 0) if not f.truncated or c.n_nan == 0 else None, n_nan=c.n_nan if not f.truncated else None,
        value_range=c.value_range, num_unique=c.num_unique, unique_values=c.unique_values,
        example_values=c.example_values, numeric_parse=c.numeric_parse, non_numeric_example=c.non_numeric_example,
        non_numeric_position=c.non_numeric_position, index=f.index, truncated=f.truncated, series_name=c.name,
        has_name=True, string_storage=c.string_storage, dtype_repr=c.dtype_repr,
    )


def subscript(f: Facts, key: Any, text: str) -> Facts | tuple | None:
    if f.kind == "dataframe":
        if isinstance(key, (str, int)) and not isinstance(key, bool):
            return column(f, key, text)
        if isinstance(key, list) and key and all(isinstance(k, str) for k in key):
            cols = _complete_columns(f)
            if cols is None:
                return None
            by_name = {c.name: c for c in cols}
            if not all(k in by_name for k in key) or len(set(key)) != len(key):
                return None
            return _frame(f, [by_name[k] for k in key], text)
    if f.kind == "tuple" and f.value and isinstance(key, int):
        return None
    return None


def row_subset(f: Facts, n: int | None, text: str) -> Facts | None:
    """A subset of the rows (filter, head, sample, split): same columns, stats become upper bounds."""
    if f.kind == "dataframe":
        if f.columns is None:
            return None
        cols = [c if c.n_nan == 0 else c for c in f.columns]
        return _replace(
            f, name=text, columns=cols, shape=[n, len(cols)] if n is not None else None, length=n,
            has_nan=False if f.has_nan is False else None, n_nan=0 if f.n_nan == 0 else None, index=None,
            truncated=True,
        )
    if f.kind in ("series", "ndarray", "tensor"):
        shape = [n] + list(f.shape[1:]) if (f.shape and n is not None) else None
        return _replace(
            f, name=text, shape=shape, length=n, has_nan=False if f.has_nan is False else None,
            n_nan=0 if f.n_nan == 0 else None, index=None, truncated=True,
        )
    if f.kind == "list":
        return _replace(f, name=text, length=n, value=None, truncated=True)
    return None


def bool_series(f: Facts, text: str) -> Facts:
    n = rows(f)
    return Facts(name=text, type=series_type(f), kind="series", dtype="bool", length=n, shape=[n] if n is not None else None,
                 has_nan=False, n_nan=0, index=f.index)


def _array_dtype(dtypes: list[str]) -> str:
    uniq = set(dtypes)
    if len(uniq) == 1:
        d = dtypes[0]
        return "object" if d in ("category", "string") or d.startswith("datetime64[ns,") else d
    if all(d.startswith(_NUMERIC_PREFIXES) for d in uniq):
        return "float64" if any(d.startswith("float") for d in uniq) else "int64"
    return "object"


def to_numpy(f: Facts, text: str) -> Facts | None:
    if f.kind == "ndarray":
        return _replace(f, name=text)
    if f.kind == "series":
        if f.dtype in (None, "category") or (f.dtype or "").startswith("datetime64[ns,"):
            return None
        return Facts(name=text, type=NDARRAY, kind="ndarray", shape=f.shape, length=f.length, dtype=f.dtype,
                     has_nan=f.has_nan, n_nan=f.n_nan, value_range=f.value_range, num_unique=f.num_unique,
                     unique_values=f.unique_values, example_values=f.example_values, numeric_parse=f.numeric_parse,
                     non_numeric_example=f.non_numeric_example, non_numeric_position=f.non_numeric_position,
                     truncated=f.truncated)
    cols = _complete_columns(f)
    if cols is None or not cols or any(c.dtype == "unknown" for c in cols):
        return None
    dtype = _array_dtype([c.dtype for c in cols])
    parse = example = None
    if dtype == "object":
        kinds = set()
        for c in cols:
            if c.dtype.startswith(_NUMERIC_PREFIXES) or c.dtype == "bool":
                kinds.add("all")
            else:
                kinds.add(c.numeric_parse or "unknown")
                example = example or c.non_numeric_example
        parse = kinds.pop() if len(kinds) == 1 and "unknown" not in kinds else ("some" if "none" in kinds or "some" in kinds else None)
    n = rows(f)
    return Facts(name=text, type=NDARRAY, kind="ndarray", shape=[n, len(cols)] if n is not None else None,
                 length=n, dtype=dtype, has_nan=f.has_nan, n_nan=f.n_nan, numeric_parse=parse,
                 non_numeric_example=example, truncated=f.truncated)


def attribute(f: Facts, attr: str, text: str) -> Facts | tuple | None:
    if attr == "values" and f.kind in ("dataframe", "series"):
        return to_numpy(f, text)
    if attr == "shape" and f.shape and all(isinstance(d, int) for d in f.shape):
        return Facts(name=text, type="builtins.tuple", kind="tuple", value=repr(tuple(f.shape)), length=len(f.shape))
    if attr == "T" and f.kind == "ndarray":
        return _replace(f, name=text, shape=list(reversed(f.shape)) if f.shape else None)
    return None


def drop(f: Facts, labels: list[Any], axis: str, text: str, ignore: bool = False) -> Facts | None:
    if f.kind != "dataframe" or axis != "columns":
        return None
    cols = _complete_columns(f)
    if cols is None:
        return None
    names = {lab if isinstance(lab, str) else repr(lab) for lab in labels}
    if not ignore and not names <= {c.name for c in cols}:
        return None  # it raises: no value after
    return _frame(f, [c for c in cols if c.name not in names], text)


def _labels(v: Any) -> list[Any] | None:
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        return [v]
    if isinstance(v, (list, tuple)) and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in v):
        return list(v)
    return None


def method(f: Facts, name: str, args: list[Any], kw: dict[str, Any], text: str) -> Facts | tuple | None:
    """The value of `f.name(*args, **kw)` for the methods the evaluator knows; args are literals or a sentinel."""
    lit = all(not _is_sentinel(a) for a in args) and all(not _is_sentinel(v) for v in kw.values())
    if name == "copy":
        return _replace(f, name=text)
    if f.kind == "tensor" and name in _TENSOR_CASTS and not args and not kw:
        return _replace(f, name=text, dtype=_TENSOR_CASTS[name], value_range=None, unique_values=None,
                        example_values=None)
    if name in ("to_numpy",) and not args and not kw:
        return to_numpy(f, text)
    if not lit:
        return None
    if name == "drop" and f.kind == "dataframe":
        ignore = kw.get("errors") == "ignore"
        if "columns" in kw and not args:
            labs = _labels(kw["columns"])
            return drop(f, labs, "columns", text, ignore) if labs is not None else None
        labs = _labels(args[0] if args else kw.get("labels"))
        axis = args[1] if len(args) > 1 else kw.get("axis", 0)
        if labs is not None and axis in (1, "columns") and set(kw) <= {"labels", "axis", "errors"}:
            return drop(f, labs, "columns", text, ignore)
        return None
    if name == "dropna" and not args and set(kw) <= {"axis"}:
        if kw.get("axis", 0) in (1, "columns") and f.kind == "dataframe":
            cols = _complete_columns(f)
            return _frame(f, [c for c in cols if c.n_nan == 0], text) if cols is not None and not f.truncated else None
        if kw.get("axis", 0) in (0, "index"):
            out = row_subset(f, None, text)
            return _no_nan(out) if out is not None else None
        return None
    if name == "fillna" and (args or "value" in kw) and set(kw) <= {"value"}:
        value = args[0] if args else kw["value"]
        if value is None or isinstance(value, dict):
            return None
        return _no_nan(_unplaced(_replace(f, name=text)))
    if name in ("head", "tail") and set(kw) <= {"n"} and len(args) <= 1:
        k = args[0] if args else kw.get("n", 5)
        n = rows(f)
        if not isinstance(k, int) or n is None:
            return None
        return row_subset(f, min(max(k, 0), n) if k >= 0 else max(n + k, 0), text)
    if name in ("flatten", "ravel") and f.kind == "ndarray" and f.shape and not args and not kw:
        return _replace(f, name=text, shape=[math.prod(f.shape)], length=math.prod(f.shape))
    if name == "reshape" and f.kind == "ndarray" and f.shape and not kw:
        shape = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else list(args)
        return _reshape(f, shape, text)
    if name == "reset_index" and kw.get("drop") is True and not args and set(kw) <= {"drop"}:
        return _replace(f, name=text, index=None)
    return None


def subplots(grid: list[Any], squeeze: Any, text: str) -> tuple | None:
    """`fig, axes = plt.subplots(nrows, ncols)` with literal sizes: (unknown figure, the axes array's facts).
    With squeeze (the default) one row or column gives a 1-D array and 1 x 1 a single Axes (not judged)."""
    nrows = grid[0] if grid and not _is_sentinel(grid[0]) else None
    ncols = grid[1] if len(grid) > 1 and not _is_sentinel(grid[1]) else None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in (nrows, ncols)):
        return None
    assert isinstance(nrows, int) and isinstance(ncols, int)
    if squeeze is True:
        if nrows == 1 and ncols == 1:
            return None
        shape = [nrows * ncols] if nrows == 1 or ncols == 1 else [nrows, ncols]
    elif squeeze is False:
        shape = [nrows, ncols]
    else:
        return None
    return (None, Facts(name=text + "[1]", type=NDARRAY, kind="ndarray", shape=shape, dtype="object",
                        length=shape[0]))


# scikit-learn transformers that keep X's shape and let NaN through (ignored in fit, kept in transform), since 0.20.
NAN_KEEPING_SCALERS = {"StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler", "PowerTransformer",
                       "QuantileTransformer"}


def scaler(qual: str, text: str) -> Facts | None:
    """`StandardScaler()` (no arguments that could change its output shape): an unfitted estimator's facts."""
    if not qual.startswith("sklearn.preprocessing") or qual.rsplit(".", 1)[-1] not in NAN_KEEPING_SCALERS:
        return None
    module, cls = qual.rsplit(".", 1)
    return Facts(name=text, type=qual, kind="estimator",
                 estimator=EstimatorFacts(class_name=cls, module=module, is_fitted=False))


def scaled(est: Facts, x: Facts, fitted: bool, text: str) -> Facts | None:
    """`scaler.fit_transform(X)` / `scaler.transform(X)` of numeric 2-D X: a float ndarray of X's shape with X's
    NaN (scikit-learn's scalers ignore NaN in fit and keep them in transform)."""
    e = est.estimator
    if e is None or e.class_name not in NAN_KEEPING_SCALERS or not e.module.startswith("sklearn.preprocessing"):
        return None
    if not fitted and not e.is_fitted:
        return None
    if x.kind == "dataframe":
        cols = _complete_columns(x)
        if not cols or not all(c.dtype.startswith(_NUMERIC_PREFIXES) for c in cols):
            return None
        n = rows(x)
        shape = [n, len(cols)] if n is not None else None
    elif x.kind == "ndarray" and x.shape and len(x.shape) == 2 and (x.dtype or "").startswith(_NUMERIC_PREFIXES):
        shape = list(x.shape)
    else:
        return None
    if shape is None or (e.n_features_in is not None and e.is_fitted and not fitted and e.n_features_in != shape[1]):
        return None
    return Facts(name=text, type=NDARRAY, kind="ndarray", shape=shape, length=shape[0], dtype="float64",
                 has_nan=x.has_nan, n_nan=x.n_nan, truncated=x.truncated, sampled=x.sampled)


def _unplaced(f: Facts) -> Facts:
    """`f` without the rows of its first unparsable values (a filled row may now be the first)."""
    cols = [msgspec.structs.replace(c, non_numeric_position=None) for c in f.columns] if f.columns is not None else None
    return _replace(f, columns=cols, non_numeric_position=None)


def _no_nan(f: Facts) -> Facts:
    cols = [msgspec.structs.replace(c, n_nan=0) for c in f.columns] if f.columns is not None else None
    return _replace(f, columns=cols, has_nan=False, n_nan=0)


def _reshape(f: Facts, shape: list[Any], text: str) -> Facts | None:
    if not shape or f.shape is None or not all(isinstance(d, int) for d in shape) or shape.count(-1) > 1:
        return None
    total = math.prod(f.shape)
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or total % known:
            return None
        shape = [total // known if d == -1 else d for d in shape]
    if math.prod(shape) != total:
        return None
    return _replace(f, name=text, shape=shape, length=shape[0])


def fitted(f: Facts) -> Facts:
    if f.estimator is None:
        return f
    est = msgspec.structs.replace(f.estimator, is_fitted=True, n_features_in=None, feature_names_in=None, classes=None)
    return _replace(f, estimator=est)


def set_column(f: Facts, key: Any, value: Facts | None) -> Facts | None:
    cols = _complete_columns(f)
    if cols is None:
        return None
    name = key if isinstance(key, str) else repr(key)
    dtype = value.dtype if value is not None and value.kind in ("series", "ndarray", "scalar") and value.dtype else "unknown"
    if value is not None and value.kind == "scalar" and not value.dtype:
        dtype = {"builtins.int": "int64", "builtins.float": "float64", "builtins.bool": "bool"}.get(value.type, "unknown")
    if value is not None and value.kind == "str":
        dtype = "object"
    n_nan = value.n_nan if value is not None and value.n_nan is not None and not value.truncated else 0
    new = ColumnFacts(name=name, dtype=dtype, n_nan=n_nan)
    out = [new if c.name == name else c for c in cols]
    if all(c.name != name for c in cols):
        out.append(new)
    return _frame(f, out, f.name)


def train_test_split(arrays: list[Any], kw: dict[str, Any], texts: list[str]) -> tuple | None:
    if not arrays or any(not isinstance(a, Facts) for a in arrays):
        return None
    n = rows(arrays[0])
    if any(rows(a) != n for a in arrays[1:]):
        return None  # inconsistent lengths: it raises
    test_size = kw.get("test_size", None)
    n_test = None
    if n is not None and "train_size" not in kw:
        if test_size is None:
            n_test = math.ceil(0.25 * n)
        elif isinstance(test_size, float) and 0 < test_size < 1:
            n_test = math.ceil(test_size * n)
        elif isinstance(test_size, int) and not isinstance(test_size, bool) and 0 < test_size < n:
            n_test = test_size
    n_train = n - n_test if n_test is not None and n is not None else None
    out: list[Any] = []
    for a, t in zip(arrays, texts, strict=False):
        out.append(row_subset(a, n_train, f"{t}[train]"))
        out.append(row_subset(a, n_test, f"{t}[test]"))
    return tuple(out)


_TORCH_FROM_NUMPY = {
    "float64": "torch.float64", "float32": "torch.float32", "float16": "torch.float16", "int64": "torch.int64",
    "int32": "torch.int32", "int16": "torch.int16", "int8": "torch.int8", "uint8": "torch.uint8", "bool": "torch.bool",
}  # fmt: skip
_TENSOR_CASTS = {"float": "torch.float32", "double": "torch.float64", "half": "torch.float16", "long": "torch.int64",
                 "int": "torch.int32", "bool": "torch.bool"}


def numpy_to_tensor(f: Facts, text: str) -> Facts | None:
    """`torch.from_numpy(a)` / `torch.as_tensor(a)` / `torch.tensor(a)` of an ndarray: same shape, numpy's dtype."""
    if f.kind != "ndarray" or not f.shape or f.dtype not in _TORCH_FROM_NUMPY:
        return None
    return Facts(name=text, type="torch.Tensor", kind="tensor", shape=list(f.shape), length=f.shape[0],
                 dtype=_TORCH_FROM_NUMPY[f.dtype], device="cpu", truncated=f.truncated)


def _is_sentinel(v: Any) -> bool:
    return type(v).__name__ == "_No"
