"""Calls whose arguments do not bind to the live callable's signature (TypeError), using the probe's
`signature` facts of the callable (`plt.scatter`, a user function, a class).

Python binds positionally, then by keyword (an unknown keyword, or a keyword naming a parameter already
filled positionally, fails), then checks the positional count and the required parameters (CPython's order).
A signature reported by `inspect.signature` can differ from what the callable really accepts when a
decorator rewrote it (matplotlib's `rename_parameter` / `make_keyword_only`, pandas' `deprecate_kwarg` keep
accepting the old form with a warning). So only a keyword naming a parameter that a positional argument
already filled ("got multiple values for argument") is reported for every callable: no such decorator makes
that call valid. Too many positional arguments, an unexpected keyword and missing required arguments are
reported only when the probe says the signature is the callable's own (`Facts.signature_own`: a plain Python
function, a bound method of one, or a plain class's `__init__`), with CPython's wording and counts (`self`
included, as `signature_bound` says) on the kernel's Python (3.13 adds "Did you mean" to an unexpected keyword:
rulekit/python_versions.py).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import ParamFacts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, qualname
from crane.rulekit.lib_helpers import Verdict
from crane.rulekit.python_versions import kernel_python, unexpected_keyword
from crane.rulekit.registry import rule

POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


def _names_list(names: list[str]) -> str:
    """CPython's list of missing names: 'a'; 'a' and 'b'; 'a', 'b', and 'c'."""
    quoted = [f"'{n}'" for n in names]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def bind(fname: str, params: list[ParamFacts], n_positional: int, keywords: list[str],
         exact: bool = False, bound: int = 0, python: tuple[int, int] | None = None) -> Verdict | None:
    """What binding `fname(<n_positional args>, **{k: ... for k in keywords})` raises, if anything, in CPython's
    order and wording on `python` (the kernel's version; None: the daemon's). `params` excludes the `bound`
    leading parameters already filled (self of a bound method or of `__init__`), which CPython's counts include.
    Without `exact` only "multiple values" is judged."""
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
        if by_name.get(k) is None:
            posonly = any(q.name == k and q.kind == "POSITIONAL_ONLY" for q in params)
            if var_kw or not exact:
                continue
            if posonly:
                return _type_error(f"{fname}() got some positional-only arguments passed as keyword arguments: "
                                   f"'{k}'", sig)
            keyword_params = [p.name for p in params if p.kind in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")]
            return _type_error(unexpected_keyword(fname, k, keyword_params, python or kernel_python(None)), sig)
        if k in filled:
            return _type_error(f"{fname}() got multiple values for argument '{k}'", sig)
    if not exact:
        return None
    if n_positional > len(positional) and not var_pos:
        argcount = len(positional) + bound
        defcount = sum(1 for p in positional if p.has_default)
        takes = f"from {argcount - defcount} to {argcount}" if defcount else f"{argcount}"
        given = n_positional + bound
        kwonly_given = sum(1 for k in keywords if k in by_name and by_name[k].kind == "KEYWORD_ONLY")
        kwonly = ""
        if kwonly_given:
            kwonly = (f" positional argument{'s' if given != 1 else ''} (and {kwonly_given} keyword-only "
                      f"argument{'s' if kwonly_given != 1 else ''})")
        verb = "was" if given == 1 and not kwonly_given else "were"
        return _type_error(f"{fname}() takes {takes} positional argument{'s' if argcount != 1 else ''} but "
                           f"{given}{kwonly} {verb} given", sig)
    missing = [p.name for p in positional[n_positional:] if not p.has_default and p.name not in keywords]
    if missing:
        return _type_error(f"{fname}() missing {len(missing)} required positional argument"
                           f"{'s' if len(missing) > 1 else ''}: {_names_list(missing)}", sig)
    missing_kw = [p.name for p in params if p.kind == "KEYWORD_ONLY" and not p.has_default and p.name not in keywords]
    if missing_kw:
        return _type_error(f"{fname}() missing {len(missing_kw)} required keyword-only argument"
                           f"{'s' if len(missing_kw) > 1 else ''}: {_names_list(missing_kw)}", sig)
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


class _Callee:
    """A callable's signature as the probe reported it, and how to judge calls against it."""

    def __init__(self, name: str, params: list[ParamFacts], own: bool, own_name: str | None, bound: int):
        self.name = own_name if own and own_name else name
        self.params = params
        self.exact = own and own_name is not None
        self.bound = bound if self.exact else 0


def _signature_for(ctx, call: ast.Call) -> _Callee | None:
    func = call.func
    if isinstance(func, ast.Name):
        f = ctx.value(func)
        if f is None or not f.signature:
            return None
        return _Callee(func.id, list(f.signature), f.signature_own, f.signature_name, f.signature_bound)
    if isinstance(func, ast.Attribute):
        text = ctx.text(func)
        chk = ctx.attr_check(text, at=call)
        if chk is None or not chk.present or not chk.signature:
            return None
        params = list(chk.signature)
        if chk.signature_own:  # the probe knows exactly which leading parameters are bound
            return _Callee(func.attr, params, True, chk.signature_name, chk.signature_bound)
        owner = chk.owner_type or ""
        # a function looked up on an instance's class (not a module or a class) still lists `self`
        if params and params[0].name == "self" and owner not in ("builtins.module", "module", "builtins.type", "type"):
            params = params[1:]
        return _Callee(func.attr, params, False, None, 0)
    return None


@rule("call-signature", needs_probe=True)
def call_signature(ctx: RuleContext) -> Iterator[Finding]:
    """Arguments that cannot bind to the callable's live signature."""
    for call in ctx.calls():
        if not ctx.is_certain(call):
            continue
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            continue
        callee = _signature_for(ctx, call)
        if callee is None:
            continue
        v = bind(callee.name, callee.params, len(call.args), [k.arg for k in call.keywords if k.arg is not None],
                 exact=callee.exact, bound=callee.bound, python=kernel_python(ctx))
        if v is not None:
            q = qualname(ctx, call.func)
            if q:
                v.evidence.insert(0, f"{ctx.text(call.func)} is {q}")
            yield emit(ctx, call, "call-signature", v)
            return
