"""Fixtures for the verified-fix tests: a real ipykernel and `fix_search`, the whole search (probe, candidates,
fork-sandbox verification) against real kernel state.

    report = fix_search(kernel, [("import pandas as pd\\ndf = ...", True), ("df['x']", False)], target=2)

Cells are (source, executed): the executed ones are run in the kernel, in order, after clearing its namespace (the
kernel belongs to the tests), and get execution counts in the notebook; the others are cells never run. The
target is never run in the kernel: the search runs it in fork sandboxes only.
"""

from __future__ import annotations

import pytest

from crane.analysis.scope import NotebookScope
from crane.engine import predict_cell
from crane.fixes.model import SearchReport
from crane.fixes.sandbox import ForkFixSandbox
from crane.fixes.search import SearchBudget, search_fixes
from crane.kernel.manager import start_kernel
from crane.notebook.model import Cell, Notebook
from crane.probe.collect import ProbeClient

from ..kernel_reset import CLEAR_USER_NAMESPACE


@pytest.fixture(scope="session")
def kernel_cwd(tmp_path_factory):
    return tmp_path_factory.mktemp("fix-kernel")


@pytest.fixture(scope="session")
def kernel(kernel_cwd):
    k = start_kernel(kernel_cwd)
    try:
        yield k
    finally:
        k.shutdown()


def notebook(cells: list[tuple[str, bool]], path: str | None = None) -> Notebook:
    out, count = [], 0
    for i, (source, executed) in enumerate(cells, start=1):
        if executed:
            count += 1
        out.append(Cell(number=i, cell_type="code", source=source, execution_count=count if executed else None))
    return Notebook(path=path, cells=out)


def fix_search(kernel, cells: list[tuple[str, bool]], target: int, budget: SearchBudget | None = None) -> SearchReport:
    conn = kernel.connection
    conn.run_cell(CLEAR_USER_NAMESPACE, timeout=60)
    for source, executed in cells:
        if executed:
            res = conn.run_cell(source, timeout=120)
            if res.status != "ok":
                raise AssertionError(f"test setup failed in the kernel: {res.ename}: {res.evalue}")
    nb = notebook(cells)
    scope = NotebookScope.from_notebook(nb)
    result, probe = predict_cell(nb, target, ProbeClient(conn), scope)
    sandbox = ForkFixSandbox(conn, budget_s=30.0)
    try:
        return search_fixes(nb, target, sandbox, pre=probe, findings=list(result.findings), scope=scope,
                            budget=budget or SearchBudget(max_seconds=60.0))
    finally:
        sandbox.close()


def titles(report: SearchReport) -> list[str]:
    return [f.title for f in report.fixes]


def tried_kinds(report: SearchReport) -> set[str]:
    return {a.kind for a in report.attempts}
