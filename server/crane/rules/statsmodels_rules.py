"""statsmodels misuse rules: option arguments given a value outside the set the function accepts
(`qqplot(line=45)`: the options are the strings "45", "s", "r", "q" or None).
"""

from __future__ import annotations

from collections.abc import Iterator

from crane.finding import Finding
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, qualname
from crane.rulekit.lib_helpers import NOVALUE, Verdict, literal
from crane.rulekit.registry import rule

# function (last component of a statsmodels qualname) -> (keyword, accepted literal values, message format)
OPTION_ARGS = {
    "qqplot": ("line", {"45", "s", "r", "q", None}, "{value} option for line not understood"),
    "qqline": ("line", {"45", "s", "r", "q", None}, "{value} option for line not understood"),
}


def option_verdict(fn: str, value) -> Verdict | None:
    spec = OPTION_ARGS.get(fn)
    if spec is None:
        return None
    kw, accepted, fmt = spec
    if value is None or (isinstance(value, str) and value in accepted):
        return None
    if not value:
        return None  # falsy values ('', 0, False): statsmodels draws no line
    return Verdict("ValueError", fmt.format(value=value), "API misuse",
                   [f"{fn}({kw}={value!r}): {kw} must be one of " + ", ".join(repr(a) for a in sorted(
                       accepted, key=lambda a: (a is None, str(a))))], 0.9)


@rule("statsmodels-options", needs_probe=True)
def statsmodels_options(ctx: RuleContext) -> Iterator[Finding]:
    for call in ctx.calls():
        q = qualname(ctx, call.func) or ""
        if not q.startswith("statsmodels.") or not ctx.is_certain(call):
            continue
        fn = q.rsplit(".", 1)[-1]
        spec = OPTION_ARGS.get(fn)
        if spec is None:
            continue
        node = ctx.kwarg(call, spec[0])
        if node is None:
            continue
        val = literal(node)
        if val is NOVALUE:
            continue
        v = option_verdict(fn, val)
        if v is not None:
            yield emit(ctx, call, "statsmodels-options", v)
            return
