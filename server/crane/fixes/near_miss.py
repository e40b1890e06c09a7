"""Candidates for a near miss: a KeyError or AttributeError whose key, column or attribute is close to one that
exists (case, punctuation, edit distance, the fitted-attribute underscore — crane.fixes.match).

- `nearest-key` / `nearest-column`: `container['k']` (and the keys of `container[['a', 'k']]`) → the closest
  existing key or column of the container's value at the crash point (its columns, dict keys, or the
  probe's close names); every subscript of the same container with the same key in the cell is changed.
- `nearest-attribute`: `obj.attr` → the closest existing attribute (the probe's close names, fitted
  attributes of an estimator, a DataFrame's columns as `obj['Col']`).
"""

from __future__ import annotations

import ast
import re

from crane.fixes.context import FixContext
from crane.fixes.edits import quote_like
from crane.fixes.match import nearest
from crane.probe.facts import Facts, ProbeRequest

_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


_BACKTICKED = re.compile(r"`(?:\w+\.)+(\w+)`")


def _quoted(evalue: str) -> list[str]:
    return [m.group(1) for m in _QUOTED.finditer(evalue or "")]


def _keys_of(node: ast.Subscript) -> list[tuple[ast.Constant, str]]:
    """The literal text keys of `x['k']` or `x[['a', 'b']]`, with their constant nodes."""
    sl = node.slice
    if isinstance(sl, ast.Constant) and isinstance(sl.value, str):
        return [(sl, sl.value)]
    if isinstance(sl, ast.List):
        return [(e, e.value) for e in sl.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _existing_keys(ctx: FixContext, expr: str, key: str, facts: Facts | None) -> tuple[list[str], str]:
    """Existing keys of the container `expr` that could be meant, and what they are ("column" / "key")."""
    pool: list[str] = []
    what = "key"
    if facts is not None and facts.kind == "dataframe" and facts.columns:
        pool += [c.name for c in facts.columns]
        what = "column"
    elif facts is not None and facts.keys:
        for k in facts.keys:
            try:
                v = ast.literal_eval(k)
            except (ValueError, SyntaxError):
                continue
            if isinstance(v, str):
                pool.append(v)
    chk = ctx.key_check(expr, key)
    if chk is not None and chk.suggestions:
        pool += chk.suggestions
    if not pool and ctx.ask is not None:  # not asked yet: ask the crash-point state about this key
        res = ctx.probe_more(ProbeRequest(names=[expr.split(".")[0]], keys=[[expr, key, "key"]]))
        if res is not None:
            pool += [s for k in res.keys for s in (k.suggestions or [])]
            f = res.facts.get(expr)
            if f is not None and f.kind == "dataframe" and f.columns:
                pool += [c.name for c in f.columns]
                what = "column"
    return pool, what


def nearest_key(ctx: FixContext):
    if ctx.crash.ename != "KeyError":
        return
    wanted = set(_quoted(ctx.crash.evalue))
    try:
        wanted.add(ast.literal_eval(ctx.crash.evalue))
    except (ValueError, SyntaxError, TypeError):
        pass
    wanted = {w for w in wanted if isinstance(w, str)}
    if not wanted:
        return
    done: set[tuple[str, str]] = set()
    for sub in ctx.crash_nodes(ast.Subscript):
        assert isinstance(sub, ast.Subscript)
        expr = ctx.text(sub.value)
        for _const, key in _keys_of(sub):
            if key not in wanted or (expr, key) in done:
                continue
            done.add((expr, key))
            facts = ctx.facts(expr) if re.fullmatch(r"[\w.]+", expr) else None
            pool, what = _existing_keys(ctx, expr, key, facts)
            for match in nearest(key, pool):
                ed = ctx.editor()
                try:
                    for other in ctx.all_nodes(ast.Subscript):
                        assert isinstance(other, ast.Subscript)
                        if ctx.text(other.value) != expr:
                            continue
                        for c, k in _keys_of(other):
                            if k == key:
                                ed.replace(c, quote_like(ed.text(c), match))
                    new = ed.apply()
                except ValueError:
                    continue
                kind = "nearest-column" if what == "column" else "nearest-key"
                yield ctx.candidate(kind, f"Use {what} {match!r}", new,
                                    detail=f"{expr} has no {what} {key!r}; it has {match!r}")


def _attribute_pool(ctx: FixContext, chain: str, owner: str, attr: str) -> tuple[list[str], list[str]]:
    """(close attribute names, columns of a DataFrame owner)."""
    pool: list[str] = []
    chk = ctx.attr_check(chain)
    if chk is None and ctx.ask is not None and re.fullmatch(r"[\w.]+", chain):
        res = ctx.probe_more(ProbeRequest(names=[owner.split(".")[0]], attrs=[chain]))
        chk = next((a for a in res.attrs if a.expr == chain), None) if res is not None else None
    if chk is not None and chk.suggestions:
        pool += chk.suggestions
    facts = ctx.facts(owner) if re.fullmatch(r"\w+", owner) else None
    if facts is None and ctx.ask is not None and re.fullmatch(r"\w+", owner):
        facts = ctx.more_facts([owner]).get(owner)
    columns: list[str] = []
    if facts is not None:
        if facts.estimator is not None and facts.estimator.fitted_attributes:
            pool += facts.estimator.fitted_attributes
        if facts.kind == "dataframe" and facts.columns:
            columns = [c.name for c in facts.columns]
    return pool, columns


def nearest_attribute(ctx: FixContext):
    if ctx.crash.ename != "AttributeError":
        return
    quoted = _quoted(ctx.crash.evalue)
    if not quoted:  # numpy 2 names the attribute in backticks: "`np.NaN` was removed in the NumPy 2.0 release. ..."
        quoted = [m.group(1) for m in _BACKTICKED.finditer(ctx.crash.evalue or "")][:1]
    if not quoted:
        return
    attr = quoted[-1]
    seen: set[str] = set()
    for node in ctx.crash_nodes(ast.Attribute):
        assert isinstance(node, ast.Attribute)
        if node.attr != attr:
            continue
        owner = ctx.text(node.value)
        chain = f"{owner}.{attr}"
        if chain in seen:
            continue
        seen.add(chain)
        pool, columns = _attribute_pool(ctx, chain, owner, attr)
        for match in nearest(attr, pool):
            ed = ctx.editor()
            try:
                for other in ctx.all_nodes(ast.Attribute):
                    assert isinstance(other, ast.Attribute)
                    if other.attr == attr and ctx.text(other.value) == owner:
                        s, e = ed.span(other)
                        ed.replace_span(e - len(attr), e, match)
                new = ed.apply()
            except ValueError:
                continue
            yield ctx.candidate("nearest-attribute", f"Use {owner}.{match}", new,
                                detail=f"{owner} has no attribute {attr!r}; it has {match!r}")
        for match in nearest(attr, columns):
            ed = ctx.editor()
            try:
                ed.replace(node, f"{owner}[{quote_like(ctx.text(node), match)}]")
                new = ed.apply()
            except ValueError:
                continue
            yield ctx.candidate("nearest-column", f"Use column {match!r}", new,
                                detail=f"{owner} has no attribute {attr!r}; it has the column {match!r}")
