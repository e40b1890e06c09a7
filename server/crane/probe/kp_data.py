"""CRANE kernel probe, part 2 of 5: facts about numpy arrays and pandas objects (standard library only).

numpy and pandas are reached through `sys.modules` (via `Ctx`). Every scan is bounded: an exact pass over the
data only while the call's scan budget lasts (`Ctx.can_scan`), otherwise a strided sample, flagged `sampled`.
"""

import math

from crane.probe.kp_common import (  # kernel: strip
    EXAMPLE_CHARS,  # kernel: strip
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


def _kind_char(dtype):
    try:
        k = dtype.kind
        return k if isinstance(k, str) else "O"
    except Exception:
        return "O"


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


def vector_facts(ctx, a, out, exact=None, kind_key="value_kind"):
    """Value facts of a 1-D ndarray or pandas ExtensionArray into `out` (Facts or ColumnFacts fields):
    n_nan/has_nan, kind, num_unique, unique_values, value_range, example_values, numeric_parse.
    `exact`: True = the caller already reserved the scan, False = `a` is already a sample, None = decide here.
    `kind_key`: where the value kind goes ("kind" in ColumnFacts, "value_kind" in Facts)."""
    np, pd = ctx.np, ctx.pd
    n = len(a)
    if n == 0:
        out[kind_key] = "empty"
        return
    kc = _kind_char(a.dtype)
    is_np = isa(a, np.ndarray)
    if exact is None:
        weight = 1 if (is_np and kc in "biufcmM") else 8
        exact = ctx.can_scan(n * weight)
        if not exact:
            a = a[:: int(math.ceil(n / float(SAMPLE_N)))]
    sampled = not exact
    mask = _missing_mask(ctx, a, kc, is_np)
    nn = int(mask.sum()) if mask is not None else 0
    if sampled:
        out["sampled"] = True
    if mask is None or not sampled:  # integer/bool arrays cannot hold NaN: exact even on a sample
        out["n_nan"] = nn
        out["has_nan"] = nn > 0
    elif nn:
        out["has_nan"] = True
    valid = a[~mask] if nn else a
    nv = len(valid)
    if nv == 0:
        out[kind_key] = "empty"
        return
    limit = UNIQUE_N if kc != "O" or not is_np else UNIQUE_N_OBJECT
    u_src = valid
    if nv > limit:
        u_src = valid[:: int(math.ceil(nv / float(limit)))]
        out["sampled"] = True
    uniq, nu = None, None
    # Hashing runs __hash__/__eq__: for object arrays only when every element has a builtin/library scalar type.
    if kc != "O" or not is_np or _safe_elements(ctx, u_src):
        try:
            uniq = pd.unique(u_src) if pd is not None else np.unique(u_src)
            nu = len(uniq)
            out["num_unique"] = nu
        except Exception:  # unhashable or unorderable values
            uniq, nu = None, None
    numeric = kc in "iuf"
    if kc == "b":
        out[kind_key] = "binary" if nu == 2 else "categorical"
        if uniq is not None:
            out["unique_values"] = _sorted_jvals(ctx, uniq)
    elif numeric:
        try:
            out["value_range"] = [jval(valid.min(), ctx), jval(valid.max(), ctx)]
        except Exception as exc:
            ctx.error("value_range", exc)
        if nu is not None:
            out[kind_key] = "binary" if nu == 2 else ("categorical" if nu <= 10 else "continuous")
            if nu <= 5:
                out["unique_values"] = _sorted_jvals(ctx, uniq)
    elif kc in "mM":
        out[kind_key] = "datetime"
        try:
            out["value_range"] = [str(valid.min()), str(valid.max())]
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
    kc = _kind_char(a.dtype)
    weight = 1 if kc in "biufcmM" else 8
    if ctx.can_scan(a.size * weight):
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


def dataframe_facts(ctx, df, out):
    nrows, ncols = df.shape
    out["shape"] = [int(nrows), int(ncols)]
    out["length"] = int(nrows)
    cols = df.columns
    columns = []
    total_nan, exact, seen_nan = 0, True, False
    np = ctx.np
    for i in range(min(ncols, MAX_COLS)):
        a = column_values(df, i)
        c = {"name": label_str(cols[i], ctx), "dtype": str(a.dtype)}
        if i < MAX_DETAILED_COLS and not ctx.over_time():
            try:
                vector_facts(ctx, a, c, kind_key="kind")
            except Exception as exc:
                ctx.error("column %s" % c["name"], exc)
        elif _kind_char(a.dtype) in "biu" and isa(a, np.ndarray):
            c["n_nan"] = 0  # integer/bool arrays cannot hold NaN
        if "n_nan" in c:  # exact count: has_nan would be redundant
            total_nan += c["n_nan"]
            c.pop("has_nan", None)
        else:  # sampled or skipped: has_nan True = NaNs seen in the sample
            exact = False
            seen_nan = seen_nan or bool(c.get("has_nan"))
        columns.append(c)
    if ncols > len(columns):
        out["columns_truncated"] = True
        exact = False
    out["columns"] = columns
    if exact:
        out["n_nan"] = total_nan
        out["has_nan"] = total_nan > 0
    elif total_nan or seen_nan:
        out["has_nan"] = True
    out["index"] = index_facts(ctx, df.index)


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
        elif d["type"] != "MultiIndex" and n and ctx.can_scan(n * 8):
            if _kind_char(idx.dtype) in "iufmM":
                d["min"], d["max"] = jval(idx.min(), ctx), jval(idx.max(), ctx)
            d["unique"] = bool(idx.is_unique)
    except Exception as exc:
        ctx.error("index", exc)
    return d
