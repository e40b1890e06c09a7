"""The CLI's and the benchmark's kernel: rebuild a notebook's state, then check target cells against it.

    notebook ──► replay history (fresh kernel, notebook folder) ──► per target: crane.pipeline.check_cell

The LSP daemon runs the same `check_cell` against an attached kernel instead of a replay; what then decides
(sandbox, model) is `crane.policy`, applied by `crane.modes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from crane.analysis.cell import analyze_cell
from crane.analysis.scope import NotebookScope
from crane.finding import Finding
from crane.kernel.launch import LOCAL, KernelLauncher
from crane.kernel.replay import HistoryRun, replay
from crane.llm.schema import Usage
from crane.notebook.history import check_target, executed_history
from crane.notebook.model import Notebook
from crane.pipeline import check_cell, probe_facts
from crane.policy import DecidedBy, Outcome, Prediction
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeResult
from crane.sandbox.verdict import SandboxVerdict


class CellResult(msgspec.Struct, omit_defaults=True, rename="camel"):
    """One checked cell as `crane check --json` and the benchmark report it."""

    cell: int
    prediction: Outcome  # unknown (`crane check`): neither the facts nor a run decided
    findings: list[Finding] = []
    probe_ms: float | None = None
    elapsed_ms: float = 0.0
    error: str | None = None  # the cell could not be checked (probe failed, model error, ...)
    decided_by: DecidedBy | None = None  # which source decided (crane.policy); None: the rules alone ran
    # auto mode: the sandbox's verdict, why, and how it was reached (mode, scale, what a miniature kept, what a
    # transplant copied): the record `speculate` returned, as it is
    sandbox: SandboxVerdict | None = None
    cleared: list[Finding] = []  # rule findings a clean sandbox run disproved
    suspicions: list[Finding] = []  # a model's unchecked crash claim (crane.policy): shown apart, predicts nothing
    # llm mode (or auto with a model): the model's verdict and what it cost
    llm: Prediction | None = None
    usage: Usage | None = None


def scope_of(nb: Notebook) -> NotebookScope:
    """All code cells, executed or not: unexecuted cells explain missing names."""
    return NotebookScope.from_notebook(nb)


def predict_cell(
    nb: Notebook, target: int, probe_client: ProbeClient | None, scope: NotebookScope, probe_timeout: float = 10.0
) -> tuple[CellResult, ProbeResult | None]:
    """The rules' prediction for one target cell, with the kernel's facts when a probe client is given."""
    check = check_cell(
        analyze_cell(check_target(nb, target).source),
        probe_facts(probe_client, probe_timeout) if probe_client is not None else None,
        scope,
        target,
    )
    result = CellResult(
        cell=target,
        prediction="crash" if check.findings else "no-crash",
        findings=check.findings,
        probe_ms=check.probe.elapsed_ms if check.probe else None,
        elapsed_ms=check.elapsed_ms,
        error=check.error,
    )
    return result, check.probe


class ReplayedNotebook:
    """A fresh kernel holding the state a notebook's history leaves (for the CLI and the bench)."""

    def __init__(self, nb: Notebook, targets: list[int], python: str | None = None, cell_timeout: float = 600.0,
                 launcher: KernelLauncher = LOCAL, prewarm: bool = False):
        self.nb = nb
        self.targets = targets
        self.python = python
        self.cell_timeout = cell_timeout
        self.launcher = launcher  # where the fresh kernel runs: here, or on a Jupyter Server (--server)
        # start the copy path's worker after a replayed cell that imports (crane.sandbox.prewarm), so it imports
        # TensorFlow & co. while the rest replays: for runs that will use the sandbox
        self.prewarm = prewarm
        self.kernel: Any = None  # OwnedKernel | ServerKernel
        self.history_runs: list[HistoryRun] = []
        # "If you run this cell now": every target sees the kernel as the whole recorded history left it,
        # including the target's own earlier run when it has an execution count (re-running a cell is a
        # classic notebook crash).
        self.history = executed_history(nb)

    def __enter__(self) -> ReplayedNotebook:
        self.kernel = self.launcher.start(notebook_file(self.nb), python=self.python)
        try:
            self.history_runs = replay(self.kernel.connection, self.history, cell_timeout=self.cell_timeout,
                                       after=self._prewarm if self.prewarm else None)
        except BaseException:
            self.kernel.shutdown()
            raise
        self.probe_client = ProbeClient(self.kernel.connection)
        self.scope = scope_of(self.nb)
        return self

    def _prewarm(self, cell: Any) -> None:
        if "import" not in cell.source:  # (the kernel's modules say what was imported; this only spares requests)
            return
        from crane.kernel.errors import KernelError
        from crane.sandbox.prewarm import prewarm_kernel

        try:
            prewarm_kernel(self.kernel.connection)
        except (KernelError, msgspec.ValidationError, OSError):  # no answer, no process: its first verdict is cold
            pass

    def __exit__(self, *exc) -> None:
        if self.kernel:
            self.kernel.shutdown()

    def predict(self, target: int) -> tuple[CellResult, ProbeResult | None]:
        return predict_cell(self.nb, target, self.probe_client, self.scope)


def notebook_file(nb: Notebook) -> Path:
    """The notebook's file (for a kernel launcher: its folder, and its session path on a server)."""
    return Path(nb.path).resolve() if nb.path else nb.directory / "untitled.ipynb"
