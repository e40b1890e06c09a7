"""Candidates for calls that bind their arguments wrongly or pass an option the callee rejects.

- `nearest-keyword`: TypeError "got an unexpected keyword argument 'x'" → the closest parameter name of the
  live callable's signature (probe facts of the callee), not already passed.
- `multiple-values`: TypeError "got multiple values for argument 's'" → drop the positional argument that
  lands on `s` (it was meant for no parameter), or else the keyword.
- `option-value`: ValueError naming a literal keyword argument (its name or value in the message) → another
  value: the options the message quotes, the options the estimator's `_parameter_constraints` allow (read in
  the sandbox), or a number's text ("45" for 45).
"""

from __future__ import annotations

import ast
import re

from crane.fixes.context import FixContext
from crane.fixes.edits import quote_like
from crane.fixes.match import nearest
from crane.probe.facts import ParamFacts, ProbeRequest

_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")
_MULTIPLE = re.compile(r"got multiple values for (?:keyword )?argument '(\w+)'")
_QUOTED = re.compile(r"'([^'\s]{1,40})'")
_BRACED = re.compile(r"\{([^{}]{1,400})\}")
_POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


def signature(ctx: FixContext, func: ast.expr) -> list[ParamFacts] | None:
    """The live callable's parameters (self of a bound method / __init__ dropped), from the probe."""
    text = ctx.text(func)
    if not re.fullmatch(r"[\w.]+", text):
        return None
    if "." not in text:
        f = ctx.facts(text) or ctx.more_facts([text]).get(text)
        if f is None or f.signature is None:
            return None
        return list(f.signature)
    chk = ctx.attr_check(text)
    if chk is None or chk.signature is None:
        res = ctx.probe_more(ProbeRequest(names=[text.split(".")[0]], attrs=[text]))
        chk = next((a for a in res.attrs if a.expr == text), None) if res is not None else None
    return list(chk.signature) if chk is not None and chk.signature is not None else None


def nearest_keyword(ctx: FixContext):
    m = _UNEXPECTED.search(ctx.crash.evalue) if ctx.crash.ename == "TypeError" else None
    if m is None:
        return
    bad = m.group(1)
    for call in ctx.crash_nodes(ast.Call):
        assert isinstance(call, ast.Call)
        kw = next((k for k in call.keywords if k.arg == bad), None)
        if kw is None:
            continue
        params = signature(ctx, call.func)
        if not params:
            continue
        passed = {k.arg for k in call.keywords if k.arg}
        names = [p.name for p in params if p.kind in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY") and p.name not in passed]
        for match in nearest(bad, names):
            ed = ctx.editor()
            try:
                s, _ = ed.span(kw)
                ed.replace_span(s, s + len(bad), match)
                new = ed.apply()
            except ValueError:
                continue
            yield ctx.candidate("nearest-keyword", f"Use keyword {match}=", new,
                                detail=f"{ctx.text(call.func)}() has no parameter {bad!r}; it has {match!r}")
        return


def multiple_values(ctx: FixContext):
    m = _MULTIPLE.search(ctx.crash.evalue) if ctx.crash.ename == "TypeError" else None
    if m is None:
        return
    name = m.group(1)
    for call in ctx.crash_nodes(ast.Call):
        assert isinstance(call, ast.Call)
        kw = next((k for k in call.keywords if k.arg == name), None)
        if kw is None or any(isinstance(a, ast.Starred) for a in call.args):
            continue
        params = signature(ctx, call.func)
        positional = [p.name for p in params or [] if p.kind in _POSITIONAL]
        if name in positional:
            i = positional.index(name)
            if i == len(call.args) - 1:  # the last positional argument lands on `name`: drop it
                ed = ctx.editor()
                try:
                    new = ed.remove_argument(call, call.args[i]).apply()
                    arg = ctx.text(call.args[i])
                    yield ctx.candidate("multiple-values", f"Remove the extra positional argument {arg}", new,
                                        detail=f"{arg} lands on {name!r}, which {name}= also sets")
                except ValueError:
                    pass
        ed = ctx.editor()
        try:
            new = ed.remove_argument(call, kw).apply()
            yield ctx.candidate("multiple-values", f"Remove {name}={ctx.text(kw.value)}", new, penalty=15.0,
                                detail=f"a positional argument already sets {name!r}")
        except ValueError:
            pass
        return


def _message_options(text: str) -> list[str]:
    out = [m.group(1) for m in _QUOTED.finditer(text)]
    for m in _BRACED.finditer(text):
        out += [t for t in re.findall(r"'([^']+)'", m.group(1))]
    return out


def _constraint_options(ctx: FixContext, call: ast.Call, keyword: str) -> list:
    """Allowed literal values of a scikit-learn estimator parameter, read from the class in the sandbox."""
    cls = ctx.text(call.func)
    if not re.fullmatch(r"[\w.]+", cls):
        return []
    expr = (f"(lambda C: sorted([o for c in getattr(C, '_parameter_constraints', {{}}).get({keyword!r}, []) "
            f"for o in (sorted(set(getattr(c, 'options', ())) - set(getattr(c, 'deprecated', ()))) "
            f"if hasattr(c, 'options') else [None] if c is None else [])], key=repr))({cls})")
    value = ctx.evaluate(expr, [])
    return value if isinstance(value, list) else []


_OPTIONS_TALK = re.compile(r"option|not understood|must be|one of|among|invalid|not supported|unknown|\bonly\b|"
                           r"expected|allowed|valid", re.IGNORECASE)


def option_value(ctx: FixContext):
    if ctx.crash.ename not in ("ValueError", "InvalidParameterError"):
        return
    message = ctx.crash.evalue or ""
    if not _OPTIONS_TALK.search(message):
        return
    stmt = ctx.failing_statement()
    calls = [c for c in ctx.all_nodes(ast.Call) if isinstance(c, ast.Call)]
    if stmt is not None:  # the failing statement's calls first
        inside = {id(n) for n in ast.walk(stmt)}
        calls.sort(key=lambda c: id(c) not in inside)
    seen = 0
    for call in calls:
        for kw in call.keywords:
            if kw.arg is None or not isinstance(kw.value, ast.Constant):
                continue
            value = kw.value.value
            if isinstance(value, bool) or not isinstance(value, (str, int, float)) and value is not None:
                continue
            named = re.search(rf"\b{re.escape(kw.arg)}\b", message) is not None
            said = (isinstance(value, str) and len(value) > 1 and re.search(rf"\b{re.escape(value)}\b", message)) or \
                (isinstance(value, (int, float)) and re.search(rf"(?<![\w.]){re.escape(str(value))}(?![\w.])", message))
            if not (named or said):
                continue
            options: list = []
            if isinstance(value, (int, float)) and said:
                options.append(str(value))
            options += [o for o in _message_options(message) if o not in (kw.arg, value) and o not in _code_words(ctx)]
            options += _constraint_options(ctx, call, kw.arg)
            tried = set()
            for opt in options:
                if opt == value or repr(opt) in tried or (isinstance(opt, str) and not opt.strip()):
                    continue
                tried.add(repr(opt))
                ed = ctx.editor()
                try:
                    lit = quote_like(ed.text(kw.value), opt) if isinstance(opt, str) else repr(opt)
                    new = ed.replace(kw.value, lit).apply()
                except ValueError:
                    continue
                yield ctx.candidate("option-value", f"Use {kw.arg}={opt!r}", new, penalty=2.0,
                                    detail=f"{kw.arg}={value!r} is rejected: {message[:120]}")
                if len(tried) >= 4:
                    break
            seen += 1
            if seen >= 3:
                return


def _code_words(ctx: FixContext) -> set[str]:
    """Identifiers of the cell (a quoted name in a message is not an option value)."""
    return {n.id for n in ctx.all_nodes(ast.Name) if isinstance(n, ast.Name)} | \
        {n.attr for n in ctx.all_nodes(ast.Attribute) if isinstance(n, ast.Attribute)}
