"""The check pipeline shared by the CLI and the benchmark: rebuild the state, then predict per target cell.

    notebook ──► replay history (fresh kernel, notebook folder) ──► per target: analyse ─► probe ─► predict

The LSP daemon runs the same analyse → probe → predict steps against an attached kernel instead of a replay.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from crane.analysis.cell import analyze_cell, plan_probe
from crane.analysis.scope import NotebookScope
from crane.kernel.launch import LOCAL, KernelLauncher
from crane.kernel.replay import HistoryRun, replay
from crane.llm.schema import Usage
from crane.notebook.history import check_target, executed_history
from crane.notebook.model import Notebook
from crane.predict import predict
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeResult
from crane.rules.finding import Finding


class CellResult(msgspec.Struct, omit_defaults=True, rename="camel"):
    cell: int
    prediction: str  # "crash" | "no-crash"
    findings: list[Finding] = []
    probe_ms: float | None = None
    elapsed_ms: float = 0.0
    error: str | None = None  # the cell could not be checked (probe failed, model error, ...)
    # auto mode: the sandbox verdict (crash | no-crash | timeout | blocked | unavailable) and why
    sandbox: str | None = None
    sandbox_reason: str | None = None
    cleared: list[Finding] = []  # rule findings a clean sandbox run disproved
    # llm mode: the model's verdict and what it cost
    llm: str | None = None
    usage: Usage | None = None


def scope_of(nb: Notebook) -> NotebookScope:
    """All code cells, executed or not: unexecuted cells explain missing names."""
    return NotebookScope.from_notebook(nb)


def predict_cell(
    nb: Notebook, target: int, probe_client: ProbeClient | None, scope: NotebookScope, probe_timeout: float = 10.0
) -> tuple[CellResult, ProbeResult | None]:
    """Analyse one target cell, probe the names it uses (if a kernel is there) and run the rules."""
    start = time.perf_counter()
    cell = check_target(nb, target)
    analysis = analyze_cell(cell.source)
    probe = None
    error = None
    if probe_client is not None:
        try:
            probe = probe_client.run(plan_probe(analysis), timeout=probe_timeout)
        except Exception as exc:  # a failed probe degrades to static rules, and says so
            error = f"probe failed: {exc}"
    findings = predict(analysis, probe, scope, target_cell=target)
    result = CellResult(
        cell=target,
        prediction="crash" if findings else "no-crash",
        findings=findings,
        probe_ms=probe.elapsed_ms if probe else None,
        elapsed_ms=(time.perf_counter() - start) * 1000,
        error=error,
    )
    return result, probe


class ReplayedNotebook:
    """A fresh kernel holding the state a notebook's history leaves (for the CLI and the bench)."""

    def __init__(self, nb: Notebook, targets: list[int], python: str | None = None, cell_timeout: float = 600.0,
                 launcher: KernelLauncher = LOCAL):
        self.nb = nb
        self.targets = targets
        self.python = python
        self.cell_timeout = cell_timeout
        self.launcher = launcher  # where the fresh kernel runs: here, or on a Jupyter Server (--server)
        self.kernel = None  # OwnedKernel | ServerKernel
        self.history_runs: list[HistoryRun] = []
        # "If you run this cell now": every target sees the kernel as the whole recorded history left it,
        # including the target's own earlier run when it has an execution count (re-running a cell is a
        # classic notebook crash).
        self.history = executed_history(nb)

    def __enter__(self) -> ReplayedNotebook:
        self.kernel = self.launcher.start(notebook_file(self.nb), python=self.python)
        try:
            self.history_runs = replay(self.kernel.connection, self.history, cell_timeout=self.cell_timeout)
        except BaseException:
            self.kernel.shutdown()
            raise
        self.probe_client = ProbeClient(self.kernel.connection)
        self.scope = scope_of(self.nb)
        return self

    def __exit__(self, *exc) -> None:
        if self.kernel:
            self.kernel.shutdown()

    def predict(self, target: int) -> tuple[CellResult, ProbeResult | None]:
        return predict_cell(self.nb, target, self.probe_client, self.scope)


def notebook_dir(nb: Notebook) -> Path:
    return nb.directory


def notebook_file(nb: Notebook) -> Path:
    """The notebook's file (for a kernel launcher: its folder, and its session path on a server)."""
    return Path(nb.path).resolve() if nb.path else nb.directory / "untitled.ipynb"
