"""Verified fixes for a notebook file, without a live kernel (the CLI and the bench): replay the notebook's
executed history in a kernel CRANE owns, read the target's facts and the rules' findings there, then search
in a fork sandbox of that kernel (a replay sandbox where forking is impossible).
"""

from __future__ import annotations

from collections.abc import Callable

from crane.fixes.model import SearchReport, VerifiedFix
from crane.fixes.sandbox import ReplayFixSandbox, open_sandbox
from crane.fixes.search import SearchBudget, search_fixes
from crane.notebook.history import check_target
from crane.notebook.model import Notebook

DEFAULT_RUN_BUDGET_S = 30.0


def fix_notebook(
    nb: Notebook,
    target: int,
    *,
    python: str | None = None,
    budget: SearchBudget | None = None,
    run_budget_s: float = DEFAULT_RUN_BUDGET_S,
    on_fix: Callable[[VerifiedFix], None] | None = None,
    cell_timeout: float = 600.0,
    launcher=None,
) -> SearchReport:
    """Raises NotebookError (bad target), KernelError (no kernel could start) or SandboxError (no sandbox).
    `launcher` (crane.kernel.launch): where the kernels start (default: here; a Jupyter Server with --server,
    where the fork sandbox is unavailable and candidates are verified in replay kernels there)."""
    from crane.engine import ReplayedNotebook
    from crane.kernel.launch import LOCAL

    check_target(nb, target)
    launcher = launcher or LOCAL
    with ReplayedNotebook(nb, [target], python=python, cell_timeout=cell_timeout, launcher=launcher) as replayed:
        result, probe = replayed.predict(target)
        assert replayed.kernel is not None
        sandbox = open_sandbox(replayed.kernel.connection, nb, python=python, budget_s=run_budget_s,
                               launcher=launcher)
        def fresh(written: Notebook) -> ReplayFixSandbox:
            return ReplayFixSandbox(written, python=python, budget_s=max(run_budget_s, 60.0), launcher=launcher)

        try:
            return search_fixes(nb, target, sandbox, pre=probe, findings=list(result.findings), scope=replayed.scope,
                                budget=budget, on_fix=on_fix, fresh=fresh)
        finally:
            sandbox.close()
