"""matplotlib / seaborn misuse rules: x and y of different lengths (plot, scatter, bar), seaborn variables
named by a column the `data=` frame does not have (worded as the kernel's seaborn words it: 0.12's two
interfaces, 0.13's one), and seaborn 0.12 categorical plots given only a non-numeric x (or y), which makes them
infer a numeric orientation they cannot draw (0.13 draws those).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import Facts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, library_version, qualname, value
from crane.rulekit.lib_helpers import (
    Verdict,
    column,
    column_names,
    describe,
    index_level_names,
    is_dataframe,
    literal,
    n_samples,
    shape_of,
)
from crane.rulekit.python_versions import parse_version
from crane.rulekit.registry import rule

# seaborn functions whose variables go through the old categorical interface (before 0.13): unknown names raise
# "Could not interpret input 'name'" whatever the index is called. From 0.13 on every function reads its
# variables through seaborn._core.data.PlotData (columns, then index level names) and words the error as
# NEW_INTERFACE_MISSING below.
SNS_CATEGORICAL = {"barplot", "boxplot", "violinplot", "boxenplot", "stripplot", "swarmplot", "pointplot", "countplot"}
# Categorical plots that need a numeric value axis: with only one of x/y given it must be numeric.
SNS_VALUE_AXIS = {"barplot", "boxplot", "violinplot", "boxenplot", "pointplot"}
# seaborn functions of the new interface: a name may also be an index level name, so those are checked too.
SNS_VECTOR = {"scatterplot", "lineplot", "histplot", "kdeplot", "ecdfplot", "rugplot", "relplot", "displot"}
SNS_VARS = ("x", "y", "hue", "size", "style")
NEW_INTERFACE_MISSING = "Could not interpret value `{col}` for `{var}`. An entry with this name does not appear in `data`."

AXES_TYPES = ("matplotlib.axes._axes.Axes", "matplotlib.axes._subplots.AxesSubplot")


def _is_text_column(f: Facts, name: str) -> bool | None:
    c = column(f, name)
    if c is None:
        return None
    if c.dtype == "category":
        return True
    if c.dtype in ("object", "string", "str") and c.numeric_parse in ("none", "some"):
        return True
    if c.dtype.startswith(("int", "uint", "float", "Int", "Float")):
        return False
    return None


def seaborn_verdict(fn: str, data_lbl: str, data: Facts, variables: dict[str, str], orient_given: bool,
                    version: str | None) -> Verdict | None:
    names = column_names(data)
    if names is None:
        return None
    for var in SNS_VARS:
        col = variables.get(var)
        if col is None or col in names:
            continue
        shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
        ev = [f"{data_lbl}: pandas DataFrame, columns {shown}; no column {col!r}"]
        levels = index_level_names(data)
        if (parse_version(version) or (0, 0)) >= (0, 13):  # one interface for every function
            if levels is not None and col not in levels:
                return Verdict("ValueError", NEW_INTERFACE_MISSING.format(col=col, var=var), "data confusion", ev, 0.9)
            return None
        if fn in SNS_CATEGORICAL:
            return Verdict("ValueError", f"Could not interpret input '{col}'", "data confusion", ev, 0.9)
        if fn in SNS_VECTOR and levels is not None and col not in levels:
            return Verdict("ValueError", f"Could not interpret value `{col}` for parameter `{var}`",
                           "data confusion", ev, 0.9)
        return None
    if fn in SNS_VALUE_AXIS and not orient_given and version and version.startswith("0.12"):
        given = [v for v in ("x", "y") if v in variables]
        if len(given) == 1:
            var = given[0]
            c = column(data, variables[var])
            if c is not None and _is_text_column(data, variables[var]):
                way = "Horizontal" if var == "x" else "Vertical"
                return Verdict(
                    "TypeError", f"{way} orientation requires numeric `{var}` variable.", "API misuse",
                    [f"{data_lbl}[{variables[var]!r}]: {c.dtype}" + (f", e.g. {c.example_values[0]}"
                                                                    if c.example_values else ""),
                     f"only {var}= is given, so seaborn {version} draws the values along {var}"],
                    0.85)
    return None


def xy_verdict(fn: str, lx: str, fx: Facts, ly: str, fy: Facts) -> Verdict | None:
    sx, sy = shape_of(fx), shape_of(fy)
    nx, ny = n_samples(fx), n_samples(fy)
    if nx is None or ny is None:
        return None
    ev = [describe(lx, fx) if sx else f"{lx}: length {nx}", describe(ly, fy) if sy else f"{ly}: length {ny}"]
    if fn == "plot":
        if nx != ny:
            a = sx if sx else (nx,)
            b = sy if sy else (ny,)
            return Verdict("ValueError", f"x and y must have same first dimension, but have shapes {_sh(a)} and "
                           f"{_sh(b)}", "implementation error", ev, 0.9)
        return None
    if fn == "scatter":
        size_x = _size(fx, sx, nx)
        size_y = _size(fy, sy, ny)
        if size_x is not None and size_y is not None and size_x != size_y:
            return Verdict("ValueError", "x and y must be the same size", "implementation error", ev, 0.9)
        return None
    if fn in ("bar", "barh"):
        a = sx if sx else (nx,)
        b = sy if sy else (ny,)
        if len(a) == 1 and len(b) == 1 and nx != ny and nx != 1 and ny != 1:
            return Verdict("ValueError", "shape mismatch: objects cannot be broadcast to a single shape.  Mismatch "
                           f"is between arg 0 with shape {_sh(a)} and arg 1 with shape {_sh(b)}.",
                           "implementation error", ev, 0.9)
    return None


def _size(f: Facts, shp, n) -> int | None:
    if shp is not None:
        total = 1
        for d in shp:
            total *= d
        return total
    return n if f.kind in ("list", "tuple") else None


def _sh(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _data_arg(kind: str) -> bool:
    return kind in ("dataframe", "series", "ndarray", "list", "tuple")


@rule("plot-args", needs_probe=True)
def plot_args(ctx: RuleContext) -> Iterator[Finding]:
    """x/y length mismatches in matplotlib, missing columns and impossible orientation in seaborn."""
    sns_version = library_version(ctx, "seaborn")
    for call in ctx.calls():
        if not ctx.is_certain(call) or any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords):
            continue
        q = qualname(ctx, call.func) or ""
        fn = q.rsplit(".", 1)[-1]
        v = None
        if q.startswith("seaborn.") and (fn in SNS_CATEGORICAL or fn in SNS_VECTOR):
            data_node = ctx.arg(call, 0, "data")
            data = value(ctx, data_node)
            if not is_dataframe(data) or len(call.args) > 1:
                continue
            variables = {}
            ok = True
            for var in SNS_VARS:
                node = ctx.kwarg(call, var)
                if node is None:
                    continue
                lit = literal(node)
                if isinstance(lit, str):
                    variables[var] = lit
                else:
                    ok = False  # vectors or expressions: not judged
            if not ok:
                continue
            v = seaborn_verdict(fn, label(ctx, data_node), data, variables, ctx.kwarg(call, "orient") is not None,
                                sns_version)
        elif fn in ("plot", "scatter", "bar", "barh"):
            mpl = q.startswith("matplotlib.pyplot.")
            if not mpl and isinstance(call.func, ast.Attribute):
                recv = value(ctx, call.func.value)
                mpl = recv is not None and recv.type in AXES_TYPES
            if not mpl or ctx.kwarg(call, "data") is not None:
                continue
            if fn == "plot" and not (len(call.args) == 2 or (len(call.args) == 3 and isinstance(literal(call.args[2]), str))):
                continue
            if fn != "plot" and len(call.args) < 2:
                continue
            fx, fy = value(ctx, call.args[0]), value(ctx, call.args[1])
            if fx is None or fy is None or not _data_arg(fx.kind) or not _data_arg(fy.kind):
                continue
            if fx.truncated and fx.kind in ("list", "tuple") or fy.truncated and fy.kind in ("list", "tuple"):
                continue
            v = xy_verdict(fn, label(ctx, call.args[0]), fx, label(ctx, call.args[1]), fy)
        if v is not None:
            yield emit(ctx, call, "plot-args", v)
            return

