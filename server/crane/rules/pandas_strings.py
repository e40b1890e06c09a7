"""pandas' StringDtype columns where numpy is expected: pandas 3 infers `str` for text (a StringDtype, stored by
pyarrow when it is installed), and code written for object columns breaks.

- `s.values.reshape(...)` / `s.array.reshape(...)` of a pyarrow-backed string Series: `.values` is an
  ArrowStringArray, which raises NotImplementedError "<class 'pandas.arrays.ArrowStringArray'> does not support
  reshape as backed by a 1D pyarrow.ChunkedArray." (pandas 3; `s.to_numpy()` gives an object ndarray and works).
- `np.issubdtype(s.dtype, ...)` / `np.issubdtype(df.dtypes['c'], ...)` of any StringDtype: numpy raises TypeError
  "Cannot interpret '<StringDtype(na_value=nan)>' as a data type"; also `df[c].dtype` with `c` running over every
  column of a frame that has such a column (a `for` loop or the first condition of a comprehension).
The storage and repr come from the probe (ColumnFacts/Facts `string_storage`, `dtype_repr`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.analysis.certainty import is_certain
from crane.finding import Finding
from crane.probe.facts import Facts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, library_version, qualname, value
from crane.rulekit.lib_helpers import Verdict, column, is_dataframe, is_series, literal
from crane.rulekit.registry import rule


def _major(version: str | None) -> int | None:
    head = (version or "").split(".")[0]
    return int(head) if head.isdigit() else None


def _reshape_verdict(lbl: str, f: Facts) -> Verdict | None:
    if not is_series(f) or f.string_storage != "pyarrow":
        return None
    return Verdict(
        "NotImplementedError",
        "<class 'pandas.arrays.ArrowStringArray'> does not support reshape as backed by a 1D pyarrow.ChunkedArray.",
        "API misuse", [f"{lbl}: pandas Series of dtype {f.dtype} ({f.dtype_repr}, pyarrow storage): .values is an "
                       "ArrowStringArray, not an ndarray"], 0.9)


def _dtype_verdict(lbl: str, dtype: str | None, dtype_repr: str | None) -> Verdict | None:
    if not dtype_repr:
        return None
    return Verdict("TypeError", f"Cannot interpret '{dtype_repr}' as a data type", "API misuse",
                   [f"{lbl}: pandas {dtype} dtype {dtype_repr}, not a numpy dtype"], 0.9)


def _string_dtype_of(ctx: RuleContext, node: ast.expr) -> tuple[str, str | None, str | None] | None:
    """(label, dtype, repr) when `node` is `<series>.dtype` or `<frame>.dtypes[<literal>]` of a StringDtype."""
    if isinstance(node, ast.Attribute) and node.attr == "dtype":
        f = value(ctx, node.value)
        if is_series(f) and f.dtype_repr:
            return label(ctx, node.value), f.dtype, f.dtype_repr
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "dtypes":
        key = literal(node.slice)
        frame = value(ctx, node.value.value)
        if isinstance(key, str) and is_dataframe(frame):
            c = column(frame, key)
            if c is not None and c.dtype_repr:
                return f"{label(ctx, node.value.value)}[{key!r}]", c.dtype, c.dtype_repr
    return None


def _columns_loop(ctx: RuleContext, node: ast.expr, call: ast.Call) -> tuple[str, Facts] | None:
    """`<frame>[c].dtype` where `c` runs over every column of a live frame, and `call` runs in every iteration:
    (frame label, frame facts)."""
    if not (isinstance(node, ast.Attribute) and node.attr == "dtype" and isinstance(node.value, ast.Subscript)
            and isinstance(node.value.slice, ast.Name) and isinstance(node.value.value, ast.Name)):
        return None
    var, frame_node = node.value.slice.id, node.value.value
    cur: ast.AST | None = ctx.parent(call)
    while cur is not None:
        if isinstance(cur, ast.For) and isinstance(cur.target, ast.Name) and cur.target.id == var:
            if any(isinstance(n, ast.Break) for n in ast.walk(cur)) or not is_certain(
                    call, ctx.analysis.parents, stop=cur) or not ctx.is_certain(cur):
                return None
            it = cur.iter
            break
        if isinstance(cur, ast.GeneratorExp):
            return None  # any()/all() may stop before the string column
        if isinstance(cur, (ast.ListComp, ast.SetComp, ast.DictComp)):
            gens = cur.generators
            if len(gens) != 1 or not (isinstance(gens[0].target, ast.Name) and gens[0].target.id == var):
                return None
            first_if = gens[0].ifs[0] if gens[0].ifs else None
            if not (_inside(ctx, call, first_if) if first_if is not None else True) or not ctx.is_certain(cur):
                return None
            if not is_certain(call, ctx.analysis.parents, stop=first_if if first_if is not None else cur):
                return None
            it = gens[0].iter
            break
        cur = ctx.parent(cur)
    else:
        return None
    base = it.value if isinstance(it, ast.Attribute) and it.attr == "columns" else it
    if not (isinstance(base, ast.Name) and base.id == frame_node.id):
        return None
    frame = value(ctx, base)
    if not is_dataframe(frame) or frame.columns is None or frame.columns_truncated:
        return None
    if not ctx.is_live(base.id, call):
        return None
    return base.id, frame


def _inside(ctx: RuleContext, node: ast.AST, ancestor: ast.AST) -> bool:
    cur: ast.AST | None = node
    while cur is not None:
        if cur is ancestor:
            return True
        cur = ctx.parent(cur)
    return False


@rule("pandas-string-dtype", needs_probe=True)
def string_dtype(ctx: RuleContext) -> Iterator[Finding]:
    """StringDtype columns given to numpy: `.values.reshape` (pyarrow storage), `np.issubdtype`."""
    pandas3 = (_major(library_version(ctx, "pandas")) or 0) >= 3
    for call in ctx.calls():
        v = None
        func = call.func
        if (pandas3 and isinstance(func, ast.Attribute) and func.attr == "reshape"
                and isinstance(func.value, ast.Attribute) and func.value.attr in ("values", "array")):
            if not ctx.is_certain(call):
                continue
            f = value(ctx, func.value.value)
            if f is not None:
                v = _reshape_verdict(label(ctx, func.value.value), f)
        elif qualname(ctx, func) == "numpy.issubdtype" and call.args and not call.keywords:
            first = call.args[0]
            if ctx.is_certain(call):
                got = _string_dtype_of(ctx, first)
                if got is not None:
                    v = _dtype_verdict(*got)
            if v is None:
                loop = _columns_loop(ctx, first, call)
                if loop is not None:
                    name, frame = loop
                    strings = [c for c in frame.columns or [] if c.dtype_repr]
                    if strings:
                        c = strings[0]
                        v = _dtype_verdict(f"{name}[{c.name!r}] (the loop reaches it)", c.dtype, c.dtype_repr)
        if v is not None:
            yield emit(ctx, call, "pandas-string-dtype", v)
            return
