"""All candidate generators, by family, and `generate(ctx)`: every candidate for one crash, deduplicated,
cheapest first, each already checked by the repair agent's anti-hack guard (crane.agent.guard: no try/except
or suppress wrapping, no deleting, stubbing or commenting out the failing statement, no emptied cell).

A generator is `fn(ctx: FixContext) -> Iterable[Candidate]`; it never runs code and never raises (a broken
generator is logged and skipped). Adding one: write it in the module of its family and list it here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from crane.agent.guard import check_edit
from crane.fixes import (
    calls,
    cause,
    names,
    near_miss,
    pandas_fixes,
    sklearn_inputs,
    sklearn_models,
    torch_fixes,
    upstream,
)
from crane.fixes.context import FixContext
from crane.fixes.model import Candidate

log = logging.getLogger(__name__)

Generator = Callable[[FixContext], Iterable[Candidate]]

GENERATORS: tuple[Generator, ...] = (
    names.run_first,
    names.run_stale,
    names.nearest_name,
    near_miss.nearest_key,
    near_miss.nearest_attribute,
    calls.nearest_keyword,
    calls.multiple_values,
    calls.option_value,
    sklearn_inputs.reshape_2d,
    sklearn_inputs.encode_strings,
    sklearn_inputs.nan_inputs,
    sklearn_models.not_fitted,
    sklearn_models.feature_mismatch,
    sklearn_models.other_estimator,
    sklearn_models.metric_predictions,
    torch_fixes.linear_input,
    torch_fixes.loss_dtype,
    pandas_fixes.to_numeric,
    pandas_fixes.drop_missing_labels,
    pandas_fixes.merge_key,
    pandas_fixes.join_suffix,
    *cause.GENERATORS,
    *upstream.GENERATORS,
)


def generate(ctx: FixContext, refused: list[str] | None = None) -> list[Candidate]:
    """Every candidate for `ctx.crash`, cheapest first; candidates the guard refuses are dropped (and listed in
    `refused`), as are those that change nothing."""
    out: dict[tuple, Candidate] = {}
    failing_line = ctx.guard_line if ctx.guard_line is not None else ctx.crash.line
    for gen in GENERATORS:
        try:
            found = list(gen(ctx) or ())
        except Exception:  # a broken generator must not stop the others
            log.exception("fix generator %s failed", getattr(gen, "__name__", gen))
            continue
        for cand in found:
            if cand.source == ctx.original and not cand.run_first:
                continue
            if cand.source != ctx.original:
                reason = check_edit(ctx.original, cand.source, failing_line)
                if reason:
                    if refused is not None:
                        refused.append(f"{cand.kind}: {reason}")
                    continue
            if cand.key not in out or cand.cost < out[cand.key].cost:
                out[cand.key] = cand
    return sorted(out.values(), key=lambda c: (c.cost, c.depth, c.title))
