"""Issue 42: the fix search's fork session asks for post-mortem facts by calling CRANE's probe module in the fork
(crane/fixes/sandbox.ForkFixSandbox.facts). It calls only the module this process's install made, binding what that
install left (kernel/private_module's seal, inherited by the fork): a candidate cell that rebinds the probe's entry
in the session is never called. Before, the facts request checked the module's VERSION alone, called the
rebound `run` and returned its forged facts."""

from __future__ import annotations

import os

import pytest

from crane.fixes.sandbox import ForkFixSandbox
from crane.probe.facts import ProbeRequest

from ..kernel_reset import CLEAR_USER_NAMESPACE

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork sandbox needs Linux")


def test_the_sessions_facts_call_only_the_sealed_probe(kernel):
    conn = kernel.connection
    assert conn.run_cell(CLEAR_USER_NAMESPACE, timeout=60).status == "ok"
    assert conn.run_cell("x = 1", timeout=60).status == "ok"
    sandbox = ForkFixSandbox(conn, budget_s=30.0)
    try:
        assert sandbox.facts(ProbeRequest()) is not None  # (the honest session gets its facts)
        # (the rebound `run` answers facts of its own: what the session's request would return if it called it)
        run = sandbox.run("import sys\n"
                          "sys.modules['_crane_probe'].run = lambda *a, **k: '{\"cwd\": \"FORGED\"}'\n")
        assert run.status == "ok", run
        session = sandbox.inner.session
        assert session is not None
        assert session.inspect("sys.modules['_crane_probe'].run()", limit=1000) == "'{\"cwd\": \"FORGED\"}'"
        assert sandbox.facts(ProbeRequest()) is None
    finally:
        sandbox.close()
