"""Rule `missing-attribute`: `x.attr` where the kernel's object x (still unchanged at that point of the cell)
has no attribute `attr` according to a static lookup (probe AttrCheck: inspect.getattr_static, which sees
instance dicts, classes and descriptors; objects with `__getattr__` answer None and are not judged)
-> AttributeError. E.g. `X_train.join(...)` on an ndarray, `model.feature_importances_` on an SVC. The message
names the closest existing attribute when the probe found a close one (`crane.rulekit.suggest`)."""

from __future__ import annotations

from collections.abc import Iterator

from crane.finding import Finding
from crane.rulekit.context import RuleContext
from crane.rulekit.registry import rule
from crane.rulekit.suggest import hint


@rule("missing-attribute", needs_probe=True)
def missing_attribute(ctx: RuleContext) -> Iterator[Finding]:
    checks = {}
    for chain in ctx.analysis.attr_chains:
        chk = ctx.attr_check(chain.text, at=chain.node)
        if chk is not None:
            checks[chain.text] = chk
    reported: set[tuple[int, int]] = set()
    for chain in ctx.analysis.attr_chains:
        chk = checks.get(chain.text)
        if chk is None or chk.present is not False or not chk.owner_type:
            continue
        parts = chain.text.split(".")
        prefixes = [".".join(parts[:i]) for i in range(2, len(parts))]
        if any(p not in checks or checks[p].present is not True for p in prefixes):
            continue  # the object the attribute is looked up on is itself missing or unknown
        if not ctx.is_certain(chain.node):
            continue
        where = (chain.node.lineno, chain.node.col_offset)
        if where in reported:
            continue
        reported.add(where)
        attr = parts[-1]
        owner = chk.owner_type
        is_module = owner in ("module", "builtins.module", "types.ModuleType")
        obj = ".".join(parts[:-1])
        if is_module:
            message = f"module '{obj}' has no attribute '{attr}'"
        else:
            # the type as CPython names it: a class by its name, a C type module-qualified ('numpy.ndarray')
            shown = chk.owner_shown or owner.rsplit(".", 1)[-1]
            message = f"'{shown}' object has no attribute '{attr}'"
        message += hint(attr, chk.suggestions)
        if chk.message:  # the library's own text (numpy's removed aliases: "`np.NaN` was removed in ...")
            message = chk.message
        yield ctx.finding(
            chain.node, rule="missing-attribute", ename="AttributeError", message=message,
            root_cause="API misuse", confidence=0.85 if is_module else 0.92,
            evidence=[f"{obj} is a {owner} in the kernel; a static lookup finds no attribute '{attr}' (probe)"],
        )
