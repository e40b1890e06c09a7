"""Candidates for inputs a scikit-learn estimator rejects (at `est.fit / predict / transform / ...(X, y)`).

- `reshape-2d`: "Expected 2D array, got 1D array instead" (a Series on scikit-learn 1.5: "Expected a
  2-dimensional container") → `df[['col']]` for `df['col']`, `s.to_frame()` for
  a Series, `a.reshape(-1, 1)` for an array (inline, or rebinding the name so later uses get it too).
- `encode-strings`: "could not convert string to float" → encode the text columns of X with an
  OrdinalEncoder fitted on the fit input (and applied to the later predict/transform inputs of the same cell
  with the same columns), or one-hot with `pd.get_dummies` (later inputs aligned to the fit columns); text
  arrays with an OrdinalEncoder; text targets of a regressor with a LabelEncoder.
- `impute-nan` / `drop-nan-rows`: "Input X contains NaN" → fill the NaNs (column medians, or 0), or drop the
  rows holding them (from X and y together, at fit).
"""

from __future__ import annotations

import ast
import re

from crane.fixes.context import FixContext
from crane.probe.facts import Facts

EST_METHODS = {"fit", "predict", "predict_proba", "predict_log_proba", "decision_function", "transform",
               "fit_transform", "fit_predict", "score", "partial_fit", "inverse_transform"}
FIT_METHODS = {"fit", "fit_transform", "fit_predict", "partial_fit"}
TEXT_DTYPES = ("object", "category", "string", "str")


def estimator_calls(ctx: FixContext) -> list[ast.Call]:
    """`est.method(...)` calls of the failing statement on the crash line, innermost first."""
    calls = [c for c in ctx.crash_nodes(ast.Call) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and c.func.attr in EST_METHODS and c.args]
    return list(reversed(calls))


def _is_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Name)


def _facts(ctx: FixContext, node: ast.AST) -> Facts | None:
    if isinstance(node, ast.Name):
        return ctx.facts(node.id) or ctx.more_facts([node.id]).get(node.id)
    return None


def _text_columns(f: Facts) -> list[str]:
    return [c.name for c in f.columns or [] if c.dtype.startswith(TEXT_DTYPES) and c.numeric_parse != "all"]


# -- 1-D → 2-D -------------------------------------------------------------------------------------------------
# scikit-learn's words for 1-D X: an array's (every release), a pandas Series' (1.5's; 1.2 says the array's)
ONE_D = ("Expected 2D array, got 1D array", "Expected a 2-dimensional container")


def reshape_2d(ctx: FixContext):
    if ctx.crash.ename != "ValueError" or not any(m in ctx.crash.evalue for m in ONE_D):
        return
    for call in estimator_calls(ctx):
        arg = call.args[0]
        stmt = ctx.statement_of(call)
        options: list[tuple[str, str]] = []  # (inline text, title)
        f = _facts(ctx, arg)
        text = ctx.text(arg)
        if isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) and isinstance(arg.slice.value, str):
            options.append((f"{ctx.text(arg.value)}[[{arg.slice.value!r}]]", "Select it as a one-column DataFrame"))
        if f is not None and f.kind == "series":
            options.append((f"{text}.to_frame()", f"Use {text}.to_frame()"))
        elif f is not None and f.kind in ("ndarray", "tensor") or (isinstance(arg, ast.Attribute)
                                                                 and arg.attr in ("values", "to_numpy")):
            options.append((f"{text}.reshape(-1, 1)", f"Reshape {text} to one column"))
        elif (np := ctx.alias("numpy")) is not None:
            options.append((f"{np}.asarray({text}).reshape(-1, 1)", f"Reshape {text} to one column"))
        for inline, title in options:
            ed = ctx.editor()
            try:
                new = ed.replace(arg, inline).apply()
            except ValueError:
                continue
            yield ctx.candidate("reshape-2d", title, new, detail=f"{ctx.text(call.func)} needs 2-D input; "
                                                                  f"{text} is 1-D")
        if _is_name(arg) and stmt is not None and options:  # rebind: later uses in the cell get the 2-D form
            inline = options[-1][0] if not options[0][0].endswith("]]") else options[0][0]
            ed = ctx.editor()
            try:
                new = ed.insert_before(stmt, [f"{text} = {inline}"]).apply()
            except ValueError:
                continue
            yield ctx.candidate("reshape-2d", f"Make {text} one column ({text} = {inline})", new, penalty=3.0,
                                detail=f"{text} is 1-D; estimators need 2-D input")
        return


# -- text → numbers --------------------------------------------------------------------------------------------
def _later_inputs(ctx: FixContext, after: ast.stmt, columns: list[str], exclude: str) -> list[tuple[ast.stmt, str]]:
    """(statement, name) of later estimator inputs in the cell that are DataFrames holding all `columns`."""
    out = []
    seen = {exclude}
    for call in ctx.all_nodes(ast.Call):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in EST_METHODS - FIT_METHODS and call.args and _is_name(call.args[0])):
            continue
        stmt = ctx.statement_of(call)
        if stmt is None or stmt.lineno <= after.lineno:
            continue
        name = call.args[0].id  # type: ignore[attr-defined]
        if name in seen:
            continue
        seen.add(name)
        out.append((stmt, name))
    return out


def _string_error(ctx: FixContext) -> bool:
    v = ctx.crash.evalue
    return ctx.crash.ename == "ValueError" and ("could not convert string to float" in v or "Unknown label type" in v
                                                or "non-numeric data" in v or "dtype='numeric' is not compatible" in v)


def encode_strings(ctx: FixContext):
    if not _string_error(ctx):
        return
    for call in estimator_calls(ctx):
        stmt = ctx.statement_of(call)
        if stmt is None:
            continue
        fitting = call.func.attr in FIT_METHODS  # type: ignore[attr-defined]
        x, y = call.args[0], call.args[1] if len(call.args) > 1 else None
        fx, fy = _facts(ctx, x), _facts(ctx, y) if y is not None else None
        y_text = fy is not None and y is not None and _is_name(y) and (
            (fy.dtype or "").startswith(TEXT_DTYPES) and fy.numeric_parse != "all")
        y_lines = []
        if fitting and y_text:
            enc = ctx.fresh_name("label_encoder")
            y_lines = ["from sklearn.preprocessing import LabelEncoder", f"{enc} = LabelEncoder()",
                       f"{y.id} = {enc}.fit_transform({y.id})"]  # type: ignore[union-attr]
        if fx is not None and _is_name(x) and fx.kind == "dataframe" and _text_columns(fx):
            cols = _text_columns(fx)
            xs = x.id  # type: ignore[attr-defined]
            if fitting:
                yield from _ordinal_frame(ctx, stmt, xs, cols, y_lines)
                yield from _dummies_frame(ctx, stmt, xs, cols, y_lines)
        elif fx is not None and _is_name(x) and fx.kind == "ndarray" and (fx.dtype or "") == "object" and fitting:
            enc = ctx.fresh_name("encoder")
            xs = x.id  # type: ignore[attr-defined]
            shape = fx.shape or []
            two_d = f"{xs}" if len(shape) == 2 else f"{xs}.reshape(-1, 1)"
            lines = ["from sklearn.preprocessing import OrdinalEncoder", f"{enc} = OrdinalEncoder()",
                     f"{xs} = {enc}.fit_transform({two_d})"] + y_lines
            ed = ctx.editor()
            try:
                new = ed.insert_before(stmt, lines).apply()
            except ValueError:
                continue
            yield ctx.candidate("encode-strings", f"Encode the text values of {xs} (OrdinalEncoder)", new,
                                detail=f"{xs} holds text; estimators need numbers")
        elif y_lines:
            ed = ctx.editor()
            try:
                new = ed.insert_before(stmt, y_lines).apply()
            except ValueError:
                continue
            yield ctx.candidate("encode-strings", f"Encode the labels of {y.id} (LabelEncoder)", new,  # type: ignore
                                detail=f"{y.id} holds text labels")  # type: ignore[union-attr]
        return


def _ordinal_frame(ctx: FixContext, stmt: ast.stmt, xs: str, cols: list[str], y_lines: list[str]):
    enc = ctx.fresh_name("encoder")
    c = repr(cols)
    lines = ["from sklearn.preprocessing import OrdinalEncoder",
             f"{enc} = OrdinalEncoder(handle_unknown='use_encoded_value', unknown_value=-1)",
             f"{xs}[{c}] = {enc}.fit_transform({xs}[{c}])"] + y_lines
    ed = ctx.editor()
    try:
        ed.insert_before(stmt, lines)
        for later, name in _later_inputs(ctx, stmt, cols, xs):
            ed.insert_before(later, [f"{name}[{c}] = {enc}.transform({name}[{c}])"])
        new = ed.apply()
    except ValueError:
        return
    yield ctx.candidate("encode-strings", f"Encode the text columns of {xs} (OrdinalEncoder)", new,
                        detail=f"text columns {', '.join(map(repr, cols[:6]))} reach the estimator")


def _dummies_frame(ctx: FixContext, stmt: ast.stmt, xs: str, cols: list[str], y_lines: list[str]):
    pd = ctx.alias("pandas")
    lines = [] if pd is not None else ["import pandas as pd"]
    pd = pd or "pd"
    c = repr(cols)
    lines += [f"{xs} = {pd}.get_dummies({xs}, columns={c})"] + y_lines
    ed = ctx.editor()
    try:
        ed.insert_before(stmt, lines)
        for later, name in _later_inputs(ctx, stmt, cols, xs):
            ed.insert_before(later, [f"{name} = {pd}.get_dummies({name}, columns={c}).reindex(columns={xs}.columns, "
                                     f"fill_value=0)"])
        new = ed.apply()
    except ValueError:
        return
    yield ctx.candidate("encode-strings", f"One-hot encode the text columns of {xs} (get_dummies)", new, penalty=5.0,
                        detail=f"text columns {', '.join(map(repr, cols[:6]))} reach the estimator")


def _data_name(ctx: FixContext, arg: ast.expr) -> tuple[str, Facts] | None:
    """The name holding the data of an estimator input: the argument itself, or the first data name in the
    expression it is computed from (`X` in `X.reindex(...)`)."""
    nodes = [arg] if isinstance(arg, ast.Name) else [n for n in ast.walk(arg) if isinstance(n, ast.Name)]
    for n in nodes:
        f = _facts(ctx, n)
        if f is not None and f.kind in ("dataframe", "series", "ndarray"):
            return n.id, f
    return None


# -- NaN -------------------------------------------------------------------------------------------------------
_NAN = re.compile(r"Input (X|y)? ?contains NaN|Input contains NaN|contains NaN")


def nan_inputs(ctx: FixContext):
    if ctx.crash.ename != "ValueError" or not _NAN.search(ctx.crash.evalue):
        return
    which = "y" if "Input y contains" in ctx.crash.evalue else "X"
    for call in estimator_calls(ctx):
        stmt = ctx.statement_of(call)
        if stmt is None:
            continue
        fitting = call.func.attr in FIT_METHODS  # type: ignore[attr-defined]
        idx = 1 if which == "y" else 0
        if idx >= len(call.args):
            continue
        base = _data_name(ctx, call.args[idx])
        if base is None:
            continue
        name, f = base
        direct = _is_name(call.args[idx])
        other = call.args[1 - idx].id if len(call.args) > 1 and _is_name(call.args[1 - idx]) else None  # type: ignore
        kind = f.kind
        lines_sets: list[tuple[str, list[str], str, float]] = []
        if kind == "dataframe":
            lines_sets.append(("impute-nan", [f"{name} = {name}.fillna({name}.median(numeric_only=True))"],
                               f"Fill the NaNs of {name} with column medians", 0.0))
            lines_sets.append(("impute-nan", [f"{name} = {name}.fillna(0)"], f"Fill the NaNs of {name} with 0", 2.0))
        elif kind == "series":
            lines_sets.append(("impute-nan", [f"{name} = {name}.fillna({name}.median())"],
                               f"Fill the NaNs of {name} with its median", 0.0))
        elif kind == "ndarray" and (np := ctx.alias("numpy")) is not None:
            lines_sets.append(("impute-nan", ["from sklearn.impute import SimpleImputer",
                                              f"{name} = SimpleImputer(strategy='median').fit_transform({name})"],
                               f"Impute the NaNs of {name} (SimpleImputer, median)", 0.0))
            lines_sets.append(("impute-nan", [f"{name} = {np}.nan_to_num({name})"], f"Replace the NaNs of {name} by 0",
                               2.0))
        if fitting and direct and other is not None and kind in ("dataframe", "series"):
            keep = ctx.fresh_name("rows")
            test = f"{name}.notna().all(axis=1)" if kind == "dataframe" else f"{name}.notna()"
            x, y = (name, other) if idx == 0 else (other, name)
            lines_sets.append(("drop-nan-rows", [f"{keep} = {test}.to_numpy()", f"{x}, {y} = {x}[{keep}], {y}[{keep}]"],
                               f"Drop the rows where {name} has NaN", 4.0))
        for kind_id, lines, title, penalty in lines_sets:
            ed = ctx.editor()
            try:
                new = ed.insert_before(stmt, lines).apply()
            except ValueError:
                continue
            yield ctx.candidate(kind_id, title, new, penalty=penalty,
                                detail=f"{name} holds NaN, which {ctx.text(call.func)} rejects")
        return
