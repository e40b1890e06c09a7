"""Candidates for missing or stale names.

- `run-first`: a NameError for a name that only a cell not run (or run out of order, or below the target)
  binds — "Run cell K first": the binding cells, in notebook order, with the cells they need in turn (their
  own names missing from the state, looked up the same way). The search extends a plan whose cell still
  raises a NameError (`extend_plan`).
- `run-stale`: any crash of a cell that reads names which cells above it, never run, would (re)bind — the
  state may be stale ("Run cell 8 first"); and "run every cell above not run yet, in order".
- `nearest-name`: a NameError for a name no cell binds: the closest name the state has (a typo), or one a cell
  binds (that cell run first).
"""

from __future__ import annotations

import ast
import re

from crane.analysis.cell import is_predefined
from crane.fixes.context import FixContext
from crane.fixes.match import nearest
from crane.fixes.model import Candidate

NAME_ERROR = re.compile(r"name '([^']+)' is not defined")
MAX_PLAN = 12


def missing_name(evalue: str) -> str | None:
    m = NAME_ERROR.search(evalue or "")
    return m.group(1) if m else None


def _runnable(ctx: FixContext, number: int) -> bool:
    if number == ctx.target or not 1 <= number <= len(ctx.nb.cells):
        return False
    cell = ctx.nb.cell(number)
    d = ctx.scope.cell(number)
    return cell.is_code and bool(cell.source.strip()) and d is not None and d.analysis.tree is not None


def definer(ctx: FixContext, name: str, before: int, exclude: set[int]) -> int | None:
    """The cell that should bind `name` for a cell at position `before`: the nearest binding cell above it,
    else the first one below it (never the target, never a cell in `exclude`)."""
    cells = [d.number for d in ctx.scope.definers(name) if _runnable(ctx, d.number) and d.number not in exclude]
    above = [n for n in cells if n < before]
    if above:
        return max(above)
    below = [n for n in cells if n > before]
    return min(below) if below else None


def _missing_in(ctx: FixContext, number: int, bound: set[str]) -> list[str]:
    """Names cell `number` loads that neither earlier plan cells bind nor the state has."""
    d = ctx.scope.cell(number)
    if d is None:
        return []
    names = [n for n in d.analysis.free_names if not is_predefined(n) and n not in bound]
    if not names:
        return []
    known = ctx.more_facts(names)
    if ctx.ask is None:
        return []
    return [n for n in names if n not in known]


def close_plan(ctx: FixContext, plan: list[int]) -> list[int]:
    """`plan` with the cells its cells need (names missing from the state), in notebook order."""
    plan = sorted(set(plan))
    for _ in range(MAX_PLAN):
        bound: set[str] = set()
        added = False
        for n in plan:
            for name in _missing_in(ctx, n, bound):
                k = definer(ctx, name, n, set(plan))
                if k is not None:
                    plan = sorted(set(plan) | {k})
                    added = True
                    break
            if added:
                break
            d = ctx.scope.cell(n)
            bound |= set(d.binds) if d is not None else set()
        if not added or len(plan) >= MAX_PLAN:
            break
    return plan


def _title(cells: list[int]) -> str:
    if len(cells) == 1:
        return f"Run cell {cells[0]} first"
    return f"Run cells {', '.join(map(str, cells))} first"


def _plan_candidate(ctx: FixContext, kind: str, cells: list[int], detail: str, penalty: float = 0.0) -> Candidate:
    base = [c for c in ctx.run_first if c not in cells]
    merged = tuple(sorted(set(base) | set(cells)))
    return ctx.candidate(kind, _title(list(merged)), run_first=merged, detail=detail, penalty=penalty)


def run_first(ctx: FixContext):
    name = missing_name(ctx.crash.evalue) if ctx.crash.ename == "NameError" else None
    if name is None:
        return
    exclude = set(ctx.run_first)
    k = definer(ctx, name, ctx.target, exclude)
    if k is None:
        return
    cells = [k]
    # every other name of the target the state lacks, bound by some cell: in the same plan
    missing = [n for n in ctx.analysis.free_names if n != name and not is_predefined(n) and ctx.is_undefined(n)]
    for n in missing:
        other = definer(ctx, n, ctx.target, exclude)
        if other is not None and other not in cells:
            cells.append(other)
    plan = close_plan(ctx, cells + list(ctx.run_first))
    where = "not run yet" if ctx.nb.cell(k).execution_count is None else "run before, but the state lacks it"
    yield _plan_candidate(ctx, "run-first", plan, f"'{name}' is bound by cell {k} ({where})")
    if plan != sorted(set([k] + list(ctx.run_first))):
        yield _plan_candidate(ctx, "run-first", [k], f"'{name}' is bound by cell {k}")


def run_stale(ctx: FixContext):
    """Never-run cells above the target that bind names the target reads."""
    reads = {n for n in ctx.analysis.free_names if not is_predefined(n)}
    never_run = [d for d in ctx.scope.cells if d.number < ctx.target and d.execution_count is None
                 and _runnable(ctx, d.number) and d.number not in ctx.run_first]
    stale = [d.number for d in never_run if reads & set(d.binds)]
    if stale:
        names = sorted(reads & {n for d in never_run if d.number in stale for n in d.binds})
        plan = close_plan(ctx, stale + list(ctx.run_first))
        yield _plan_candidate(ctx, "run-stale", plan,
                              f"cell{'s' if len(stale) > 1 else ''} {', '.join(map(str, stale))} (never run) "
                              f"bind{'s' if len(stale) == 1 else ''} {', '.join(names[:5])}", penalty=5.0)
    every = [d.number for d in never_run]
    if every and sorted(every) != sorted(stale):
        yield _plan_candidate(ctx, "run-stale", every, "every cell above that was never run, in order",
                              penalty=10.0)


def extend_plan(ctx: FixContext, plan: tuple[int, ...], failed_cell: int, evalue: str) -> tuple[int, ...] | None:
    """A plan cell raised a NameError: the plan with the cell that binds the name before it, or None."""
    name = missing_name(evalue)
    if name is None or len(plan) >= MAX_PLAN:
        return None
    k = definer(ctx, name, failed_cell, set(plan))
    if k is None:
        return None
    return tuple(sorted(set(plan) | {k}))


def nearest_name(ctx: FixContext):
    name = missing_name(ctx.crash.evalue) if ctx.crash.ename == "NameError" else None
    if name is None:
        return
    loads = [n for n in ctx.all_nodes(ast.Name) if isinstance(n, ast.Name) and n.id == name
             and isinstance(n.ctx, ast.Load)]
    if not loads:
        return
    pool: set[str] = set(ctx.analysis.stored_names)
    for d in ctx.scope.cells:
        pool |= set(d.binds)
    pool |= ctx.known_names()
    matches = nearest(name, sorted(pool - {name}))
    # a shorter name the missing one starts with ('numvars' / 'num'), bound by a cell
    matches += [p for p in sorted(pool - {name}, key=len, reverse=True)
                if len(p) >= 3 and name.lower().startswith(p.lower()) and p not in matches][:2]
    if not matches:
        return
    have = ctx.more_facts(matches) if ctx.ask is not None else {}
    for m in matches:
        plan: list[int] | None = None
        if m not in have and m not in ctx.known_names() and m not in ctx.analysis.stored_names:
            k = definer(ctx, m, ctx.target, set(ctx.run_first))  # the state lacks it: a cell binding it, run first
            if k is None:
                continue
            plan = close_plan(ctx, [k] + list(ctx.run_first))
        ed = ctx.editor()
        try:
            for n in loads:
                ed.replace(n, m)
            new = ed.apply()
        except ValueError:
            continue
        if plan is None:
            yield ctx.candidate("nearest-name", f"Use name '{m}'", new, detail=f"'{name}' is not defined; '{m}' is")
        else:
            merged = tuple(sorted(set(plan)))
            yield ctx.candidate("nearest-name", f"Use name '{m}'; {_title(list(merged)).lower()}", new,
                                run_first=merged, detail=f"'{name}' is not defined; a cell run first binds '{m}'")
