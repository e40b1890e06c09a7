"""polars rules: expressions on a live DataFrame/LazyFrame that name a column its schema lacks, or apply a temporal
`.dt` operation to a String column.

polars 2.1 resolves every `pl.col("name")` of a `select`/`with_columns`/`filter`/`sort`/`group_by` call against
the input's schema (the columns made in the same `with_columns` are not visible to its other expressions), raising
ColumnNotFoundError; a `.dt.<op>()` on a String column raises InvalidOperationError ("`year` operation not
supported for dtype `str`"). The schema comes from the probe (a LazyFrame's without collecting it). Only string
literals naming one column are judged (no regex `^...$`, no `*`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from crane.finding import Finding
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, method_calls, qualname
from crane.rulekit.lib_helpers import Verdict
from crane.rulekit.registry import rule

_METHODS = {"select", "with_columns", "filter", "sort", "group_by", "agg", "unique", "drop_nulls"}
_STRING = {"String", "Utf8", "str"}
_DT_OPS = {
    "year",
    "month",
    "day",
    "hour",
    "minute",
    "second",
    "weekday",
    "week",
    "quarter",
    "ordinal_day",
    "date",
    "time",
    "strftime",
    "to_string",
    "truncate",
    "round",
    "epoch",
    "timestamp",
    "iso_year",
    "total_days",
    "total_seconds",
    "total_hours",
    "total_minutes",
    "month_start",
    "month_end",
    "millisecond",
    "microsecond",
    "nanosecond",
    "replace_time_zone",
    "convert_time_zone",
    "offset_by",
}


# `.str.<op>` on a non-String column (polars 2.1, checked on Int64/Float64/Date/Boolean columns): these ops say
# InvalidOperationError "expected String type, got: i64", these SchemaError "invalid series dtype: expected `String`,
# got `i64` for series with name `n`".
_STR_OPS_INVALID = {"contains", "replace", "starts_with"}
_STR_OPS_SCHEMA = {"to_lowercase", "len_chars", "strip_chars", "to_date", "split", "slice", "to_integer"}


def str_verdict(frame: str, name: str, dtype: str, op: str) -> Verdict | None:
    short = _SHORT.get(dtype)
    if short is None or short == "str":
        return None
    ev = [f"{frame}[{name!r}] is a {dtype} column (probe): `.str` needs a String column (cast it first)"]
    if op in _STR_OPS_INVALID:
        return Verdict("InvalidOperationError", f"expected String type, got: {short}", "data confusion", ev, 0.85)
    if op in _STR_OPS_SCHEMA:
        return Verdict("SchemaError", f"invalid series dtype: expected `String`, got `{short}` for series with name "
                       f"`{name}`", "data confusion", ev, 0.85)
    return None


def _col_name(ctx: RuleContext, node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call) or len(node.args) != 1 or node.keywords:
        return None
    q = qualname(ctx, node.func) or ""
    if not (q.startswith(("polars.", "pl.")) and q.endswith(".col")):
        return None
    name = ctx.literal(node.args[0], None)
    if not isinstance(name, str) or name == "*" or (name.startswith("^") and name.endswith("$")):
        return None
    return name


@rule("polars-columns", needs_probe=True)
def polars_columns(ctx: RuleContext) -> Iterator[Finding]:
    """pl.col names missing from a live frame's schema; .dt operations on String columns."""
    for call, recv, meth in method_calls(ctx):
        if meth not in _METHODS or not isinstance(recv, ast.Name) or not ctx.is_certain(call):
            continue
        f = ctx.facts(recv.id)
        if f is None or f.kind not in ("polars_frame", "polars_lazy") or f.columns is None or f.columns_truncated:
            continue
        if not ctx.is_live(recv.id, call):
            continue
        dtypes = {c.name: c.dtype for c in f.columns}
        args = list(call.args) + [k.value for k in call.keywords]
        for node in (n for a in args for n in ast.walk(a)):
            name = _col_name(ctx, node)
            if name is None:
                continue
            if name not in dtypes:
                ev = [
                    f"{recv.id}: polars {'LazyFrame' if f.kind == 'polars_lazy' else 'DataFrame'} with columns "
                    f"{list(dtypes)[:12]}"
                ]
                yield emit(
                    ctx,
                    node,
                    "polars-columns",
                    Verdict(
                        "ColumnNotFoundError",
                        f'unable to find column "{name}"; valid columns: {list(dtypes)}',
                        "data confusion",
                        ev,
                        0.85,
                    ),
                )
                return
            parent = ctx.parent(node)
            if isinstance(parent, ast.Attribute) and parent.attr == "str":
                op_node = ctx.parent(parent)
                if isinstance(op_node, ast.Attribute) and isinstance(ctx.parent(op_node), ast.Call):
                    v = str_verdict(recv.id, name, dtypes[name], op_node.attr)
                    if v is not None:
                        yield emit(ctx, op_node, "polars-columns", v)
                        return
            if isinstance(parent, ast.Attribute) and parent.attr == "dt" and dtypes[name] in _STRING:
                op_node = ctx.parent(parent)
                if isinstance(op_node, ast.Attribute) and op_node.attr in _DT_OPS:
                    ev = [
                        f"{recv.id}[{name!r}] is a {dtypes[name]} column (probe): `.dt` needs a temporal dtype "
                        "(parse it with str.to_date / try_parse_dates=True)"
                    ]
                    yield emit(
                        ctx,
                        op_node,
                        "polars-columns",
                        Verdict(
                            "InvalidOperationError",
                            f"`{op_node.attr}` operation not supported for dtype `str`",
                            "data confusion",
                            ev,
                            0.85,
                        ),
                    )
                    return


_SHORT = {"Int8": "i8", "Int16": "i16", "Int32": "i32", "Int64": "i64", "UInt8": "u8", "UInt16": "u16",
          "UInt32": "u32", "UInt64": "u64", "Float32": "f32", "Float64": "f64", "String": "str", "Boolean": "bool",
          "Date": "date"}  # fmt: skip
_NUMERIC = ("Int", "UInt", "Float")


def _incompatible(a: str, b: str) -> bool:
    """Join keys polars cannot cast to a common type: text against numbers, dates or booleans."""
    text = {"String", "Utf8"}
    other = a if b in text else b if a in text else None
    if other is None or other in text:
        return False
    return other.startswith(_NUMERIC) or other in ("Boolean", "Date") or other.startswith(("Datetime", "Duration"))


@rule("polars-join-keys", needs_probe=True)
def polars_join_keys(ctx: RuleContext) -> Iterator[Finding]:
    """DataFrame.join of two live polars DataFrames on keys of incompatible dtypes (SchemaError)."""
    for call, recv, meth in method_calls(ctx):
        if meth != "join" or not isinstance(recv, ast.Name) or not call.args or not ctx.is_certain(call):
            continue
        other = call.args[0]
        if not isinstance(other, ast.Name):
            continue
        left, right = ctx.facts(recv.id), ctx.facts(other.id)
        if left is None or right is None or left.kind != "polars_frame" or right.kind != "polars_frame":
            continue
        if (
            not (ctx.is_live(recv.id, call) and ctx.is_live(other.id, call))
            or left.columns is None
            or right.columns is None
        ):
            continue
        on = ctx.literal(ctx.kwarg(call, "on"), None)
        lo = ctx.literal(ctx.kwarg(call, "left_on"), None) if on is None else on
        ro = ctx.literal(ctx.kwarg(call, "right_on"), None) if on is None else on
        if isinstance(lo, str):
            lo = [lo]
        if isinstance(ro, str):
            ro = [ro]
        if not isinstance(lo, list) or not isinstance(ro, list) or len(lo) != len(ro):
            continue
        ld = {c.name: c.dtype for c in left.columns}
        rd = {c.name: c.dtype for c in right.columns}
        for lk, rk in zip(lo, ro, strict=True):
            if lk in ld and rk in rd and _incompatible(ld[lk], rd[rk]):
                ls, rs = _SHORT.get(ld[lk], ld[lk]), _SHORT.get(rd[rk], rd[rk])
                yield emit(
                    ctx,
                    call,
                    "polars-join-keys",
                    Verdict(
                        "SchemaError",
                        f"datatypes of join keys don't match - `{lk}`: {ls} on left does not match "
                        f"`{rk}`: {rs} on right (and no other type was available to cast to)",
                        "data confusion",
                        [f"{recv.id}[{lk!r}] is {ld[lk]}, {other.id}[{rk!r}] is {rd[rk]} (probe)"],
                        0.85,
                    ),
                )
                return


# -- pl.concat of eager frames whose schemas differ (how="vertical", the default) -----------------------------------
_SIMPLE_DTYPE = re.compile(r"[A-Za-z]+[0-9]*")


def concat_verdict(labels: list[str], schemas: list[list[tuple[str, str]]]) -> Verdict | None:
    """polars 2.1's vstack: every frame against the first one, by width, then column by column its name and its
    exact dtype."""
    first = schemas[0]
    for lbl, other in zip(labels[1:], schemas[1:], strict=True):
        ev = [f"{labels[0]}: {[n for n, _ in first][:8]}", f"{lbl}: {[n for n, _ in other][:8]}"]
        if len(other) != len(first):
            return Verdict("ShapeError", f"unable to append to a DataFrame of width {len(first)} with a DataFrame of "
                           f"width {len(other)}", "data confusion", ev, 0.85)
        for (n1, d1), (n2, d2) in zip(first, other, strict=True):  # column by column: its name, then its dtype
            if n1 != n2:
                return Verdict("ShapeError", f'unable to vstack, column names don\'t match: "{n1}" and "{n2}"',
                               "data confusion", ev, 0.85)
            if d1 != d2:
                if not (_SIMPLE_DTYPE.fullmatch(d1) and _SIMPLE_DTYPE.fullmatch(d2)):
                    return None
                return Verdict("SchemaError", f"type {d2} is incompatible with expected type {d1}", "data confusion",
                               [f"{labels[0]}[{n1!r}]: {d1}", f"{lbl}[{n1!r}]: {d2}",
                                "pl.concat(how='vertical') needs identical schemas: cast, or how='vertical_relaxed'"],
                               0.85)
    return None


@rule("polars-concat", needs_probe=True)
def polars_concat(ctx: RuleContext) -> Iterator[Finding]:
    """pl.concat([a, b]) of live polars DataFrames whose widths, column names or dtypes differ."""
    for call in ctx.calls():
        if qualname(ctx, call.func) != "polars.concat" or not ctx.is_certain(call) or len(call.args) != 1:
            continue
        how = ctx.kwarg(call, "how")
        if (how is not None and ctx.literal(how) != "vertical") or any(
                k.arg not in ("how", "rechunk", "parallel") for k in call.keywords):
            continue
        items = call.args[0]
        if not isinstance(items, (ast.List, ast.Tuple)) or len(items.elts) < 2:
            continue
        schemas, labels = [], []
        for e in items.elts:
            if not isinstance(e, ast.Name):
                break
            f = ctx.facts(e.id)
            if f is None or f.kind != "polars_frame" or f.columns is None or f.columns_truncated or not ctx.is_live(
                    e.id, call):
                break
            schemas.append([(c.name, c.dtype) for c in f.columns])
            labels.append(e.id)
        else:
            v = concat_verdict(labels, schemas)
            if v is not None:
                yield emit(ctx, call, "polars-concat", v)
                return
