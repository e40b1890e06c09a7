"""Replay sandbox: where fork is impossible (remote kernels, Windows), rebuild the state in a fresh kernel.

A kernel CRANE owns is started in the notebook's folder, the history cells run in execution order (as
`crane check` does), then the target runs: through the fork sandbox inside that fresh kernel when it is
available there (same confinement as `speculate`), else directly in the fresh kernel, which is disposable.
Slower (the whole history runs) and opt-in: history cells run unconfined, exactly as the user ran them.
"""

from __future__ import annotations

from pathlib import Path

from crane.kernel.errors import KernelError, KernelTimeout
from crane.kernel.manager import start_kernel
from crane.sandbox.fork_runner import DEFAULT_BUDGET_S, speculate
from crane.sandbox.verdict import SandboxVerdict, unavailable
from crane.text import cell_line


def speculate_in_fresh_kernel(
    history: list[str],
    source: str,
    cwd: str | Path,
    budget_s: float = DEFAULT_BUDGET_S,
    *,
    cell_timeout: float = 600.0,
    python: str | None = None,
) -> SandboxVerdict:
    """Replay `history` (cell sources, already in execution order) in a fresh kernel, then run `source`."""
    try:
        kernel = start_kernel(cwd, python=python)
    except KernelError as exc:
        return unavailable(f"the replay kernel could not start: {exc}")
    try:
        conn = kernel.connection
        for cell in history:
            conn.run_cell(cell, timeout=cell_timeout)
        v = speculate(conn, source, budget_s)
        if v.verdict != "unavailable":
            v.reason = ((v.reason + "; ") if v.reason else "") + "state rebuilt by replaying the history"
            return v
        # no fork here: the fresh kernel is ours and disposable
        try:
            run = conn.run_cell(source, timeout=budget_s)
        except KernelTimeout:
            return SandboxVerdict(verdict="timeout", reason=f"the cell did not finish within {budget_s:g} s (replay)")
        if run.status == "error":
            return SandboxVerdict(verdict="crash", ename=run.ename, evalue=run.evalue, line=cell_line(run.traceback),
                                  stdout=run.stdout, stderr=run.stderr, elapsed_ms=run.elapsed_s * 1000,
                                  reason="replayed in a fresh kernel, unconfined (fork unavailable)")
        return SandboxVerdict(verdict="no-crash", stdout=run.stdout, stderr=run.stderr, elapsed_ms=run.elapsed_s * 1000,
                              reason="replayed in a fresh kernel, unconfined (fork unavailable)")
    except KernelError as exc:
        return unavailable(f"replay failed: {exc}")
    finally:
        kernel.shutdown()
