"""Full-size or miniature: how a speculative run reaches a verdict on a cell that would outlast its budget.

`speculate_scaled(conn, source, budget_s, recorded_s=...)`:
- when the cell's last recorded run took longer than the budget (`recorded_s`), go straight to a miniature run
  sized from that duration;
- else run it at full size; when that times out, run it again as a miniature (the full size is then at least
  the budget: the miniature assumes a few times that);
- the miniature (`crane.sandbox.kernel.miniature`) keeps about `MINI_TARGET_S / expected` of the rows of the large
  data the cell reads (at least 64 rows and a batch); if it still times out, once more with a tenth of that
  (at least 16 rows).
- when that miniature is inconclusive too and the cell has a `for` or `while` loop or a call (which may reach a
  function an earlier cell defined), a loop miniature: the data whole, each `for` and `while` loop of the cell and
  of the notebook's functions cut after `LOOP_ITERATIONS` iterations once it has run `LOOP_MS` (quick loops run
  whole; a cut range runs its last iteration too; kernel/miniature's rule of what it may conclude: a crash before
  any cut is certain, after one it is a miniature crash unless the skipped iterations may explain it). Still too
  slow (the time is not in a loop CRANE bounds): the full run's "timeout" stays.
A miniature crash or clean run is the verdict (`scale="miniature"`, `kept` says how much was kept, a loop
miniature's `reason` what its verdict rests on); an inconclusive miniature (an exception the smaller data may have
caused, nothing large to shrink, still too slow) leaves the full run's "timeout", with the miniature's reason added.
"""

from __future__ import annotations

import re
import threading

from crane.kernel.client import KernelConnection
from crane.sandbox.fork_runner import speculate
from crane.sandbox.verdict import SandboxVerdict

MINI_TARGET_S = 1.0  # what a miniature run should take (its verdict, setup included, within ~3 s)
MINI_BUDGET_S = 15.0  # its wall-clock budget (at most the full budget)
_ASSUMED_FACTOR = 4.0  # a cell that timed out at the budget is assumed to need this many budgets


def miniature_spec(expected_s: float, target_s: float = MINI_TARGET_S, floor_rows: int = 64) -> dict:
    """What the kernel side needs to shrink a cell expected to take `expected_s` at full size: keep about
    `target_s / expected_s` of the rows (at least `floor_rows`, and the batch remainder, see kernel/miniature)."""
    fraction = min(0.5, max(0.0005, target_s / max(float(expected_s), target_s)))
    return {"fraction": round(fraction, 6), "floor_rows": int(floor_rows), "min_rows": 2000, "relative": 0.05,
            "seed": 0}


LOOP_ITERATIONS = 2  # a loop miniature cuts a loop after this many iterations once it has run LOOP_MS
LOOP_MS = 500  # (quick loops run whole; the slice is wall clock, so a loaded machine runs fewer iterations)
# a loop of the cell (`for`, `while`), or a call (it may reach a loop of a function an earlier cell defined)
_LOOPY = re.compile(r"^[ \t]*(?:for\s.+\sin\s|while\b)|\b[A-Za-z_][\w.]*\s*\(", re.M)


def loop_spec(iterations: int = LOOP_ITERATIONS, loop_ms: int = LOOP_MS) -> dict:
    """A loop miniature's spec (kernel/miniature): the data kept whole, each loop cut after `iterations`
    once it has run `loop_ms`."""
    return {"fraction": 1.0, "floor_rows": 0, "min_rows": 2000, "relative": 0.05, "seed": 0, "rows": False,
            "loops": int(iterations), "loop_ms": int(loop_ms)}


def _inconclusive_mini(v: SandboxVerdict) -> bool:
    return v.verdict not in ("crash", "no-crash")


def speculate_scaled(
    conn: KernelConnection,
    source: str,
    budget_s: float,
    *,
    recorded_s: float | None = None,
    mini_budget_s: float = MINI_BUDGET_S,
    cancel: threading.Event | None = None,
    **kw,
) -> SandboxVerdict:
    """The cell's verdict at full size, or from a miniature run when it would outlast `budget_s` (see the module
    docstring). Extra keyword arguments go to `speculate` (layer, places, memory_mb, idle, ...)."""
    full: SandboxVerdict | None = None
    if recorded_s is not None and recorded_s > budget_s:
        expected = float(recorded_s)
    else:
        full = speculate(conn, source, budget_s, cancel=cancel, **kw)
        if full.verdict != "timeout" or (cancel is not None and cancel.is_set()):
            return full
        expected = _ASSUMED_FACTOR * budget_s
    mini_budget = min(float(budget_s), mini_budget_s)
    target = min(MINI_TARGET_S, mini_budget / 2)
    mini = speculate(conn, source, mini_budget, miniature=miniature_spec(expected, target), cancel=cancel, **kw)
    if mini.verdict == "timeout" and mini.kept and "artefact" not in (mini.reason or "") and not (
            cancel is not None and cancel.is_set()):
        mini = speculate(conn, source, mini_budget, miniature=miniature_spec(expected * 10, target, floor_rows=16),
                         cancel=cancel, **kw)
    if _inconclusive_mini(mini) and _LOOPY.search(source) and not (cancel is not None and cancel.is_set()):
        loop = speculate(conn, source, mini_budget, miniature=loop_spec(), cancel=cancel, **kw)
        if not _inconclusive_mini(loop):
            return loop
        mini.reason = f"{mini.reason or 'the miniature run was inconclusive'}; loop miniature: {loop.reason}"
        mini.transient = mini.transient or loop.transient
    if not _inconclusive_mini(mini):
        return mini
    if full is None:
        mini.reason = (f"its last run took {recorded_s:.0f} s (budget {budget_s:g} s); "
                       + (mini.reason or "the miniature run was inconclusive"))
        return mini
    full.reason = f"{full.reason or 'timeout'}; {mini.reason or 'the miniature run was inconclusive'}"
    full.transient = full.transient or mini.transient  # a miniature stopped for a passing cause may decide later
    return full
