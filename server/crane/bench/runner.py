"""Run bench variants: replay each variant's history in a fresh kernel, then predict its target cell (runs in the
daemon). With `real_run` the target cell then runs for real in that replay kernel (the bench's own, a throwaway),
and what it raised is kept beside the prediction (crane.bench.metrics: `message_match`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from crane.bench.cases import Case, Variant
from crane.bench.metrics import VariantResult
from crane.engine import CellResult, ReplayedNotebook
from crane.kernel.errors import KernelError
from crane.kernel.launch import LOCAL, KernelLauncher
from crane.notebook.model import load_notebook

if TYPE_CHECKING:
    from crane.policy import Mode

# A mode's predictor: given the replayed state and the target cell, fill the prediction fields.
Predictor = Callable[[ReplayedNotebook, int, VariantResult], None]


def record(cell: CellResult, result: VariantResult) -> None:
    """Copy a cell's prediction into a variant result."""
    if cell.findings:
        f = cell.findings[0]
        result.predicted_crash = True
        result.predicted_ename, result.rule, result.line, result.message = f.ename, f.rule, f.line, f.message
    result.verdict = cell.sandbox.verdict if cell.sandbox else (cell.llm or ("crash" if cell.findings else "no-crash"))
    result.decided_by = cell.decided_by
    result.sandbox = cell.sandbox
    if cell.error:
        result.error = cell.error


def static_predictor(replayed: ReplayedNotebook, target: int, result: VariantResult) -> None:
    record(replayed.predict(target)[0], result)


REAL_RUN_TIMEOUT_S = 600.0
_MESSAGE_CAP = 4000  # characters of the real exception's message kept


def real_run(replayed: ReplayedNotebook, target: int, result: VariantResult) -> None:
    """Run the target cell for real in the replay kernel, after every prediction and check was made there."""
    try:
        run = replayed.kernel.connection.run_cell(replayed.nb.cell(target).source, timeout=REAL_RUN_TIMEOUT_S)
    except Exception as exc:  # the kernel died or the cell outran the timeout: nothing to compare
        result.real_ran, result.real_error = False, f"{type(exc).__name__}: {exc}"
        return
    result.real_ran = True
    if run.status == "error":
        result.real_ename, result.real_message = run.ename, (run.evalue or "")[:_MESSAGE_CAP]


BENCH_SENTINEL = "_crane_bench_sentinel"  # an object whose every pickling/attribute hook records (kernel/untouched)


class ModePredictor:
    """auto / llm modes (crane.modes) as a bench predictor."""

    def __init__(self, mode: Mode, settings=None, budget_s: float = 30.0):
        self.mode, self.settings, self.budget_s = mode, settings, budget_s

    def __call__(self, replayed: ReplayedNotebook, target: int, result: VariantResult) -> None:
        from crane.kernel.untouched import Untouched
        from crane.modes import decide_in_mode

        rules, probe = replayed.predict(target)
        result.rules_predicted_crash = bool(rules.findings)  # before another source decides
        result.rules_predicted_ename = rules.findings[0].ename if rules.findings else None
        result.rules_predicted_message = rules.findings[0].message if rules.findings else None
        if self.mode != "auto":
            record(decide_in_mode(replayed, target, rules, self.mode, self.settings, self.budget_s, probe), result)
            return
        # auto: the sandbox runs beside the replayed kernel's state, which must come out of it untouched (when
        # the kernel cannot be watched, the prediction still counts; `kernel_unchanged` stays unknown)
        with ExitStack() as stack:
            try:
                # with the effect sentinels: a user hook CRANE's kernel-side code calls counts as a change
                check: Untouched | None = stack.enter_context(
                    Untouched(replayed.kernel.connection, sentinel=BENCH_SENTINEL))
            except KernelError:
                check = None
            cell = decide_in_mode(replayed, target, rules, self.mode, self.settings, self.budget_s, probe)
        record(cell, result)
        result.kernel_unchanged = check.unchanged if check is not None else None


def run_variant(case: Case, name: str, variant: Variant, predictor: Predictor, python: str | None,
                launcher: KernelLauncher = LOCAL, real: bool = False) -> VariantResult:
    """One variant: its history replayed, its target predicted (`seconds` times this much); with `real`, the
    target then run for real (not timed)."""
    start = time.monotonic()
    predicted: float | None = None
    result = VariantResult(
        case=case.id, variant=name, library=case.library, root_cause=case.root_cause,
        expect_crash=variant.expect.crash, expect_ename=variant.expect.ename,
        predicted_crash=False, seconds=0.0,
    )
    try:
        nb = load_notebook(Path(case.directory) / variant.notebook)
        with ReplayedNotebook(nb, [variant.target_cell], python=python, launcher=launcher) as replayed:
            allowed = set(variant.history_errors)
            result.unexpected_history_errors = [
                f"cell {h.number}: {h.ename}: {h.evalue}"
                for h in replayed.history_runs
                if h.status == "error" and h.number not in allowed
            ]
            predictor(replayed, variant.target_cell, result)
            if real and not result.error:
                predicted = time.monotonic()
                real_run(replayed, variant.target_cell, result)
    except Exception as exc:  # one broken variant is reported, the bench goes on
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = round((predicted if predicted is not None else time.monotonic()) - start, 3)
    return result


def run_cases(
    cases: list[Case], predictor: Predictor, jobs: int = 1, python: str | None = None,
    progress: Callable[[VariantResult], None] | None = None, launcher: KernelLauncher = LOCAL,
    real: bool = False,
) -> list[VariantResult]:
    """Every variant of `cases`, `jobs` at a time, each in a fresh kernel from `launcher` (`real`: each target
    also run for real once predicted). On Ctrl-C the variants not started yet are dropped at once (the running
    ones end with their kernels)."""
    work = [(c, name, v) for c in cases for name, v in c.variants.items()]

    def one(item: tuple[Case, str, Variant]) -> VariantResult:
        r = run_variant(*item, predictor, python, launcher, real)
        if progress:
            progress(r)
        return r

    if jobs <= 1:
        return [one(w) for w in work]
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        return list(pool.map(one, work))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
