"""Rule `undefined-name`: a name the cell loads before binding it, which the kernel does not have (probe
`undefined`), which the cell itself deleted, or — with no kernel — which no cell above binds.

Only loads that certainly run are reported (not in branches, handlers, uncalled functions...). With a kernel,
a name the probe did not answer for is unknown: nothing is said. Related information points at the cells
that would define the name (not run yet, or below the target) or deleted it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.analysis.cell import is_predefined
from crane.analysis.certainty import is_certain
from crane.finding import Finding
from crane.rulekit.context import RuleContext
from crane.rulekit.registry import rule
from crane.rulekit.suggest import closest


def _certain(ctx, load) -> bool:
    if load.via is not None:
        return ctx.is_certain(load.via) and is_certain(load.node, ctx.analysis.parents, stop=load.function)
    return ctx.is_certain(load.node)


def _suggestion(ctx, name: str) -> str | None:
    pool = set(ctx.analysis.stored_names)
    if ctx.probe is not None:
        pool |= set(ctx.probe.facts)
    if ctx.scope is not None:
        for d in ctx.scope.cells:
            pool |= set(d.binds)
    return closest(name, sorted(pool))


@rule("undefined-name")
def undefined_name(ctx: RuleContext) -> Iterator[Finding]:
    a = ctx.analysis
    if a.tree is None:
        return
    reported: set[str] = set()
    for load in a.free_loads:
        name = load.name
        if name in reported or is_predefined(name) or not _certain(ctx, load):
            continue
        evidence: list[str] = []
        related = []
        confidence = 0.95
        if load.deleted_at is not None:
            if not ctx.is_certain(load.deleted_at):
                continue
            line = a.original_line(load.deleted_at.lineno)
            evidence.append(f"line {line} of this cell deletes '{name}' and nothing binds it again before this use")
            root = "implementation error"
        elif ctx.probe is not None:
            if name in ctx.probe.facts or name not in ctx.probe.undefined:
                continue
            evidence.append(f"the kernel has no variable '{name}' (probe)")
            evidence.append(f"no earlier code of this cell binds '{name}'")
            if ctx.scope is not None:
                related = ctx.scope.related_for_missing(name, ctx.target_cell)
            root = "NB specific" if related else "implementation error"
        elif ctx.scope is not None and ctx.target_cell is not None:
            if not ctx.scope.undefined_in_order(ctx.target_cell, [name]):
                continue
            evidence.append(f"no cell above cell {ctx.target_cell} binds '{name}' (no kernel: notebook order)")
            related = ctx.scope.related_for_missing(name, ctx.target_cell)
            root = "NB specific" if related else "implementation error"
            confidence = 0.8
        else:
            continue
        if load.via is not None:
            fn = getattr(load.function, "name", "a function")
            evidence.append(f"'{name}' is used inside {fn}(), which this cell calls on line "
                            f"{a.original_line(load.via.lineno)}")
        message = f"name '{name}' is not defined"
        hint = _suggestion(ctx, name)
        if hint:
            message += f" (did you mean '{hint}'?)"
        elif related:
            message += f": {related[0].message}"
        reported.add(name)
        node = load.node if isinstance(load.node, ast.Name) else load.node
        yield ctx.finding(node, rule="undefined-name", ename="NameError", message=message, root_cause=root,
                          confidence=confidence, evidence=evidence, related=related)
