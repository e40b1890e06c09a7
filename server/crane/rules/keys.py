"""Rule `missing-key`: a literal key or label that is not in its container -> KeyError.

Covers `df['col']` / `df[['a', 'b']]` loads (and `del df['col']`, `df['col'] += ...`), `d['k']` on a plain
dict, `s['label']` on a Series, `df.drop(columns=...)` / `df.drop([...], axis=1)` and `df.drop([label])` on
the index (only without errors='ignore'). The answer comes from the probe's KeyCheck while the container is
still the kernel's object at that point of the cell, else from the flow-sensitive facts (e.g. after the cell
dropped or added columns). Containers of other types (defaultdict, Counter, custom classes) are not judged.
Related information points at an executed cell that already dropped or deleted that key (re-run cells).
The message is the KeyError's text as the kernel shows it (pandas' words for drops and lists of keys, on the
kernel's pandas), then, after " — ", what is missing where, and the closest existing key or column when one is
close (`crane.rulekit.suggest`).
"""

from __future__ import annotations

from collections.abc import Iterator

from crane.finding import Finding, Related
from crane.probe.facts import Facts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import library_version
from crane.rulekit.python_versions import parse_version
from crane.rulekit.registry import rule
from crane.rulekit.suggest import closest

_DICT_TYPES = {"dict", "builtins.dict", "collections.OrderedDict", "OrderedDict"}


def _kind(f: Facts) -> str | None:
    if f.kind == "dataframe" and f.type.startswith("pandas."):
        return "dataframe"
    if f.kind == "series" and f.type.startswith("pandas."):
        return "series"
    if f.type in _DICT_TYPES:
        return "dict"
    return None


def _present(ctx, lk, key, facts: Facts, kind: str) -> bool | None:
    base = lk.expr.split(".", 1)[0]
    if lk.expr == base and ctx.is_live(base, lk.node):
        chk = ctx.key_check(lk.expr, key, lk.axis, at=lk.node)
        if chk is None or getattr(chk, "missing_ok", False):
            return None  # a __missing__ (defaultdict, Counter) answers missing keys
        return chk.present
    if kind == "dataframe" and lk.axis in ("key", "columns") and isinstance(key, str):
        if facts.columns is None or facts.columns_truncated:
            return None
        return any(c.name == key for c in facts.columns)
    return None


def _candidates(ctx, lk, key, facts: Facts, kind: str) -> list:
    """Existing keys that could be meant: the probe's close names for a live container, the known columns."""
    out: list = []
    if lk.expr == lk.expr.split(".", 1)[0] and ctx.is_live(lk.expr, lk.node):
        chk = ctx.key_check(lk.expr, key, lk.axis, at=lk.node)
        out += (chk.suggestions or []) if chk is not None else []
    if kind == "dataframe" and lk.axis in ("key", "columns") and facts.columns:
        out += [c.name for c in facts.columns]
    return out


def _did_you_mean(ctx, lk, missing: list, facts: Facts, kind: str) -> str:
    """" (did you mean 'price'?)" — for each missing text key with a close existing one; "" when none is close."""
    pairs = [(k, closest(k, _candidates(ctx, lk, k, facts, kind))) for k in missing]
    pairs = [(k, m) for k, m in pairs if m is not None]
    if not pairs:
        return ""
    if len(missing) == 1:
        return f" (did you mean {pairs[0][1]!r}?)"
    return " (did you mean " + ", ".join(f"{m!r} for {k!r}" for k, m in pairs) + "?)"


def _related(ctx, lk, missing: list) -> list[Related]:
    if ctx.scope is None:
        return []
    out = []
    for d in sorted(ctx.scope.cells, key=lambda d: d.execution_count or 0):
        if d.execution_count is None:
            continue
        for other in d.analysis.literal_keys:
            if other.expr == lk.expr and other.op in ("drop", "del") and set(map(repr, other.keys)) & set(map(repr, missing)):
                line = d.analysis.original_line(other.node.lineno)
                out.append(Related(message=f"cell {d.number} (run as [{d.execution_count}]) already removed "
                                           f"{', '.join(map(repr, missing))} from {lk.expr}",
                                   cell=d.number, line=line, execution_count=d.execution_count))
                break
    return out[-3:]


def _index_dtype(keys: list, pandas: tuple[int, int] | None) -> str:
    """The dtype pandas gives an Index of these keys (text keys are 'str' from pandas 3, 'object' before)."""
    if keys and all(isinstance(k, str) for k in keys):
        return "str" if pandas is not None and pandas >= (3, 0) else "object"
    if keys and all(isinstance(k, int) and not isinstance(k, bool) for k in keys):
        return "int64"
    if keys and all(isinstance(k, float) for k in keys):
        return "float64"
    return "object"


def _message(ctx, lk, missing: list, kind: str) -> str:
    """The KeyError's text as the kernel shows it (str of a KeyError: the repr of its argument, as pandas and dict
    word it on the kernel's pandas), then CRANE's note after " — "."""
    what = {"dataframe": "column", "series": "index label", "dict": "key"}[kind]
    if lk.op == "drop" and lk.axis == "index":
        what = "index label"
    note = f" — {lk.expr} has no {what}{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
    if lk.op == "drop":
        return repr(f"{[*missing]!r} not found in axis") + note
    if len(lk.keys) > 1:
        if len(missing) == len(lk.keys):
            pandas = parse_version(library_version(ctx, "pandas"))
            index = f"Index({[*lk.keys]!r}, dtype='{_index_dtype([*lk.keys], pandas)}')"
            axis = "index" if kind == "series" or lk.axis == "index" else "columns"
            return repr(f"None of [{index}] are in the [{axis}]") + note
        return repr(f"{[*missing]!r} not in index") + note
    return f"{missing[0]!r}" + note


@rule("missing-key")
def missing_key(ctx: RuleContext) -> Iterator[Finding]:
    for lk in ctx.analysis.literal_keys:
        if not ctx.is_certain(lk.node):
            continue
        facts = ctx.value(lk.container)
        if facts is None:
            continue
        kind = _kind(facts)
        if kind is None or (kind == "dict" and lk.op == "drop") or (kind == "series" and lk.axis == "columns"):
            continue
        if kind == "series" and any(not isinstance(k, str) for k in lk.keys):
            continue  # integer keys on a Series may fall back to positions
        if kind == "dict" and len(lk.keys) > 1:
            continue  # d[['a']] is a TypeError, not a KeyError
        answers = [(_present(ctx, lk, k, facts, kind), k) for k in lk.keys]
        if any(p is None for p, _ in answers):
            continue
        missing = [k for p, k in answers if p is False]
        if not missing:
            continue
        related = _related(ctx, lk, missing)
        live = ctx.is_live(lk.expr, lk.node)
        evidence = [f"{lk.expr} ({facts.type.rsplit('.', 1)[-1]}) has no {lk.axis if lk.axis != 'key' else 'key'} "
                    f"{', '.join(map(repr, missing))} " + ("(probe)" if live else "(after this cell's earlier changes)")]
        if kind == "dataframe" and facts.columns and not facts.columns_truncated and len(facts.columns) <= 30:
            evidence.append(f"{lk.expr} columns: {[c.name for c in facts.columns]}")
        yield ctx.finding(
            lk.node, rule="missing-key", ename="KeyError",
            message=_message(ctx, lk, missing, kind) + _did_you_mean(ctx, lk, missing, facts, kind),
            root_cause="NB specific" if related else "data confusion", confidence=0.92,
            evidence=evidence, related=related,
        )
