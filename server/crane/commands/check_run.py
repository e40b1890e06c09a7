"""Check one notebook: the only place `crane check` calls the prediction pipeline.

    load + validate targets ──► replay the history in a fresh kernel (engine.ReplayedNotebook)
                            ──► per target cell: modes.predict_in_mode(replayed, cell, mode, settings, budget)

Every failure that concerns this notebook alone (unreadable, not nbformat 4, a bad `--cell`, a kernel that
cannot start or dies, a history cell past `--cell-timeout`) becomes the report's `error`: the caller goes on
with the other notebooks. Nothing is written to the notebook.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crane.commands.output import NotebookReport
from crane.notebook.model import Notebook, NotebookError, parse_notebook
from crane.policy import Decision, outcome

if TYPE_CHECKING:
    from crane.engine import CellResult
    from crane.llm.settings import LLMSettings
    from crane.policy import Mode


@dataclass(frozen=True)
class CheckOptions:
    mode: Mode = "auto"
    cells: tuple[int, ...] | None = None  # 1-based target cells; None: every code cell not run yet
    budget_s: float = 30.0
    python: str | None = None
    cell_timeout_s: float = 600.0
    launcher: Any = None  # crane.kernel.launch.KernelLauncher: where the replay kernel runs (None: here)


@dataclass(frozen=True)
class Loaded:
    """A notebook read once: the decoded model and the file's bytes (their text gives SARIF positions)."""

    path: str
    data: bytes
    nb: Notebook

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def load(path: str) -> Loaded:
    """Read and decode a notebook; raises NotebookError with a clear message."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise NotebookError(f"cannot read {path}: {exc.strerror or exc}") from None
    nb = parse_notebook(data, path)
    return Loaded(path=path, data=data, nb=nb)


def mark_unknown(r: CellResult) -> CellResult:
    """`prediction: "unknown"` where neither the kernel's facts nor a run decided: no finding, and the sandbox
    run was inconclusive (timeout, blocked, unavailable) or, without one, the facts could not be read. An agent
    reading `prediction` must not take that for `no-crash`."""
    if r.prediction != "unknown":
        decision = Decision(r.prediction, list(r.findings), r.decided_by or "none")
        r.prediction = outcome(decision, sandbox_ran=r.sandbox is not None, facts_read=not (r.sandbox is None and r.error))
    return r


def check_notebook(
    path: str, opts: CheckOptions, settings: LLMSettings | None, progress: bool = False
) -> tuple[NotebookReport, Loaded | None]:
    """Check one notebook; never raises for a problem of this notebook (it becomes `report.error`)."""
    from crane.commands.history_json import history_entries
    from crane.engine import ReplayedNotebook
    from crane.kernel.errors import KernelError
    from crane.kernel.launch import LOCAL
    from crane.modes import predict_in_mode
    from crane.notebook.history import check_target, default_targets

    start = time.monotonic()
    try:
        loaded = load(path)
        nb = loaded.nb
        targets = list(opts.cells) if opts.cells else default_targets(nb)
        for t in targets:
            check_target(nb, t)
    except NotebookError as exc:
        return NotebookReport(notebook=path, error=str(exc)), None
    if not targets:
        return NotebookReport(notebook=path), loaded
    if progress:
        n = sum(1 for c in nb.cells if c.is_code and c.execution_count is not None)
        where = opts.launcher.where if opts.launcher is not None else "a fresh kernel"
        print(f"crane: {path}: replaying {n} executed cell(s) in {where} in {nb.directory} ...", file=sys.stderr)
    try:
        with ReplayedNotebook(nb, targets, python=opts.python, cell_timeout=opts.cell_timeout_s,
                              launcher=opts.launcher or LOCAL, prewarm=opts.mode == "auto") as replayed:
            results = [mark_unknown(predict_in_mode(replayed, t, opts.mode, settings, opts.budget_s))
                       for t in targets]
            history = history_entries(replayed.history_runs)
    except KernelError as exc:
        return NotebookReport(notebook=path, error=f"kernel error: {exc}",
                              elapsed_s=round(time.monotonic() - start, 3)), loaded
    return NotebookReport(
        notebook=path, cells=results, history=history,
        predicted_crashes=sum(r.prediction == "crash" for r in results),
        elapsed_s=round(time.monotonic() - start, 3),
    ), loaded
