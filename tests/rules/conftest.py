"""Fixtures for rule tests: a real ipykernel and `predict_source`, the whole predictor on real kernel state.

    def test_something(kernel):
        findings = predict_source(kernel, "import numpy as np\\nX = np.zeros((3, 2))", "X.join(X)")
        assert [f.ename for f in findings] == ["AttributeError"]

- `kernel` (session-scoped): an OwnedKernel CRANE started (crane.kernel.manager.start_kernel) in a
  temporary working directory (`kernel_cwd`), shared by every rule test of the session; its `.connection`
  is a KernelConnection.
- `predict_source(kernel, setup_code, target, scope=None, target_cell=None)`: clears the kernel's user
  namespace (tests/kernel_reset.py, the kernel belongs to the tests), runs `setup_code` as a normal cell (it must
  succeed: a failing setup fails the test with the kernel's error), then analyses `target`
  (crane.analysis.cell.analyze_cell), plans the probe (plan_probe), asks the REAL kernel-side probe
  (crane.probe.collect.ProbeClient), and returns crane.predict.predict(...) — the findings, first crash
  first. The target cell itself is never run. `probe_source(kernel, setup, target)` returns
  (analysis, probe_result) for tests that want to look at the facts.
- `run_target(kernel, target)`: runs the target for real (after a predict_source) and returns the CellRun,
  so a test can check that the prediction matches what actually happens.

Files a setup refers to live in `kernel_cwd` (a pytest tmp dir); write them there.
Keep each test's setup small: the kernel is shared and every test pays for its own setup.
"""

from __future__ import annotations

import msgspec
import pytest

from crane.analysis.cell import CellAnalysis, analyze_cell, plan_probe
from crane.kernel.manager import OwnedKernel, start_kernel
from crane.predict import predict
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest, ProbeResult

from ..kernel_reset import CLEAR_USER_NAMESPACE
from ..probe.no_time_cap import NO_TIME_CAP


@pytest.fixture(scope="session")
def kernel_cwd(tmp_path_factory):
    return tmp_path_factory.mktemp("rule-kernel")


@pytest.fixture(scope="session")
def kernel(kernel_cwd):
    k = start_kernel(kernel_cwd)
    try:
        yield k
    finally:
        k.shutdown()


def _probe(conn, request: ProbeRequest) -> ProbeResult:
    """The rules' facts, complete whatever the machine's load (the probe's default time budget gives later
    variables cheaper facts once spent; these tests are about rules, never about wall time)."""
    if request.time_budget_ms is None:
        request = msgspec.structs.replace(request, time_budget_ms=NO_TIME_CAP)
    return ProbeClient(conn).run(request)


def setup_kernel(kernel: OwnedKernel, setup_code: str) -> None:
    conn = kernel.connection
    conn.run_cell(CLEAR_USER_NAMESPACE, timeout=60)
    if setup_code.strip():
        res = conn.run_cell(setup_code, timeout=120)
        if res.status != "ok":
            raise AssertionError(f"test setup failed in the kernel: {res.ename}: {res.evalue}")


def probe_source(kernel: OwnedKernel, setup_code: str, target: str) -> tuple[CellAnalysis, ProbeResult]:
    setup_kernel(kernel, setup_code)
    analysis = analyze_cell(target)
    return analysis, _probe(kernel.connection, plan_probe(analysis))


def predict_source(kernel: OwnedKernel, setup_code: str, target: str, scope=None, target_cell=None):
    analysis, probe = probe_source(kernel, setup_code, target)
    return predict(analysis, probe, scope, target_cell)


def run_target(kernel: OwnedKernel, target: str):
    return kernel.connection.run_cell(target, timeout=120)
