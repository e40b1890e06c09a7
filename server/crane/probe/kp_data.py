"""CRANE kernel probe, part 3 of 6: facts about numpy arrays and pandas objects (standard library only).

numpy and pandas are reached through `sys.modules` (via `Ctx`). Every scan is bounded: an exact pass over the
data only when it fits the value's scan budget (`Ctx.can_scan`), otherwise a strided sample, flagged `sampled`.
Missing values are counted on the libraries' fast paths (a float minimum propagates NaN; pandas'
`is_string_array` proves an object column holds only strings), which read the data once without a temporary.
DataFrames of more than SMALL_FRAME values give value facts only for the columns the target cell mentions
(`Ctx.wanted`); every listed column gets its name, dtype and NaN count, and text-like columns their
numeric_parse. Column and index facts are reused while the kernel's state is unchanged (kp_cache).
"""

import math
import sys

from crane.probe.kp_cache import recall, remember  # kernel: strip
from crane.probe.kp_common import (  # kernel: strip
    EXAMPLE_CHARS,  # kernel: strip
    OBJECT_WEIGHT,  # kernel: strip
    in_lib,  # kernel: strip
    isa,  # kernel: strip
    jval,  # kernel: strip
    short,  # kernel: strip
    short_tname,  # kernel: strip
    tmodule,  # kernel: strip
    trunc,  # kernel: strip
)  # kernel: strip

SAMPLE_N = 20000  # elements kept by a strided sample
UNIQUE_N = 50000  # most elements `unique` is computed on (a strided sample beyond)
UNIQUE_N_OBJECT = 10000  # the same for object arrays (their element types are checked one by one first)
PARSE_N = 2000  # most non-null values tried with float() for numeric_parse
MAX_COLS = 200  # DataFrame columns listed at all
MAX_DETAILED_COLS = 60  # DataFrame columns given value facts
SMALL_FRAME = 100000  # a frame of at most this many values gets value facts for every column (about 1-3 ms)


def _kind_char(dtype):
    try:
        k = dtype.kind
        return k if isinstance(k, str) else "O"
    except Exception:
        return "O"


def scan_weight(kc, is_np, a=None):
    """Cost of reading one element exactly, in scan-budget units: numbers 1, Python objects OBJECT_WEIGHT; a
    strided 1-D numpy array (a column of a frame built from a 2-D array) costs the cache lines it touches."""
    w = 1 if (is_np and kc in "biufcmM") else OBJECT_WEIGHT
    if a is not None and is_np:
        try:
            step = abs(int(a.strides[0])) // max(1, int(a.itemsize)) if a.ndim == 1 else 1
            w *= max(1, min(step, 8))
        except Exception:
            pass
    return w


def _pandas_lib():
    return sys.modules.get("pandas._libs.lib")


def _missing_mask(ctx, a, kc, is_np):
    np, pd = ctx.np, ctx.pd
    if is_np and kc in "biu":
        return None
    if is_np and kc in "fc":
        return np.isnan(a)
    if is_np and kc in "mM":
        return np.isnat(a)
    if pd is not None:
        return np.asarray(pd.isna(a), dtype=bool)
    # object array without pandas: None and float NaN are missing
    return np.fromiter((x is None or (type(x) is float and x != x) for x in a), dtype=bool, count=len(a))


def count_missing(ctx, a, kc, is_np):
    """(number of missing values of 1-D `a`, or None when its dtype cannot hold any; its minimum when that came
    for free). The fast paths read the data once without a temporary when nothing is missing: NaN propagates
    through a float minimum; pandas' `is_string_array` proves an object array holds only strings."""
    np = ctx.np
    if is_np and kc in "biu":
        return None, None
    if is_np and kc == "f":
        low = a.min()
        if not np.isnan(low):
            return 0, low
        return int(np.count_nonzero(np.isnan(a))), None
    if is_np and kc == "O":
        lib = _pandas_lib()
        check = getattr(lib, "is_string_array", None) if lib is not None else None
        if check is not None and a.ndim == 1:
            try:
                if check(a, skipna=False):
                    return 0, None
            except Exception:
                pass
    mask = _missing_mask(ctx, a, kc, is_np)
    return (int(np.count_nonzero(mask)) if mask is not None else None), None


_SAFE_ELEMENT_TYPES = frozenset([str, int, float, bool, bytes, type(None)])


def _safe_elements(ctx, values):
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


def _sorted_jvals(ctx, values):
    vals = [jval(x, ctx) for x in values]
    try:
        return sorted(vals)
    except Exception:
        return vals


def numeric_parse(ctx, values, out):
    """Do the values parse as numbers? 'all' | 'some' | 'none' on up to PARSE_N (distinct) values, with the first
    that fails
    (as Python's error message shows it: the repr of the string)."""
    np = ctx.np
    ok = bad = 0
    first_bad = None
    for i, x in enumerate(values):
        if i >= PARSE_N:
            break
        t = type(x)
        if t is str:
            try:
                float(x)
                ok += 1
                continue
            except ValueError:
                pass
        elif t in (int, float, bool) or (np is not None and (isa(x, np.number) or isa(x, np.bool_))):
            ok += 1
            continue
        bad += 1
        if first_bad is None:
            first_bad = repr(trunc(x, 40)) if t is str else short(x, ctx, 40)
    if ok + bad == 0:
        return
    out["numeric_parse"] = "all" if not bad else ("none" if not ok else "some")
    if first_bad is not None:
        out["non_numeric_example"] = first_bad


def _uniques(ctx, src, kc, is_np):
    """(unique values, how many) of `src`, or (None, None) when hashing could run user code or fails."""
    np, pd = ctx.np, ctx.pd
    # Hashing runs __hash__/__eq__: for object arrays only when every element has a builtin/library scalar type.
    if kc == "O" and is_np and not _safe_elements(ctx, src):
        return None, None
    try:
        uniq = pd.unique(src) if pd is not None else np.unique(src)
        return uniq, len(uniq)
    except Exception:  # unhashable or unorderable values
        return None, None


def vector_facts(ctx, a, out, exact=None, kind_key="value_kind", details=True, missing=None):
    """Value facts of a 1-D ndarray or pandas ExtensionArray into `out` (Facts or ColumnFacts fields):
    n_nan/has_nan, kind, num_unique, unique_values, value_range, example_values, numeric_parse.
    `exact`: True = the caller already reserved the scan, False = `a` is already a sample, None = decide here.
    `kind_key`: where the value kind goes ("kind" in ColumnFacts, "value_kind" in Facts).
    `details`: False = only the missing-value count and, for text-like data, numeric_parse.
    `missing`: the exact number of missing values, when already known (with exact=True)."""
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
            a = a[:: int(math.ceil(n / float(SAMPLE_N)))]
    sampled = not exact
    if exact and details and is_np and a.ndim == 1 and kc in "biufmM" and not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)  # a column of a frame built from a 2-D array: one strided read, then fast ones
    nn, low = count_missing(ctx, a, kc, is_np) if missing is None or not exact else (missing, None)
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
    numeric = kc in "iuf"
    text_like = not (numeric or kc in "bcmM")
    if not details and not text_like:
        return
    limit = UNIQUE_N if kc != "O" or not is_np else UNIQUE_N_OBJECT
    src = a
    if m > limit:  # already a sample then: the smaller one is as good
        src = a[:: int(math.ceil(m / float(min(limit, SAMPLE_N))))]
        out["sampled"] = True
    valid = src[~_missing_mask(ctx, src, kc, is_np)] if nn else src  # the values uniques and examples come from
    if len(valid) == 0:
        valid = a[~_missing_mask(ctx, a, kc, is_np)][:limit]
    uniq, nu = _uniques(ctx, valid, kc, is_np)
    if not details:
        if nu is not None:
            out["num_unique"] = nu
        numeric_parse(ctx, uniq[:PARSE_N] if uniq is not None else valid[:PARSE_N], out)
        return
    if nu is not None:
        out["num_unique"] = nu
    if kc == "b":
        out[kind_key] = "binary" if nu == 2 else "categorical"
        if uniq is not None:
            out["unique_values"] = _sorted_jvals(ctx, uniq)
    elif numeric:
        try:
            out["value_range"] = [jval(v, ctx) for v in _value_range(ctx, a, kc, is_np, nn, low)]
        except Exception as exc:
            ctx.error("value_range", exc)
        if nu is not None:
            out[kind_key] = "binary" if nu == 2 else ("categorical" if nu <= 10 else "continuous")
            if nu <= 5:
                out["unique_values"] = _sorted_jvals(ctx, uniq)
    elif kc in "mM":
        out[kind_key] = "datetime"
        try:
            out["value_range"] = [str(v) for v in _value_range(ctx, a, kc, is_np, nn, low)]
        except Exception as exc:
            ctx.error("value_range", exc)
    elif kc == "c":
        out[kind_key] = "continuous"
    else:
        is_cat = short_tname(type(a.dtype)) == "CategoricalDtype"
        if uniq is not None and nu <= 5:
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
        numeric_parse(ctx, uniq[:PARSE_N] if uniq is not None else valid[:PARSE_N], out)


def _value_range(ctx, a, kc, is_np, nn, low):
    """(min, max) of the non-missing values of `a` (which holds some): NaN-skipping reductions for floats, no copy."""
    np = ctx.np
    if is_np and kc == "f":
        if nn:
            return np.fmin.reduce(a), np.fmax.reduce(a)
        return (low if low is not None else a.min()), a.max()
    valid = a[~_missing_mask(ctx, a, kc, is_np)] if nn else a
    return valid.min(), valid.max()


def strided_sample(ctx, a):
    """A bounded sample (about SAMPLE_N elements) of an n-D array, flattened, reading only what it keeps."""
    if a.flags.c_contiguous:
        flat = a.reshape(-1)
        return flat[:: int(math.ceil(flat.size / float(SAMPLE_N)))]
    k = max(1, int(SAMPLE_N ** (1.0 / a.ndim)))
    sl = tuple(slice(None, None, max(1, int(math.ceil(d / float(k))))) for d in a.shape)
    return a[sl].reshape(-1)


def ndarray_facts(ctx, a, out):
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
        vector_facts(ctx, a.reshape(-1), out, exact=True)
    else:
        vector_facts(ctx, strided_sample(ctx, a), out, exact=False)


def column_values(df, i):
    """Column i's array without building a Series (and without filling the frame's item cache)."""
    try:
        return df._mgr.iget_values(i)
    except Exception:
        return df.iloc[:, i]._values


def label_str(label, ctx):
    return label if type(label) is str else short(label, ctx, 40)


def _named_columns(ctx, cols, labels, ncols):
    """Positions of the columns whose label the cell mentions: among the listed `labels` (also a label that
    differs from a mentioned one only by case or surrounding spaces: the column a typo meant), and beyond."""
    wanted = ctx.wanted
    named = [i for i, lab in enumerate(labels) if (type(lab) is str or type(lab) is int) and lab in wanted]
    loose = {}
    for i, lab in enumerate(labels):
        if type(lab) is str:
            loose.setdefault(lab.strip().lower(), i)
    for lab in wanted:
        if type(lab) is str:
            i = loose.get(lab.strip().lower())
            if i is not None and i not in named:
                named.append(i)
    if ncols > len(labels):
        for lab in wanted:
            if len(named) >= MAX_DETAILED_COLS:
                break
            try:
                if (type(lab) is str or type(lab) is int) and lab in cols:
                    j = cols.get_loc(lab)
                    if type(j) is int and j >= len(labels) and j not in named:
                        named.append(j)
            except Exception:
                continue
    return named


def dataframe_facts(ctx, df, out):
    """Columns (names, dtypes, NaN counts; value facts for the columns the cell mentions, see `Ctx.wanted`),
    NaN totals and the index.

    Exactness depends on the frame alone: a mentioned column is scanned exactly when it fits the per-value
    budget; the other columns share one budget, spent in column order (`_layout`)."""
    nrows, ncols = df.shape
    out["shape"] = [int(nrows), int(ncols)]
    out["length"] = int(nrows)
    cols = df.columns
    labels = cols[: min(ncols, MAX_COLS)].tolist()
    if ctx.wanted is None or nrows * ncols <= SMALL_FRAME:  # small: details everywhere cost next to nothing
        named = list(range(min(len(labels), MAX_DETAILED_COLS)))
        named += [j for j in (_named_columns(ctx, cols, labels, ncols) if ctx.wanted else ()) if j not in named]
    else:
        named = _named_columns(ctx, cols, labels, ncols)
    detailed = set(named)
    layout = _layout(ctx, df, len(labels))
    facts = {}
    for i in named:  # first, while the time budget is fresh
        facts[i] = column_facts(ctx, df, i, labels[i] if i < len(labels) else cols[i], True, layout)
    for i in range(len(labels)):
        if i not in detailed:
            facts[i] = column_facts(ctx, df, i, labels[i], False, layout)
    columns = [facts[i] for i in range(len(labels))] + [facts[j] for j in named if j >= len(labels)]
    if ncols > len(labels):
        out["columns_truncated"] = True
    out["columns"] = columns
    total, seen_nan = 0, False
    for k, c in enumerate(columns):
        if "n_nan" in c:  # exact count: has_nan would be redundant
            if total is not None and k < len(labels):
                total += c["n_nan"]
            c.pop("has_nan", None)
        else:  # sampled or skipped: has_nan True = NaNs seen in the sample
            total = None
            seen_nan = seen_nan or bool(c.get("has_nan"))
    if total is not None and ncols > len(labels):
        total = _missing_beyond(ctx, df, len(labels), layout, total)
    if total is not None:
        out["n_nan"] = total
        out["has_nan"] = total > 0
    elif seen_nan:
        out["has_nan"] = True
    out["index"] = index_facts(ctx, df.index)


def _layout(ctx, df, n_listed):
    """How the frame's shared budget covers its listed columns, in column order: "exact" (charged on its
    own), "block" (its 2-D float or object block is checked in one contiguous pass, then only the columns that
    may hold missing values are counted, on what is left) or "sample". Depends on the frame alone."""
    np = ctx.np
    mode, left = [], ctx.scan_budget
    nrows = int(df.shape[0])
    try:
        mgr = df._mgr
        blknos, blklocs, blocks = mgr.blknos, mgr.blklocs, mgr.blocks
    except Exception:
        blknos = blklocs = blocks = None
    charged = {}
    for i in range(n_listed):
        kc, is_np, step, vals, b = "O", False, 1, None, None
        if blocks is not None:
            try:
                b = int(blknos[i])
                vals = blocks[b].values
                kc, is_np = _kind_char(vals.dtype), isa(vals, np.ndarray)
                if is_np and vals.ndim == 2:
                    step = max(1, min(abs(int(vals.strides[1])) // max(1, int(vals.itemsize)), 8))
            except Exception:
                vals = None
        if is_np and kc in "biu":
            mode.append("exact")  # cannot hold NaN: nothing to read
            continue
        if vals is not None and is_np and vals.ndim == 2 and vals.shape[0] > 1 and kc in "fO":
            if b not in charged:
                units = int(vals.size) * scan_weight(kc, True)
                charged[b] = units <= left
                if charged[b]:
                    left -= units
            if charged[b]:
                mode.append("block")
                continue
        units = nrows * scan_weight(kc, is_np) * step
        if units <= left:
            left -= units
            mode.append("exact")
        else:
            mode.append("sample")
    return {"mode": mode, "left": left, "blknos": blknos, "blklocs": blklocs, "blocks": blocks, "flags": {},
            "charged": charged}


def _block_flag(ctx, layout, i):
    """May column i hold a missing value? False (certainly not) / True or None (maybe), from one contiguous pass
    over its whole block: per-column sums for floats (NaN propagates through a sum; +inf and -inf together also
    give NaN, then the column's own count decides), `is_string_array` for objects."""
    np = ctx.np
    try:
        b = int(layout["blknos"][i])
        if b not in layout["flags"]:
            layout["flags"][b] = None
            if ctx.over_time():
                return None
            vals = layout["blocks"][b].values
            kc = _kind_char(vals.dtype)
            ctx.scanned += int(vals.size) * scan_weight(kc, True)
            if kc == "f":
                layout["flags"][b] = np.isnan(np.einsum("ij->i", vals))
            elif kc == "O" and vals.flags.c_contiguous:
                lib = _pandas_lib()
                if lib is not None and lib.is_string_array(vals.reshape(-1), skipna=False):
                    layout["flags"][b] = False
        flags = layout["flags"][b]
        if flags is None or flags is False:
            return flags
        return bool(flags[int(layout["blklocs"][i])])
    except Exception:
        return None


def column_facts(ctx, df, i, label, detailed, layout=None):
    """Facts of column i (`detailed`: value facts too, on the per-value budget; else on the frame's shared
    budget, see `_layout`), reused while the kernel's state is unchanged (kp_cache)."""
    key = ("column", id(df), i, detailed)
    hit = recall(key)
    if hit is not None:
        return dict(hit)
    cuts = ctx.cuts
    a = column_values(df, i)
    kc, is_np = _kind_char(a.dtype), isa(a, ctx.np.ndarray)
    c = {"name": label_str(label, ctx), "dtype": dtype_str(a.dtype)}
    if ctx.over_time():
        if kc in "biu" and is_np:
            c["n_nan"] = 0  # integer/bool arrays cannot hold NaN
        return c
    try:
        n = len(a)
        mode = layout["mode"][i] if (not detailed and i < len(layout["mode"])) else None
        flag = _block_flag(ctx, layout, i) if mode == "block" else None
        if detailed:
            vector_facts(ctx, a, c, kind_key="kind", details=True)
        elif mode == "block" and flag is False:
            vector_facts(ctx, a, c, exact=True, kind_key="kind", details=False, missing=0)
        elif mode == "exact" or (mode == "block" and n * scan_weight(kc, is_np, a) <= layout["left"]):
            if mode == "block":
                layout["left"] -= n * scan_weight(kc, is_np, a)
            ctx.scanned += n * scan_weight(kc, is_np, a)
            vector_facts(ctx, a, c, exact=True, kind_key="kind", details=False)
        else:
            vector_facts(ctx, a[:: max(1, int(math.ceil(n / float(SAMPLE_N))))] if n else a, c, exact=False,
                         kind_key="kind", details=False)
    except Exception as exc:
        ctx.error("column %s" % c["name"], exc)
    if ctx.cuts == cuts:
        remember(key, dict(c))
    return c


def _missing_beyond(ctx, df, start, layout, total):
    """The exact NaN total including the columns past the listed ones (their block's one-pass check when it was
    made, else their own scans on what is left of the frame's budget), or None when they do not fit."""
    np = ctx.np
    key = ("missing_beyond", id(df), start)
    hit = recall(key)
    if hit is not None:
        return total + hit if hit >= 0 else None
    cuts = ctx.cuts
    extra = 0
    try:
        todo = range(start, int(df.shape[1]))
        if layout["blknos"] is not None:  # skip whole blocks that cannot hold, or were seen not to hold, NaN
            blknos = np.asarray(layout["blknos"])[start:]
            keep = []
            for b in np.unique(blknos).tolist():
                vals = layout["blocks"][b].values
                if isa(vals, np.ndarray) and _kind_char(vals.dtype) in "biu":
                    continue
                where = (np.flatnonzero(blknos == b) + start).tolist()
                flags = None
                if layout["charged"].get(b):
                    _block_flag(ctx, layout, where[0])  # computes the whole block's flags once
                    flags = layout["flags"].get(b)
                if flags is False:  # no missing value anywhere in the block
                    continue
                if flags is not None:  # only the columns whose sum was NaN
                    where = [i for i in where if flags[int(layout["blklocs"][i])]]
                keep.extend(where)
            todo = sorted(keep)
        for i in todo:
            a = column_values(df, i)
            kc = _kind_char(a.dtype)
            is_np = isa(a, np.ndarray)
            if is_np and kc in "biu":
                continue
            units = len(a) * scan_weight(kc, is_np, a)
            if units > layout["left"] or not ctx.can_scan(units, layout["left"]):
                extra = -1
                break
            layout["left"] -= units
            extra += count_missing(ctx, a, kc, is_np)[0] or 0
    except Exception as exc:
        ctx.error("NaN total", exc)
        extra = -1
    if ctx.cuts == cuts:
        remember(key, extra)
    return total + extra if extra >= 0 else None


_dtype_names: dict = {}


def dtype_str(dtype):
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


def series_facts(ctx, s, out):
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
    out["length"] = len(s)
    out["shape"] = [len(s)]
    vector_facts(ctx, a, out)
    out["index"] = index_facts(ctx, s.index)


MAX_LEVELS = 10


def index_facts(ctx, idx):
    key = ("index", id(idx))
    hit = recall(key)
    if hit is not None:
        return dict(hit)
    cuts = ctx.cuts
    d = _index_facts(ctx, idx)
    if ctx.cuts == cuts:
        remember(key, dict(d))
    return d


def _index_facts(ctx, idx):
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
