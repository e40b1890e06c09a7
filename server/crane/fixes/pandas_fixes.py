"""Candidates for pandas conversions and combinations that fail on the data.

- `to-numeric`: `s.astype(int|float|...)` or `pd.to_numeric(s)` on text that does not parse ("invalid literal
  for int()", "could not convert string to float", "Unable to parse string") → remove the formatting
  characters the values hold (currency signs, thousands separators, '%', '+', spaces: read from the data in
  the sandbox), or `pd.to_numeric(s, errors='coerce')` (unparsable → NaN; to the nullable 'Int64' for an
  integer target), or both; NaNs into an integer dtype → the nullable 'Int64'.
- `drop-missing-labels`: `df.drop([...])` of labels that are not there (and not a near miss of existing ones,
  which `nearest-column` offers instead) → `errors='ignore'`.
- `merge-key`: `merge(on='k')` with a key a side lacks → the closest column both sides (or that side) have.
- `join-suffix`: `df.join(other)` whose columns overlap → `rsuffix=`.
"""

from __future__ import annotations

import ast
import re

from crane.fixes.context import FixContext
from crane.fixes.edits import quote_like
from crane.fixes.match import nearest, score

INT_DTYPES = {"int", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "np.int64",
              "np.int32", "numpy.int64", "numpy.int32", "Int64", "Int32"}
FLOAT_DTYPES = {"float", "float32", "float64", "np.float64", "np.float32", "numpy.float64", "numpy.float32",
                "Float64"}
JUNK = "$€£,%+ "  # when the values cannot be read: currency signs, thousands separators, '%', '+', spaces
UNKNOWN_LOSS = 20.0  # penalty of a coercing conversion whose losses could not be measured
_PARSE = re.compile(r"invalid literal for int\(\)|could not convert string to float|Unable to parse string|"
                    r"Cannot convert non-finite values|cannot convert float NaN to integer|"
                    r"Cannot convert NA to integer|invalid literal for float\(\)")


def _dtype_name(ctx: FixContext, node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ctx.text(node)


def _junk_chars(ctx: FixContext, obj: str) -> str:
    """The non-numeric characters the values of `obj` hold that are formatting, read in the sandbox."""
    if ctx.evaluator is None or "\n" in obj or len(obj) > 300:
        return JUNK
    chars = ctx.evaluate(f"sorted(set(''.join(map(str, {obj}.dropna().astype(str).head(100000)))) - "
                         f"set('0123456789.-eE'))", None)
    if not isinstance(chars, list):
        return JUNK
    return "".join(c for c in chars if isinstance(c, str) and len(c) == 1 and not c.isalnum())


def _pattern(chars: str) -> str:
    """A regex literal matching any of `chars` (whitespace as \\s)."""
    parts = []
    for c in dict.fromkeys(chars):
        if c.isspace():
            c = "\\s"
        elif c in "\\]^-[":
            c = "\\" + c
        if c not in parts:
            parts.append(c)
    regex = "[" + "".join(parts) + "]"
    return f"r'{regex}'" if "'" not in regex else repr(regex)


def _chars(junk: str) -> str:
    shown = ["spaces" if c == " " else "tabs" if c == "\t" else repr(c) for c in dict.fromkeys(junk)]
    return ", ".join(shown)


def _lost(ctx: FixContext, converted: str, obj: str) -> float | None:
    """The share of `obj`'s present values that `converted` turns into missing ones (read in the sandbox)."""
    if ctx.evaluator is None:
        return None
    value = ctx.evaluate(f"(lambda a, b: float(((b.isna()) & (a.notna())).sum() / max(int(a.notna().sum()), 1)))"
                         f"({obj}, {converted})", None)
    return value if isinstance(value, float) else None


def _pd(ctx: FixContext) -> tuple[str, list[str]]:
    pd = ctx.alias("pandas")
    return (pd, []) if pd is not None else ("pd", ["import pandas as pd"])


MAX_LOSS = 0.5  # a conversion that turns more than half of the present values into missing ones is refused


def to_numeric(ctx: FixContext):
    if ctx.crash.ename not in ("ValueError", "IntCastingNaNError", "TypeError") or not _PARSE.search(ctx.crash.evalue):
        return
    pd, imports = _pd(ctx)
    for call in ctx.crash_nodes(ast.Call):
        assert isinstance(call, ast.Call)
        stmt = ctx.statement_of(call)
        if stmt is None:
            continue
        options = _conversions(ctx, call, pd)
        if options is None:
            continue
        for text, title, penalty, coerced in options:
            if coerced is not None:  # the values the conversion would lose, read in the sandbox
                lost = _lost(ctx, coerced, ctx.text(call.args[0]) if _is_to_numeric(ctx, call) else
                             ctx.text(call.func.value))  # type: ignore[attr-defined]
                if lost is not None and lost > MAX_LOSS:
                    continue
                if lost:
                    title += f" ({lost:.0%} of the values)"
                if lost is None:
                    penalty += UNKNOWN_LOSS
            ed = ctx.editor()
            try:
                ed.replace(call, text)
                if imports and f"{pd}." in text:
                    ed.insert_before(stmt, imports)
                new = ed.apply()
            except ValueError:
                continue
            yield ctx.candidate("to-numeric", title, new, penalty=penalty,
                                detail=f"{ctx.crash.ename}: {ctx.crash.evalue[:100]}")
        return


def _is_to_numeric(ctx: FixContext, call: ast.Call) -> bool:
    return isinstance(call.func, (ast.Attribute, ast.Name)) and ctx.text(call.func).endswith("to_numeric")


def _conversions(ctx: FixContext, call: ast.Call, pd: str) -> list[tuple[str, str, float, str | None]] | None:
    """(replacement of the call, title, penalty, the coercing conversion whose losses to check or None)."""
    func = call.func
    out: list[tuple[str, str, float, str | None]] = []
    if isinstance(func, ast.Attribute) and func.attr == "astype" and call.args:
        obj = ctx.text(func.value)
        dtype = _dtype_name(ctx, call.args[0])
        to_int = dtype in INT_DTYPES or dtype.lower().startswith(("int", "uint"))
        if not (to_int or dtype in FLOAT_DTYPES or dtype.lower().startswith("float")):
            return None
        junk = _junk_chars(ctx, obj)
        target = ctx.text(call.args[0])
        strip = f"{obj}.str.replace({_pattern(junk)}, '', regex=True)" if junk else None
        nullable = ".astype('Int64')" if to_int else ""
        what = "missing" if to_int else "NaN"
        if strip:
            out.append((f"{strip}.astype({target})", f"Remove {_chars(junk)} from the values, then convert", 0.0,
                        None))
        if to_int:
            out.append((f"{obj}.astype(float).astype('Int64')", "Convert through float to the nullable 'Int64'", 2.0,
                        None))
        coerce = f"{pd}.to_numeric({obj}, errors='coerce')"
        out.append((coerce + nullable, f"Convert with pd.to_numeric (unparsable values → {what})", 6.0, coerce))
        if strip:
            coerce = f"{pd}.to_numeric({strip}, errors='coerce')"
            out.append((coerce + nullable, f"Remove {_chars(junk)}, then pd.to_numeric (unparsable → {what})", 8.0,
                        coerce))
        return out
    if _is_to_numeric(ctx, call) and call.args:
        if any(k.arg == "errors" for k in call.keywords):
            return None
        obj = ctx.text(call.args[0])
        junk = _junk_chars(ctx, obj)
        head = ctx.text(func)
        rest = "".join(f", {ctx.text(k)}" for k in call.keywords)
        if junk:
            strip = f"{obj}.str.replace({_pattern(junk)}, '', regex=True)"
            out.append((f"{head}({strip}{rest})", f"Remove {_chars(junk)} from the values first", 0.0, None))
            coerce = f"{head}({strip}{rest}, errors='coerce')"
            out.append((coerce, f"Remove {_chars(junk)}, unparsable values → NaN", 8.0, coerce))
        coerce = f"{head}({obj}{rest}, errors='coerce')"
        out.append((coerce, "Unparsable values → NaN (errors='coerce')", 6.0, coerce))
        return out
    return None


_NOT_FOUND = re.compile(r"not found in axis")
TYPO = 0.9  # a missing label this close to an existing one is a typo, not a label already dropped


def drop_missing_labels(ctx: FixContext):
    if ctx.crash.ename != "KeyError" or not _NOT_FOUND.search(ctx.crash.evalue):
        return
    missing = re.findall(r"'([^']*)'", ctx.crash.evalue)
    for call in ctx.crash_nodes(ast.Call):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "drop"):
            continue
        if any(k.arg == "errors" for k in call.keywords):
            continue
        owner = ctx.text(call.func.value)
        f = ctx.facts(owner) if re.fullmatch(r"\w+", owner) else None
        if f is not None and f.columns and any(score(m, c.name) >= TYPO for m in missing for c in f.columns):
            return  # a typo of an existing column: the nearest column is the fix, not ignoring the label
        ed = ctx.editor()
        try:
            new = ed.add_keyword(call, "errors='ignore'").apply()
        except ValueError:
            return
        yield ctx.candidate("drop-missing-labels", "Drop only the labels that exist (errors='ignore')", new,
                            penalty=4.0, detail=f"{owner} has no {', '.join(map(repr, missing[:4]))} (already dropped?)")
        return


def _columns(ctx: FixContext, node: ast.AST) -> list[str] | None:
    if not isinstance(node, ast.Name):
        return None
    f = ctx.facts(node.id) or ctx.more_facts([node.id]).get(node.id)
    if f is None or not f.columns:
        return None
    return [c.name for c in f.columns]


def merge_key(ctx: FixContext):
    if ctx.crash.ename != "KeyError":
        return
    try:
        key = ast.literal_eval(ctx.crash.evalue)
    except (ValueError, SyntaxError, TypeError):
        key = (re.findall(r"'([^']*)'", ctx.crash.evalue) or [None])[0]
    if not isinstance(key, str):
        return
    for call in ctx.crash_nodes(ast.Call):
        if not (isinstance(call, ast.Call) and isinstance(call.func, (ast.Attribute, ast.Name))):
            continue
        name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
        if name != "merge":
            continue
        left: ast.expr | None
        right: ast.expr | None
        if isinstance(call.func, ast.Attribute) and ctx.text(call.func.value) != ctx.alias("pandas"):
            left, right = call.func.value, call.args[0] if call.args else None
        else:
            left = call.args[0] if call.args else None
            right = call.args[1] if len(call.args) > 1 else None
        lc = _columns(ctx, left) if left is not None else None
        rc = _columns(ctx, right) if right is not None else None
        for kw in call.keywords:
            consts = [kw.value] if isinstance(kw.value, ast.Constant) else \
                [e for e in kw.value.elts if isinstance(e, ast.Constant)] if isinstance(kw.value, ast.List) else []
            for const in consts:
                if const.value != key:
                    continue
                if kw.arg == "on":
                    pool = sorted(set(lc or []) & set(rc or [])) if lc is not None and rc is not None else (lc or rc or [])
                elif kw.arg == "left_on":
                    pool = lc or []
                elif kw.arg == "right_on":
                    pool = rc or []
                else:
                    continue
                for match in nearest(key, pool):
                    ed = ctx.editor()
                    try:
                        new = ed.replace(const, quote_like(ed.text(const), match)).apply()
                    except ValueError:
                        continue
                    yield ctx.candidate("merge-key", f"Merge on {match!r}", new,
                                        detail=f"{key!r} is not a column of both sides; {match!r} is")
        return


def join_suffix(ctx: FixContext):
    if ctx.crash.ename != "ValueError" or "columns overlap but no suffix specified" not in ctx.crash.evalue:
        return
    for call in ctx.crash_nodes(ast.Call):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "join"):
            continue
        if any(k.arg in ("lsuffix", "rsuffix") for k in call.keywords):
            continue
        ed = ctx.editor()
        try:
            new = ed.add_keyword(call, "rsuffix='_other'").apply()
        except ValueError:
            return
        yield ctx.candidate("join-suffix", "Suffix the overlapping columns (rsuffix='_other')", new, penalty=4.0,
                            detail=ctx.crash.evalue[:120])
        return
