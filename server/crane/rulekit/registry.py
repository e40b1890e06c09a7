"""Rule registry: `@rule("rule-id")` registers a check; `run_rules(ctx)` runs them all.

A rule is a function `fn(ctx: RuleContext) -> Iterable[Finding]` (a generator is fine). Rules are small and
single-purpose (one concern per module); a rule that cannot decide yields nothing: unknown is not "no crash"
but it is never a crash either. A rule must never raise: `run_rules` catches and logs (to stderr, via the
`crane.rules` logger) any exception a rule raises and goes on with the others.

`load_rules()` imports the core rule modules (`CORE_MODULES`, in that order) and then every other module of
the `crane.rules` package (alphabetically; it holds rule modules only, their helpers live in `crane.rulekit`),
so that all `@rule` decorators run: a new rule module needs no registration beyond being a module of
`crane.rules`.

    from crane.rulekit.registry import rule

    @rule("missing-column")
    def missing_column(ctx):
        for node in ...:
            yield ctx.finding(node, rule="missing-column", ename="KeyError", message="...",
                              root_cause="data confusion", confidence=0.9, evidence=["df has no column 'x'"])
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from crane.finding import Finding

if TYPE_CHECKING:
    from crane.rulekit.context import RuleContext

log = logging.getLogger("crane.rules")

RuleFn = Callable[["RuleContext"], Iterable[Finding]]

# rule id -> function, in registration order.
RULES: dict[str, RuleFn] = {}

# Core rule modules, imported first (their findings come first among equals).
CORE_MODULES = (
    "crane.rules.syntax",
    "crane.rules.names",
    "crane.rules.modules",
    "crane.rules.files",
    "crane.rules.keys",
    "crane.rules.attributes",
)

_loaded = False


def rule(rule_id: str, *, needs_probe: bool = False, environment: bool = False) -> Callable[[RuleFn], RuleFn]:
    """Register `fn` under `rule_id`. With `needs_probe=True` the rule is skipped when there is no kernel
    (`ctx.probe is None`), so the rule body can assume `ctx.probed` is set; with `environment=True` too, it also
    runs without a kernel on what CRANE's own environment tells (`ctx.environment`: modules and files), and
    `ctx.probed` is then that."""

    def deco(fn: RuleFn) -> RuleFn:
        if rule_id in RULES and RULES[rule_id] is not fn:
            raise ValueError(f"rule id {rule_id!r} registered twice")
        fn.rule_id = rule_id  # type: ignore[attr-defined]
        fn.needs_probe = needs_probe  # type: ignore[attr-defined]
        fn.environment = environment  # type: ignore[attr-defined]
        RULES[rule_id] = fn
        return fn

    return deco


def load_rules() -> dict[str, RuleFn]:
    """Import every rule module (once) so that all rules are registered; return the registry."""
    global _loaded
    if not _loaded:
        import pkgutil

        import crane.rules as package

        others = sorted(
            f"crane.rules.{m.name}" for m in pkgutil.iter_modules(package.__path__)
        )
        for name in list(CORE_MODULES) + [m for m in others if m not in CORE_MODULES]:
            try:
                importlib.import_module(name)
            except Exception:  # a broken rule module must not take the others down
                log.exception("cannot load rule module %s", name)
        _loaded = True
    return RULES


def run_rules(ctx: RuleContext, only: Iterable[str] | None = None) -> list[Finding]:
    """Run the registered rules (or the ids in `only`) on `ctx`; a rule that raises is logged and skipped."""
    rules = load_rules()
    selected = list(only) if only is not None else list(rules)
    findings: list[Finding] = []
    for rule_id in selected:
        fn = rules.get(rule_id)
        if fn is None:
            continue
        if getattr(fn, "needs_probe", False) and ctx.probe is None and not (
            getattr(fn, "environment", False) and ctx.environment is not None
        ):
            continue
        try:
            for f in fn(ctx) or ():
                if isinstance(f, Finding):
                    findings.append(f)
        except Exception:  # a broken rule must not take the predictor down
            log.exception("rule %s failed", rule_id)
    return findings
