"""pandas misuse rules: numeric conversions of text that does not parse (`.astype(int|float)`,
`pd.to_numeric` without errors='coerce'), `astype(int)` of float data holding NaN, merges on a key column
one side lacks, and `join` of frames whose columns overlap without a suffix.

Decided only from exact facts: text columns count as non-numeric when the probe saw a string that float()
rejects ("some"/"none"; on a row subset of the kernel's data only "none" still decides), NaN counts only when
exact, and column lists only when complete.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import ColumnFacts, Facts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, library_version, qualname, value
from crane.rulekit.lib_helpers import (
    NOVALUE,
    Verdict,
    column_names,
    describe,
    index_level_names,
    is_dataframe,
    is_series,
    is_text_dtype,
    literal,
    non_numeric_text,
)
from crane.rulekit.python_versions import parse_version
from crane.rulekit.registry import rule

_INT_NAMES = {"int", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "long"}
_FLOAT_NAMES = {"float", "float16", "float32", "float64", "double"}


def target_kind(ctx, node: ast.AST | None) -> str | None:
    """'int' / 'float' when the dtype argument names a NumPy/Python integer or float type, else None
    (nullable 'Int64'/'Float64' and everything else are not judged)."""
    if node is None:
        return None
    lit = literal(node)
    if isinstance(lit, str):
        name = lit
    elif isinstance(node, ast.Name) and node.id in ("int", "float"):
        if ctx.facts(node.id) is not None or ctx.value(node) is not None:
            return None  # the builtin is shadowed in the user's namespace
        name = node.id
    elif isinstance(node, ast.Attribute):
        q = qualname(ctx, node) or ""
        if not q.startswith("numpy."):
            return None
        name = q.rsplit(".", 1)[-1]
    else:
        return None
    if name in _INT_NAMES:
        return "int"
    if name in _FLOAT_NAMES:
        return "float"
    return None


def conversion_failure(data: ColumnFacts | Facts, kind: str, truncated: bool) -> tuple[str, str] | None:
    """(ename, message) that converting this column/Series to int/float raises, or None."""
    dtype = data.dtype or ""
    bad = non_numeric_text(data, truncated)
    if bad is not None:
        if dtype == "category":
            return "ValueError", f"Cannot cast object dtype to {'int64' if kind == 'int' else 'float64'}"
        if kind == "int":
            n_nan = data.n_nan if isinstance(data, ColumnFacts) else data.n_nan
            if n_nan != 0 or (truncated and data.numeric_parse != "none"):
                return None  # a None before the bad string would raise TypeError instead
            return "ValueError", f"invalid literal for int() with base 10: {bad!r}"
        return "ValueError", f"could not convert string to float: {bad!r}"
    if kind == "int" and dtype.startswith("float") and not truncated:
        n_nan = data.n_nan
        if n_nan:
            return "IntCastingNaNError", "Cannot convert non-finite values (NA or inf) to integer"
    return None


def astype_verdict(lbl: str, f: Facts, kind: str, columns: list[str] | None = None) -> Verdict | None:
    """`f.astype(kind)` (all columns, or just `columns` of a DataFrame)."""
    if is_series(f) or (f.kind == "ndarray" and f.dtype == "object"):
        got = conversion_failure(f, kind, f.truncated)
        if got is None:
            return None
        ename, msg = got
        return Verdict(ename, msg, "data confusion", [describe(lbl, f) + _value_hint(f)], 0.9)
    if is_dataframe(f) and f.columns is not None:
        for c in f.columns:
            if columns is not None and c.name not in columns:
                continue
            got = conversion_failure(c, kind, f.truncated)
            if got is not None:
                ename, msg = got
                if columns is not None:
                    msg += f": Error while type casting for column '{c.name}'"
                return Verdict(ename, msg, "data confusion", [describe(lbl, f, [(c, None)])], 0.9)
    return None


def _value_hint(f: Facts) -> str:
    if f.non_numeric_example and f.numeric_parse in ("some", "none"):
        return f", values such as {f.non_numeric_example} do not parse as numbers"
    if f.n_nan:
        return f", {f.n_nan} NaN"
    return ""


@rule("pandas-astype-numeric", needs_probe=True)
def astype_numeric(ctx: RuleContext) -> Iterator[Finding]:
    """`.astype(int|float)` of text that does not parse as numbers, or of float data with NaN (to int)."""
    for call in ctx.calls():
        f = call.func
        if not isinstance(f, ast.Attribute) or f.attr != "astype" or not ctx.is_certain(call):
            continue
        if ctx.kwarg(call, "errors") is not None or len(call.args) > 1:
            continue
        dtype_node = ctx.arg(call, 0, "dtype")
        data = value(ctx, f.value)
        if data is None or dtype_node is None:
            continue
        lbl = label(ctx, f.value)
        v = None
        lit = literal(dtype_node)
        if isinstance(lit, dict) and is_dataframe(data):
            for col, dt in lit.items():
                kind = target_kind(ctx, ast.Constant(dt)) if isinstance(dt, str) else None
                if kind is not None and isinstance(col, str):
                    v = astype_verdict(lbl, data, kind, [col])
                    if v:
                        break
        else:
            kind = target_kind(ctx, dtype_node)
            if kind is not None:
                v = astype_verdict(lbl, data, kind)
        if v is not None:
            yield emit(ctx, call, "pandas-astype-numeric", v)
            return


@rule("pandas-to-numeric", needs_probe=True)
def to_numeric(ctx: RuleContext) -> Iterator[Finding]:
    """pd.to_numeric(x) (errors='raise') on text holding values that are not numbers."""
    for call in ctx.calls():
        q = qualname(ctx, call.func) or ""
        if q != "pandas.to_numeric" or not ctx.is_certain(call):
            continue
        errors = ctx.kwarg(call, "errors")
        if errors is not None and literal(errors) != "raise":
            continue
        arg = ctx.arg(call, 0, "arg")
        data = value(ctx, arg)
        if data is None or not (is_series(data) or (data.kind == "ndarray" and data.dtype == "object")):
            continue
        if not (is_text_dtype(data.dtype) or data.dtype == "category"):
            continue
        bad = non_numeric_text(data, data.truncated)
        if bad is None or bad == "":
            continue  # to_numeric turns '' into NaN
        # pandas quotes the value as Python's repr does from 3.0, in double quotes before; it adds " at position
        # N", the value's row: the probe's when it looked at every row of this very data (1-D, not a row subset)
        pandas = parse_version(library_version(ctx, "pandas"))
        quoted = repr(bad) if pandas is not None and pandas >= (3, 0) else f'"{bad}"'
        pos = data.non_numeric_position
        where = f" at position {pos}" if pos is not None and not data.truncated and len(data.shape or ()) == 1 else ""
        yield emit(ctx, call, "pandas-to-numeric", Verdict(
            "ValueError", f"Unable to parse string {quoted}{where}", "data confusion",
            [describe(label(ctx, arg), data) + _value_hint(data)], 0.9))
        return


def _key_list(v) -> list[str] | None:
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        return v
    return None


def merge_verdict(left_lbl: str, left: Facts, right_lbl: str, right: Facts, on, left_on, right_on) -> Verdict | None:
    """A merge key missing from one side's columns (KeyError with the key)."""
    checks = []
    if on is not None:
        keys = _key_list(on)
        if keys is None:
            return None
        checks = [(left_lbl, left, keys), (right_lbl, right, keys)]
    else:
        lk, rk = _key_list(left_on) if left_on is not None else None, _key_list(right_on) if right_on is not None else None
        if lk is not None:
            checks.append((left_lbl, left, lk))
        if rk is not None:
            checks.append((right_lbl, right, rk))
    for lbl, f, keys in checks:
        names = column_names(f)
        levels = index_level_names(f)
        if names is None or levels is None:
            continue
        for k in keys:
            if k not in names and k not in levels:
                shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
                return Verdict("KeyError", repr(k), "data confusion",
                               [f"{lbl}: pandas DataFrame, columns {shown}; no column {k!r}"], 0.9)
    return None


def join_verdict(left_lbl: str, left: Facts, right_lbl: str, right: Facts) -> Verdict | None:
    """DataFrame.join of frames sharing column names, with no lsuffix/rsuffix."""
    a, b = column_names(left), column_names(right)
    if a is None or b is None:
        return None
    overlap = [c for c in a if c in set(b)]
    if not overlap:
        return None
    return _overlap(left_lbl, a, right_lbl, b, overlap)


def _overlap(left_lbl: str, a: list[str], right_lbl: str, b: list[str], overlap: list[str]) -> Verdict:
    return Verdict(
        "ValueError",
        f"columns overlap but no suffix specified: Index({overlap!r}, dtype='object')",
        "API misuse",
        [f"{left_lbl}: columns {', '.join(a[:8])}", f"{right_lbl}: columns {', '.join(b[:8])}",
         f"both have {', '.join(overlap[:5])}"],
        0.9,
    )


def join_series_verdict(left_lbl: str, left: Facts, right_lbl: str, right: Facts) -> Verdict | None:
    """DataFrame.join(series): the Series becomes a column named after it, so it needs a name that the frame
    does not already use (no lsuffix/rsuffix)."""
    if right.has_name is False:
        return Verdict("ValueError", "Other Series must have a name", "API misuse",
                       [f"{right_lbl}: pandas Series without a name (its .name is None)"], 0.9)
    a = column_names(left)
    if right.has_name is not True or right.series_name is None or a is None or right.series_name not in a:
        return None
    return _overlap(left_lbl, a, right_lbl, [right.series_name], [right.series_name])


@rule("pandas-merge-join", needs_probe=True)
def merge_join(ctx: RuleContext) -> Iterator[Finding]:
    """merge on a key one side lacks; join with overlapping columns and no suffix."""
    for call in ctx.calls():
        if not ctx.is_certain(call) or any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords):
            continue
        q = qualname(ctx, call.func) or ""
        f = call.func
        v = None
        if q == "pandas.merge" or (isinstance(f, ast.Attribute) and f.attr == "merge"):
            if q == "pandas.merge" or not isinstance(f, ast.Attribute):  # else `<frame>.merge(...)`
                ln, rn = ctx.arg(call, 0, "left"), ctx.arg(call, 1, "right")
                extra = call.args[2:]
            else:
                ln, rn = f.value, ctx.arg(call, 0, "right")
                extra = call.args[1:]
            if extra:
                continue
            left, right = value(ctx, ln), value(ctx, rn)
            if not (is_dataframe(left) and is_dataframe(right)):
                continue
            kws = {k: literal(ctx.kwarg(call, k)) if ctx.kwarg(call, k) is not None else None
                   for k in ("on", "left_on", "right_on")}
            if any(val is NOVALUE for val in kws.values()):
                continue
            if ctx.kwarg(call, "left_index") is not None or ctx.kwarg(call, "right_index") is not None:
                continue
            v = merge_verdict(label(ctx, ln), left, label(ctx, rn), right, kws["on"], kws["left_on"], kws["right_on"])
        elif isinstance(f, ast.Attribute) and f.attr == "join" and q != "os.path.join":
            if ctx.kwarg(call, "lsuffix") is not None or ctx.kwarg(call, "rsuffix") is not None or len(call.args) > 1:
                continue
            other = ctx.arg(call, 0, "other")
            left, right = value(ctx, f.value), value(ctx, other)
            if is_dataframe(left) and is_dataframe(right):
                v = join_verdict(label(ctx, f.value), left, label(ctx, other), right)
            elif is_dataframe(left) and is_series(right):
                v = join_series_verdict(label(ctx, f.value), left, label(ctx, other), right)
        if v is not None:
            yield emit(ctx, call, "pandas-merge-join", v)
            return

