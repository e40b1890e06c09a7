"""Shared helpers of the library-misuse rules: reading runtime Facts (kinds, shapes, sample counts, columns
that do not convert to numbers, NaNs) and rendering them as one-line evidence.

Everything here is pure: functions over `crane.probe.facts` structs and `ast` nodes, no kernel, no context.
Every question answers `None` when the facts do not decide it: a rule that cannot decide says nothing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from crane import pyast
from crane.probe.facts import ColumnFacts, Facts


@dataclass
class Verdict:
    """What a pure check concludes: the crash a call will raise, and why."""

    ename: str
    message: str
    root_cause: str
    evidence: list[str] = field(default_factory=list)
    confidence: float = 0.9


# -- kinds ---------------------------------------------------------------------------------------------------
def is_dataframe(f: Facts | None) -> TypeGuard[Facts]:
    """A pandas DataFrame (polars frames are kind "polars_frame": their API differs)."""
    return f is not None and (
        f.kind == "dataframe" or (f.type.endswith("DataFrame") and not f.type.startswith("polars."))
    )


def is_series(f: Facts | None) -> TypeGuard[Facts]:
    return f is not None and (f.kind == "series" or (f.type.endswith(".Series") and not f.type.startswith("polars.")))


def is_ndarray(f: Facts | None) -> TypeGuard[Facts]:
    return f is not None and (f.kind == "ndarray" or f.type == "numpy.ndarray")


def is_tensor(f: Facts | None) -> TypeGuard[Facts]:
    return f is not None and (f.kind == "tensor" or f.type == "torch.Tensor")


def is_array_like(f: Facts | None) -> bool:
    """pandas/numpy data whose shape the facts describe."""
    return is_dataframe(f) or is_series(f) or is_ndarray(f)


def shape_of(f: Facts | None) -> tuple[int, ...] | None:
    """The full shape, when known (DataFrame: rows x columns; Series: (length,))."""
    if f is None:
        return None
    if f.shape is not None:
        return tuple(int(d) for d in f.shape)
    if is_series(f) and f.length is not None:
        return (f.length,)
    if is_dataframe(f) and f.length is not None and f.columns is not None and not f.columns_truncated:
        return (f.length, len(f.columns))
    return None


def n_samples(f: Facts | None) -> int | None:
    """Number of samples (first dimension) of array-like data, or None."""
    if f is None:
        return None
    shp = shape_of(f)
    if shp is not None and len(shp) >= 1:
        return shp[0]
    if f.kind in ("list", "tuple") and f.length is not None:
        return f.length
    if is_dataframe(f) or is_series(f):
        return f.length
    return None


def ndim(f: Facts | None) -> int | None:
    shp = shape_of(f)
    if shp is not None:
        return len(shp)
    if is_series(f):
        return 1
    if is_dataframe(f):
        return 2
    return None


def n_columns(f: Facts | None) -> int | None:
    """Number of features of 2-D data, when certain."""
    if is_dataframe(f):
        if f.columns is not None and not f.columns_truncated:
            return len(f.columns)
        shp = shape_of(f)
        return shp[1] if shp and len(shp) == 2 else None
    shp = shape_of(f)
    if shp is not None and len(shp) == 2:
        return shp[1]
    return None


def column_names(f: Facts | None) -> list[str] | None:
    """All column names of a DataFrame, or None when unknown or truncated."""
    if not is_dataframe(f) or f.columns is None or f.columns_truncated:
        return None
    return [c.name for c in f.columns]


def index_level_names(f: Facts | None) -> set[str] | None:
    """The names of a DataFrame/Series index's levels (unnamed levels left out), or None when unknown. A label
    that is not a column may still resolve to one of these (merge `on=`, seaborn variables)."""
    if f is None or f.index is None:
        return None
    if f.index.names is None:
        return set() if f.index.type == "RangeIndex" else None  # facts without level names: a RangeIndex
    return {n for n in f.index.names if n is not None}


# -- values --------------------------------------------------------------------------------------------------
NUMERIC_DTYPE_PREFIXES = ("int", "uint", "float", "bool", "complex", "Int", "UInt", "Float", "boolean")
TEXT_DTYPES = ("object", "string", "str")


def is_numeric_dtype(dtype: str | None) -> bool:
    return bool(dtype and dtype.startswith(NUMERIC_DTYPE_PREFIXES))


def is_text_dtype(dtype: str | None) -> bool:
    return bool(dtype and (dtype in TEXT_DTYPES or dtype.startswith("<U") or dtype.startswith("string")))


# numpy 2 scalar reprs: np.int64(7), np.float64(0.5), np.str_('abc'), np.True_ (numpy 1: 7, 0.5, 'abc', True)
_NUMPY_SCALAR_REPR = re.compile(r"^np\.(?:str_|bytes_|u?int(?:8|16|32|64|c|p)?|float(?:16|32|64|128)?|"
                                r"longdouble|double|single|half|bool_?|complex(?:64|128|256)?|longlong|ulonglong|"
                                r"short|ushort|intc|uintc|intp|uintp|byte|ubyte)\((.*)\)$", re.S)


def unwrap_numpy_repr(text: str) -> str:
    """The Python literal inside a numpy 2 scalar repr (`np.str_('abc')` -> `'abc'`), else the text itself."""
    t = text.strip()
    if t in ("np.True_", "np.False_"):
        return t[3:-1]
    m = _NUMPY_SCALAR_REPR.match(t)
    return m.group(1) if m else text


def _literal(text: str) -> Any:
    try:
        return pyast.literal_eval(unwrap_numpy_repr(text))
    except Exception:
        return _NOVALUE


_NOVALUE = object()


def parses_as_float(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def non_numeric_text(c: ColumnFacts | Facts, truncated: bool = False) -> str | None:
    """For object/string/category data: a string value that float() rejects, or None when every value
    converts or the facts cannot tell. The probe tries float() on the non-null values and reports the first
    failure as a repr; only failures that are strings count (float() of other objects raises TypeError).
    `truncated`: the data is a row subset of what the facts describe (synthesised facts), so only a column
    where no value parses ("none") still certainly holds a bad value."""
    dtype = c.dtype or ""
    if not (is_text_dtype(dtype) or dtype == "category"):
        return None
    if c.numeric_parse not in (("none",) if truncated else ("some", "none")):
        return None
    example = c.non_numeric_example
    if example is None:
        return None
    lit = _literal(example)
    if not isinstance(lit, str) or parses_as_float(lit):
        return None
    return lit


def bad_columns(f: Facts) -> list[tuple[ColumnFacts, str]] | None:
    """Columns of a DataFrame holding strings that do not convert to float; None when the facts cannot
    tell (truncated column lists are fine: a single bad column decides)."""
    if f.columns is None:
        return None
    out = []
    for c in f.columns:
        bad = non_numeric_text(c, f.truncated)
        if bad is not None:
            out.append((c, bad))
    return out


def column(f: Facts | None, name: str) -> ColumnFacts | None:
    if f is None or f.columns is None:
        return None
    for c in f.columns:
        if c.name == name:
            return c
    return None


def _column_nans(c: ColumnFacts) -> int | None:
    """A column's NaN count; a sampled column's is not a count: 1 when NaNs were seen, unknown otherwise."""
    if c.sampled:
        return 1 if c.has_nan else None
    return c.n_nan


def nan_count(f: Facts) -> int | None:
    """How many NaN values array-like data holds (0 = none), when known (a lower bound when some columns
    were only sampled and NaNs were seen)."""
    if is_dataframe(f) and f.columns is not None:
        counts = [_column_nans(c) for c in f.columns]
        seen = sum(n for n in counts if n)
        if seen:
            return seen
        if f.columns_truncated or any(n is None for n in counts):
            return f.n_nan
        return 0
    if f.n_nan is not None:
        return f.n_nan
    if f.has_nan is not None:
        return 1 if f.has_nan else 0
    return None


# -- rendering ----------------------------------------------------------------------------------------------
def type_label(f: Facts) -> str:
    t = f.type
    for long, short in (
        ("pandas.core.frame.DataFrame", "pandas DataFrame"),
        ("pandas.core.series.Series", "pandas Series"),
        ("numpy.ndarray", "numpy ndarray"),
        ("torch.Tensor", "torch Tensor"),
    ):
        if t == long:
            return short
    return t.rsplit(".", 1)[-1] if "." in t else t


def shape_text(shape: Iterable[int] | None) -> str:
    if shape is None:
        return "?"
    dims = tuple(shape)
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def describe_column(c: ColumnFacts, example: str | None = None) -> str:
    bits = [c.dtype]
    if example is not None:
        bits.append(repr(example))
    elif c.example_values:
        bits.append(c.example_values[0])
    if c.n_nan:
        bits.append(f"{c.n_nan} NaN")
    return f"{c.name} ({', '.join(bits)})"


def describe(
    label: str, f: Facts, columns: list[tuple[ColumnFacts, str | None]] | None = None, max_columns: int = 4
) -> str:
    """One line of evidence: "X_train: pandas DataFrame (80, 16), columns street (object, 'Rue 12'), ..."."""
    text = f"{label}: {type_label(f)}"
    shp = shape_of(f)
    if shp is not None:
        text += f" {shape_text(shp)}"
    if f.dtype and not is_dataframe(f):
        text += f" dtype {f.dtype}"
    if columns:
        shown = ", ".join(describe_column(c, ex) for c, ex in columns[:max_columns])
        more = len(columns) - max_columns
        text += f", columns {shown}" + (f" and {more} more" if more > 0 else "")
    return text


# -- ast -----------------------------------------------------------------------------------------------------
def has_star_args(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def arg(call: ast.Call, pos: int, name: str | None = None) -> ast.expr | None:
    """The argument bound at position `pos` or passed as keyword `name` (no *args/**kwargs)."""
    if name is not None:
        kw = keyword(call, name)
        if kw is not None:
            return kw
    if pos < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return call.args[pos]
    return None


def literal(node: ast.AST | None) -> Any:
    """ast.literal_eval of a node, or _NOVALUE."""
    if node is None:
        return _NOVALUE
    try:
        return ast.literal_eval(node)
    except Exception:
        return _NOVALUE


NOVALUE = _NOVALUE
