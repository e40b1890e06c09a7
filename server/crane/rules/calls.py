"""Calls whose arguments do not bind to the live callable's signature (TypeError), using the probe's
`signature` facts of the callable (`plt.scatter`, a user function, a class).

Python binds positionally, then by keyword (an unknown keyword, or a keyword naming a parameter already
filled positionally, fails), then checks the positional count and the required parameters (CPython's order).
A signature reported by `inspect.signature` can differ from what the callable really accepts when a
decorator rewrote it (matplotlib's `rename_parameter` / `make_keyword_only`, pandas' `deprecate_kwarg` keep
accepting the old form with a warning). So only a keyword naming a parameter that a positional argument
already filled ("got multiple values for argument") is reported for every callable: no such decorator makes
that call valid. The other failures are reported only when the signature is known to be the callable's own
(`exact=True`).
"""

from __future__ import annotations

import ast

from crane.probe.facts import ParamFacts
from crane.rules.lib_glue import emit, qualname
from crane.rules.lib_helpers import Verdict
from crane.rules.registry import rule

POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


def bind(fname: str, params: list[ParamFacts], n_positional: int, keywords: list[str],
         exact: bool = False) -> Verdict | None:
    """What binding `fname(<n_positional args>, **{k: ... for k in keywords})` raises, if anything."""
    var_pos = any(p.kind == "VAR_POSITIONAL" for p in params)
    var_kw = any(p.kind == "VAR_KEYWORD" for p in params)
    positional = []
    for p in params:
        if p.kind in POSITIONAL:
            positional.append(p)
        elif p.kind == "VAR_POSITIONAL":
            break
    filled = {p.name for p in positional[:n_positional]}
    by_name = {p.name: p for p in params if p.kind in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")}
    sig = "(" + ", ".join(_param_text(p) for p in params) + ")"
    for k in keywords:
        p = by_name.get(k)
        if p is None:
            posonly = any(q.name == k and q.kind == "POSITIONAL_ONLY" for q in params)
            if var_kw or not exact:
                continue
            if posonly:
                return _type_error(f"{fname}() got some positional-only arguments passed as keyword arguments: "
                                   f"'{k}'", sig)
            return _type_error(f"{fname}() got an unexpected keyword argument '{k}'", sig)
        if k in filled:
            return _type_error(f"{fname}() got multiple values for argument '{k}'", sig)
    if not exact:
        return None
    if n_positional > len(positional) and not var_pos:
        lo = sum(1 for p in positional if not p.has_default)
        hi = len(positional)
        takes = f"{lo}" if lo == hi else f"from {lo} to {hi}"
        plural = "argument" if hi == 1 and lo == hi else "arguments"
        return _type_error(f"{fname}() takes {takes} positional {plural} but {n_positional} "
                           f"{'was' if n_positional == 1 else 'were'} given", sig)
    missing = [p.name for p in positional[n_positional:] if not p.has_default and p.name not in keywords]
    if missing:
        names = " and ".join(f"'{m}'" for m in missing) if len(missing) <= 2 else ", ".join(
            f"'{m}'" for m in missing[:-1]) + f", and '{missing[-1]}'"
        return _type_error(f"{fname}() missing {len(missing)} required positional argument"
                           f"{'s' if len(missing) > 1 else ''}: {names}", sig)
    missing_kw = [p.name for p in params if p.kind == "KEYWORD_ONLY" and not p.has_default and p.name not in keywords]
    if missing_kw:
        names = " and ".join(f"'{m}'" for m in missing_kw)
        return _type_error(f"{fname}() missing {len(missing_kw)} required keyword-only argument"
                           f"{'s' if len(missing_kw) > 1 else ''}: {names}", sig)
    return None


def _param_text(p: ParamFacts) -> str:
    if p.kind == "VAR_POSITIONAL":
        return "*" + p.name
    if p.kind == "VAR_KEYWORD":
        return "**" + p.name
    return p.name + (f"={p.default}" if p.has_default and p.default is not None else "")


def _type_error(message: str, sig: str) -> Verdict:
    shown = sig if len(sig) <= 160 else sig[:157] + "...)"
    return Verdict("TypeError", message, "API misuse", [f"signature: {shown}"], 0.9)


def _signature_for(ctx, call: ast.Call) -> tuple[str, list[ParamFacts]] | None:
    func = call.func
    if isinstance(func, ast.Name):
        f = ctx.value(func)
        if f is None or not f.signature:
            return None
        return func.id, list(f.signature)
    if isinstance(func, ast.Attribute):
        text = ctx.text(func)
        chk = ctx.attr_check(text, at=call)
        if chk is None or not chk.present or not chk.signature:
            return None
        params = list(chk.signature)
        owner = chk.owner_type or ""
        # a function looked up on an instance's class (not a module or a class) still lists `self`
        if params and params[0].name == "self" and owner not in ("builtins.module", "module", "builtins.type", "type"):
            params = params[1:]
        return func.attr, params
    return None


@rule("call-signature", needs_probe=True)
def call_signature(ctx):
    """Arguments that cannot bind to the callable's live signature."""
    for call in ctx.calls():
        if not ctx.is_certain(call):
            continue
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            continue
        got = _signature_for(ctx, call)
        if got is None:
            continue
        fname, params = got
        v = bind(fname, params, len(call.args), [k.arg for k in call.keywords], exact=False)
        if v is not None:
            q = qualname(ctx, call.func)
            if q:
                v.evidence.insert(0, f"{ctx.text(call.func)} is {q}")
            yield emit(ctx, call, "call-signature", v)
            return
