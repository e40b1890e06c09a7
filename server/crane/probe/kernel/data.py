"""CRANE kernel probe: value facts of numpy arrays and pandas Series and indexes (standard library
only).

numpy and pandas are reached through `sys.modules` (via `Ctx`). Every scan is bounded: an exact pass over the
data only when it fits the value's scan budget (`Ctx.can_scan`), otherwise a strided sample, flagged `sampled`.
The exact passes are kernel/scan's: one read of the data for a numeric column's missing values and range, pandas'
`is_string_array` for an object column of strings. Index facts are reused while the kernel's state is unchanged
(kernel/cache). DataFrames are kernel/frame's.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from crane.probe.kernel.cache import recall, remember  # kernel: strip
from crane.probe.kernel.common import (  # kernel: strip
    EXAMPLE_CHARS,  # kernel: strip
    OBJECT_WEIGHT,  # kernel: strip
    Ctx,  # kernel: strip
    in_lib,  # kernel: strip
    isa,  # kernel: strip
    jval,  # kernel: strip
    short,  # kernel: strip
    short_tname,  # kernel: strip
    tmodule,  # kernel: strip
    trunc,  # kernel: strip
)  # kernel: strip
from crane.probe.kernel.scan import (  # kernel: strip
    SAMPLE_N,  # kernel: strip
    _kind_char,  # kernel: strip
    count_missing,  # kernel: strip
    memory_key,  # kernel: strip
    missing_mask,  # kernel: strip
    number_scan,  # kernel: strip
    object_scan,  # kernel: strip
    sample_rows,  # kernel: strip
    scan_weight,  # kernel: strip
)  # kernel: strip

UNIQUE_N = 50000  # most elements `unique` is computed on (a strided sample beyond)
UNIQUE_N_OBJECT = 10000  # the same for object arrays (their element types are checked one by one first)
PARSE_N = 2000  # most non-null values tried with float() for numeric_parse
POSITION_N = 4096  # elements compared at once when looking for the row of the first value that does not parse
UNFINISHED_SAMPLE_N = 5000  # elements sampled for the facts of a value while its exact pass goes on (~0.2 ms)


_SAFE_ELEMENT_TYPES = frozenset([str, int, float, bool, bytes, type(None)])


def _safe_elements(ctx: Ctx, values: Any) -> bool:
    """Every element is a str/number/None or a numpy/pandas/datetime scalar (hashing them runs no user code)."""
    np, pd = ctx.np, ctx.pd
    extra = set()
    for t in set(map(type, values)):
        if t in _SAFE_ELEMENT_TYPES:
            continue
        if (np is not None and issubclass(t, np.generic)) or tmodule(t) in ("datetime", "decimal"):
            continue
        if pd is not None and (issubclass(t, pd.Timestamp) or issubclass(t, pd.Timedelta)):
            continue
        extra.add(t)
    return not extra


def _sorted_jvals(ctx: Ctx, values: Any) -> list[Any]:
    vals = [jval(x, ctx) for x in values]
    try:
        return sorted(vals)
    except Exception:
        return vals


def numeric_parse(ctx: Ctx, values: Any, out: dict[str, Any]) -> str | None:
    """Do the values parse as numbers? 'all' | 'some' | 'none' on up to PARSE_N (distinct) values, with the first
    that fails
    (as Python's error message shows it: the repr of the string). Returns that first failing value when it is a
    str and no value before it is one float() takes but pandas' own parser (`pd.to_numeric`) rejects
    (`_lenient`): then, the values being in row order, it is also the first value `pd.to_numeric` stops at."""
    np = ctx.np
    ok = bad = 0
    first_bad = None
    found = None
    lenient = False
    for i, x in enumerate(values):
        if i >= PARSE_N:
            break
        t = type(x)
        if t is str:
            try:
                float(x)
                ok += 1
                lenient = lenient or (first_bad is None and _lenient(x))
                continue
            except ValueError:
                pass
        elif t in (int, float, bool) or (np is not None and (isa(x, np.number) or isa(x, np.bool_))):
            ok += 1
            continue
        bad += 1
        if first_bad is None:
            first_bad = repr(trunc(x, 40)) if t is str else short(x, ctx, 40)
            found = x if t is str and not lenient else None
    if ok + bad == 0:
        return None
    out["numeric_parse"] = "all" if not bad else ("none" if not ok else "some")
    if first_bad is not None:
        out["non_numeric_example"] = first_bad
    return found


def _lenient(s: str) -> bool:
    """A string float() takes that pandas' number parser rejects (on some version): digits grouped by '_', non-ASCII
    digits or spaces, NaN spelled out, a number too large for a float ('1e500': inf to float(), refused by pandas
    2.x's parser)."""
    if "_" in s or not s.isascii():
        return True
    word = s.strip().lstrip("+-").lower()
    return word == "nan" or (word not in ("inf", "infinity") and abs(float(s)) == float("inf"))


def first_position(ctx: Ctx, a: Any, value: str) -> int | None:
    """The row of the first element of 1-D `a` equal to `value`: a vectorised comparison over chunks growing
    4x from POSITION_N, those past the first on the scan budget, so the cost follows the row; None past it.
    Only for data whose elements are str/number/None/library scalars (comparing them runs no user code)."""
    np = ctx.np
    n = len(a)
    lo, size = 0, POSITION_N
    while lo < n:
        chunk = a[lo:lo + size]
        if lo and not ctx.can_scan(len(chunk) * OBJECT_WEIGHT):
            return None
        eq = chunk == value
        if not isa(eq, np.ndarray):  # a nullable BooleanArray: a missing value is not equal
            eq = eq.to_numpy(dtype=bool, na_value=False)
        hits = np.flatnonzero(eq)
        if len(hits):
            return lo + int(hits[0])
        lo += size
        size *= 4
    return None


def _position(ctx: Ctx, a: Any, bad: str | None, out: dict[str, Any], ordered: bool) -> None:
    """`non_numeric_position`: the row of the first value `pd.to_numeric` rejects, when every row was looked at
    (`ordered`: the distinct values were taken in row order from all of `a`, and comparing runs no user code)."""
    if bad is None or not ordered or out.get("sampled"):
        return
    try:
        pos = first_position(ctx, a, bad)
    except Exception as exc:
        ctx.error("non_numeric_position", exc)
        return
    if pos is not None:
        out["non_numeric_position"] = pos


def _uniques(ctx: Ctx, src: Any, kc: str, is_np: bool, strings: bool = False) -> tuple[Any, int | None]:
    """(unique values, how many) of `src`, or (None, None) when hashing could run user code or fails.
    `strings`: every element is already known to be a str."""
    np, pd = ctx.np, ctx.pd
    # Hashing runs __hash__/__eq__: for object arrays only when every element has a builtin/library scalar type.
    if kc == "O" and is_np and not strings and not _safe_elements(ctx, src):
        return None, None
    try:
        uniq = pd.unique(src) if pd is not None else np.unique(src)
        return uniq, len(uniq)
    except Exception:  # unhashable or unorderable values
        return None, None


def vector_facts(
    ctx: Ctx,
    a: Any,
    out: dict[str, Any],
    exact: bool | None = None,
    kind_key: str = "value_kind",
    details: bool = True,
    missing: int | None = None,
    strings: bool = False,
    resumable: bool = True,
) -> None:
    """Value facts of a 1-D ndarray or pandas ExtensionArray into `out` (Facts or ColumnFacts fields):
    n_nan/has_nan, kind, num_unique, unique_values, value_range, example_values, numeric_parse.
    `exact`: True = the caller already reserved the scan, False = `a` is already a sample, None = decide here.
    `kind_key`: where the value kind goes ("kind" in ColumnFacts, "value_kind" in Facts).
    `details`: False = only the missing-value count and, for text-like data, numeric_parse.
    `missing`: the exact number of missing values, when already known (with exact=True); `strings`: every
    element is known to be a str (pandas proved it). `resumable`: the exact pass may stop at the call's scan
    slice and go on in the next call (False when `a` is a temporary copy: nothing could go on)."""
    np = ctx.np
    n = len(a)
    if n == 0:
        out[kind_key] = "empty"
        return
    kc = _kind_char(a.dtype)
    is_np = isa(a, np.ndarray)
    if exact is None:
        exact = ctx.can_scan(n * scan_weight(kc, is_np, a))
        if not exact:
            a = sample_rows(a, SAMPLE_N)
    sampled = not exact
    resumable = resumable and exact
    numeric = kc in "iuf"
    rng = None  # (min, max) when the exact pass gave them
    limit = UNIQUE_N if kc != "O" or not is_np else UNIQUE_N_OBJECT
    src = None  # the values uniques come from, when the exact pass sampled them
    nn: int | None  # missing values (None: the dtype cannot hold any)
    if missing is not None and exact:
        nn = missing
    elif is_np and a.ndim == 1 and (kc in "fmM" or (details and kc in "iu")):
        # one read of the data: the count, the range and the sample for uniques when wanted
        keep = min(limit, SAMPLE_N) if details and len(a) > limit else 0
        nn, lo, hi, src, done = number_scan(ctx, a, kc, details, keep, resumable)
        if not done:
            _unfinished(ctx, a, out, kind_key, details, nn)
            return
        rng = (lo, hi) if details and lo is not None else None
        nn = None if kc in "iu" else nn  # integers cannot hold NaN
    elif is_np and kc == "O" and a.ndim == 1 and not strings:
        nn, strings, done = object_scan(ctx, a, resumable)
        if not done:
            _unfinished(ctx, a, out, kind_key, details, nn)
            return
    else:
        nn = count_missing(ctx, a, kc, is_np)
    if sampled:
        out["sampled"] = True
    if nn is None or not sampled:  # integer/bool arrays cannot hold NaN: exact even on a sample
        out["n_nan"] = nn or 0
        out["has_nan"] = bool(nn)
    elif nn:
        out["has_nan"] = True
    m = len(a)  # elements looked at
    if nn == m:
        out[kind_key] = "empty"
        return
    text_like = not (numeric or kc in "bcmM")
    if not details and not text_like:
        return
    if m > limit:  # already a sample then: the smaller one is as good
        if src is None:
            src = a[:: int(math.ceil(m / float(min(limit, SAMPLE_N))))]
        out["sampled"] = True
    else:
        src = a
    valid = src[~missing_mask(ctx, src, kc, is_np)] if nn else src  # the values uniques and examples come from
    if len(valid) == 0:
        valid = a[~missing_mask(ctx, a, kc, is_np)][:limit]
    uniq, nu = _uniques(ctx, valid, kc, is_np, strings)
    if not details:
        if nu is not None:
            out["num_unique"] = nu
        bad = numeric_parse(ctx, uniq[:PARSE_N] if uniq is not None else valid[:PARSE_N], out)
        _position(ctx, a, bad, out, src is a and _row_ordered(ctx, uniq, strings))
        return
    if nu is not None:
        out["num_unique"] = nu
    if kc == "b":
        out[kind_key] = "binary" if nu == 2 else "categorical"
        if uniq is not None:
            out["unique_values"] = _sorted_jvals(ctx, uniq)
    elif numeric:
        try:
            out["value_range"] = [jval(v, ctx) for v in (rng or _value_range(ctx, a, kc, is_np, nn))]
        except Exception as exc:
            ctx.error("value_range", exc)
        if nu is not None:
            out[kind_key] = "binary" if nu == 2 else ("categorical" if nu <= 10 else "continuous")
            if nu <= 5:
                out["unique_values"] = _sorted_jvals(ctx, uniq)
    elif kc in "mM":
        out[kind_key] = "datetime"
        try:
            out["value_range"] = [str(v) for v in (rng or _value_range(ctx, a, kc, is_np, nn))]
        except Exception as exc:
            ctx.error("value_range", exc)
    elif kc == "c":
        out[kind_key] = "continuous"
    else:
        is_cat = short_tname(type(a.dtype)) == "CategoricalDtype"
        if uniq is not None and nu <= 5:  # type: ignore[operator]  # `nu` is an int whenever `uniq` is set
            out["unique_values"] = _sorted_jvals(ctx, uniq)
        else:
            ex = []
            for x in (uniq if uniq is not None else valid[:50]):
                s = trunc(x, EXAMPLE_CHARS) if type(x) is str else short(x, ctx, EXAMPLE_CHARS)
                if s not in ex:
                    ex.append(s)
                if len(ex) >= 5:
                    break
            out["example_values"] = ex
        if nu is not None and (nu == 2 or is_cat or nu <= 10):
            out[kind_key] = "binary" if nu == 2 else "categorical"
        else:
            first = valid[0]
            out[kind_key] = "text" if type(first) is str else "other"
        # distinct values answer the same question, far faster (one float() per distinct string)
        bad = numeric_parse(ctx, uniq[:PARSE_N] if uniq is not None else valid[:PARSE_N], out)
        _position(ctx, a, bad, out, src is a and _row_ordered(ctx, uniq, strings))


def _row_ordered(ctx: Ctx, uniq: Any, strings: bool) -> bool:
    """Were the values numeric_parse saw in row order, and are `a`'s elements safe to compare? pandas' `unique`
    keeps the order of first appearance (numpy's sorts); without distinct values (hashing could run user code,
    or failed) only elements known to be str are."""
    return ctx.pd is not None if uniq is not None else strings


def _unfinished(ctx: Ctx, a: Any, out: dict[str, Any], kind_key: str, details: bool, nn: int) -> None:
    """Facts of `a` while its exact pass is unfinished (the next call while nothing runs goes on with it): those
    of a small sample (UNFINISHED_SAMPLE_N), `sampled`, plus the missing values the rows read so far showed
    (has_nan; none seen: unknown). Remembered for the memory while the pass is unfinished."""
    key = memory_key(ctx, a)[0]
    key = ("unfinished", key, kind_key, details) if key is not None else None
    hit = recall(key, counted=False) if key is not None else None
    if hit is not None:  # the same memory reached again in this call (`df.c3` and column c3), or in the last one
        out.update(hit)
    else:
        facts: dict = {}
        vector_facts(ctx, sample_rows(a, UNFINISHED_SAMPLE_N), facts, exact=False, kind_key=kind_key, details=details)
        if key is not None:
            remember(key, dict(facts))
        out.update(facts)
    out["sampled"] = True
    if nn:
        out["has_nan"] = True


def _value_range(ctx: Ctx, a: Any, kc: str, is_np: bool, nn: int | None) -> tuple[Any, Any]:
    """(min, max) of the non-missing values of `a` (which holds some): NaN-skipping reductions for floats, no copy."""
    np = ctx.np
    if is_np and kc == "f":
        return (np.fmin.reduce(a), np.fmax.reduce(a)) if nn else (a.min(), a.max())
    valid = a[~missing_mask(ctx, a, kc, is_np)] if nn else a
    return valid.min(), valid.max()


def strided_sample(ctx: Ctx, a: Any) -> Any:
    """A bounded sample (about SAMPLE_N elements) of an n-D array, flattened, reading only what it keeps."""
    if a.flags.c_contiguous:
        flat = a.reshape(-1)
        return flat[:: int(math.ceil(flat.size / float(SAMPLE_N)))]
    k = max(1, int(SAMPLE_N ** (1.0 / a.ndim)))
    sl = tuple(slice(None, None, max(1, int(math.ceil(d / float(k))))) for d in a.shape)
    return a[sl].reshape(-1)


def ndarray_facts(ctx: Ctx, a: Any, out: dict[str, Any]) -> None:
    out["shape"] = [int(d) for d in a.shape]
    out["dtype"] = str(a.dtype)
    if a.dtype.names is not None or _kind_char(a.dtype) == "V":
        return
    if a.ndim == 0:
        out["value"] = short(a[()], ctx)
        return
    if a.size == 0:
        out["value_kind"] = "empty"
        return
    if a.ndim == 1:
        vector_facts(ctx, a, out)
        return
    if ctx.can_scan(a.size * scan_weight(_kind_char(a.dtype), True)):
        flat = a.reshape(-1)  # a view when `a` is C-contiguous, else a copy (that cannot be resumed)
        vector_facts(ctx, flat, out, exact=True, resumable=bool(ctx.np.may_share_memory(flat, a)))
    else:
        vector_facts(ctx, strided_sample(ctx, a), out, exact=False)


def column_values(df: Any, i: int) -> Any:
    """Column i's array without building a Series (and without filling the frame's item cache)."""
    try:
        return df._mgr.iget_values(i)
    except Exception:
        return df.iloc[:, i]._values


def label_str(label: Any, ctx: Ctx) -> str:
    return label if type(label) is str else short(label, ctx, 40)


_dtype_names: dict = {}


def dtype_str(dtype: Any) -> str:
    """str(dtype), remembered per dtype object (numpy's str of a dtype is slow next to the rest of a column)."""
    try:
        s = _dtype_names.get(id(dtype))
        if s is not None and s[0] is dtype:
            return s[1]
        s = str(dtype)
        np = sys.modules.get("numpy")
        if np is not None and isa(dtype, np.dtype) and len(_dtype_names) < 1000:
            _dtype_names[id(dtype)] = (dtype, s)
        return s
    except Exception:
        return "?"


def string_dtype(dtype: Any, out: dict[str, Any]) -> None:
    """pandas' StringDtype (pandas 3's default `str`, or "string"): its storage ("pyarrow": `.values` is an
    ArrowStringArray, which cannot reshape; "python") and repr (numpy's "Cannot interpret '<StringDtype(...)>' as a
    data type" names it). Other dtypes: nothing."""
    t = type(dtype)
    if getattr(t, "__name__", None) != "StringDtype" or not in_lib(t, ("pandas",)):
        return
    try:
        storage = object.__getattribute__(dtype, "storage")
        out["string_storage"] = str.__getitem__(str(storage), slice(0, 20))
        out["dtype_repr"] = str.__getitem__(repr(dtype), slice(0, 80))
    except Exception:
        pass


def series_facts(ctx: Ctx, s: Any, out: dict[str, Any]) -> None:
    if in_lib(type(s), ("pandas",)):  # a user subclass could make `name` a property of its own
        try:
            name = s.name
            out["has_name"] = name is not None
            if name is not None:
                out["series_name"] = label_str(name, ctx)
        except Exception as exc:
            ctx.error("series name", exc)
    a = s._values
    out["dtype"] = str(a.dtype)
    string_dtype(a.dtype, out)
    out["length"] = len(s)
    out["shape"] = [len(s)]
    vector_facts(ctx, a, out)
    out["index"] = index_facts(ctx, s.index)


MAX_LEVELS = 10


def index_facts(ctx: Ctx, idx: Any) -> dict[str, Any]:
    key = ("index", id(idx))
    hit = recall(key)
    if hit is not None:
        return dict(hit)
    cuts = ctx.cuts
    d = _index_facts(ctx, idx)
    if ctx.cuts == cuts:
        remember(key, dict(d))
    return d


def _index_facts(ctx: Ctx, idx: Any) -> dict[str, Any]:
    n = len(idx)
    d = {"type": short_tname(type(idx)), "dtype": str(idx.dtype), "length": n}
    try:
        if in_lib(type(idx), ("pandas",)):
            names = list(idx.names)
            if len(names) <= MAX_LEVELS:
                d["names"] = [None if x is None else label_str(x, ctx) for x in names]
    except Exception as exc:
        ctx.error("index names", exc)
    try:
        if d["type"] == "RangeIndex":
            d["start"], d["stop"], d["step"] = int(idx.start), int(idx.stop), int(idx.step)
            d["unique"] = True
        elif d["type"] != "MultiIndex" and n and ctx.can_scan(n * OBJECT_WEIGHT):
            if _kind_char(idx.dtype) in "iufmM":
                d["min"], d["max"] = jval(idx.min(), ctx), jval(idx.max(), ctx)
            d["unique"] = bool(idx.is_unique)
    except Exception as exc:
        ctx.error("index", exc)
    return d
