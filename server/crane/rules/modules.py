"""Rule `missing-module`: `import x` / `from x import y` where the kernel cannot find module `x`
(probe `modules`, from importlib.util.find_spec in the kernel's own environment) -> ModuleNotFoundError."""

from __future__ import annotations

from collections.abc import Iterator

from crane.finding import Finding
from crane.rulekit.context import RuleContext
from crane.rulekit.registry import rule


@rule("missing-module", needs_probe=True, environment=True)
def missing_module(ctx: RuleContext) -> Iterator[Finding]:
    local = ctx.probe is None  # no kernel: looked up in CRANE's own environment, a weaker sign
    seen: set[str] = set()
    for imp in ctx.analysis.imports:
        top = imp.top
        if imp.level or not top or top in seen or ctx.probed.modules.get(top) is not False:
            continue
        if top in ctx.probed.imported_modules or not ctx.is_certain(imp.node):
            continue
        seen.add(top)
        if local:
            yield ctx.finding(
                imp.node, rule="missing-module", ename="ModuleNotFoundError",
                message=f"No module named '{top}' (looked up in CRANE's environment: no kernel attached)",
                root_cause="NB specific", confidence=0.7,
                evidence=[f"importlib.util.find_spec({top!r}) is None in the language server's environment"],
            )
            continue
        yield ctx.finding(
            imp.node, rule="missing-module", ename="ModuleNotFoundError",
            message=f"No module named '{top}' in the kernel's environment", root_cause="NB specific",
            confidence=0.95, evidence=[f"importlib.util.find_spec({top!r}) is None in the kernel (probe)"],
        )
