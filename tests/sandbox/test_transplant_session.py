"""Sandbox sessions (the agent's and `crane fix`'s sandboxed tries) on kernels that cannot be forked: a
`TransplantSession` in a confined worker, with the fork session's interface: state persists between runs,
checkpoints and rollbacks (replayed in a new worker), a run over budget resumes at the last checkpoint, side
effects are blocked, the kernel is unchanged and no process is left after close. IPython 9: a real JAX kernel;
IPython 8 (whose environment has no TensorFlow, JAX or CuPy build): a kernel with `cupy` in `sys.modules`, which
is how the fork sandbox recognises CuPy."""

from __future__ import annotations

import os
import select

import pytest

from crane.agent.fork_sandbox import ForkSandbox
from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import SandboxError
from crane.sandbox.session import open_session
from crane.sandbox.transplant_session import TransplantSession

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")

SETUP = "import numpy as np\nX = np.arange(12.0).reshape(3, 4)\ndef scale(a):\n    return a * factor\nfactor = 2\n"
UNFORKABLE = {"ipython9": "import jax", "ipython8": "import sys, types\nsys.modules['cupy'] = types.ModuleType('cupy')"}


def _gone(pid: int, timeout: float = 15.0) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_session_on_an_unforkable_kernel_runs_in_a_transplant_worker(kernel_env, tmp_path):
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell(SETUP + UNFORKABLE[kernel_env], timeout=120).status == "ok"
        real = conn.run_cell("X[:, :2] @ np.ones(4)")  # what the session's crash must equal
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30) as sb:
                assert isinstance(sb, TransplantSession) and sb.depth == 0
                v = sb.run("Y = scale(X)\nfloat(Y.sum())")
                assert v.verdict == "no-crash" and v.mode == "transplant" and "132.0" in v.displays[-1].text, v
                assert v.transplant is not None and {c.split(" (")[0] for c in v.transplant.copied} >= {"X", "scale"}, v.transplant
                assert "not forked" in v.how() and v.mode_reason, v.how()
                assert sb.checkpoint() == 1
                v = sb.run("X = X[:, :2]\nX @ np.ones(4)")
                assert v.verdict == "crash" and v.ename == real.ename == "ValueError" and v.line == 2, v
                assert sb.inspect("X.shape") == "(3, 2)"  # the session's own state persists
                assert sb.rollback() == 0
                assert sb.inspect("X.shape") == "(3, 4)" and sb.inspect("Y.shape") == "(3, 4)"  # Y replayed
                v = sb.run("open('out.txt', 'w').write('x')")
                assert v.verdict == "blocked", v
                v = sb.run("import time\nwhile True:\n    time.sleep(0.01)", budget_s=2.0)
                assert v.verdict == "timeout" and "rolled back" in (v.reason or ""), v
                assert sb.inspect("X.shape") == "(3, 4)"  # resumed at the base checkpoint
                with pytest.raises(SandboxError, match="NameError"):
                    sb.inspect("Y")
                assert sb.worker is not None
                pid = sb.worker.proc.pid
            assert _gone(pid), "the session's worker outlived it"
            agent = ForkSandbox(conn, budget_s=30)  # the agent's sandbox on the same kernel
            try:
                r = agent.run_cell("scale(X).shape")
                assert r.status == "ok", r
                r = agent.run_cell("X.reshape(5)")
                assert r.status == "error" and r.ename == "ValueError", r
                agent.reset_to_history()
                assert agent.run_cell("X.shape").status == "ok"
            finally:
                agent.close()
        assert watch.unchanged, (watch.outputs, watch.changes())
        assert not (tmp_path / "out.txt").exists()
    finally:
        kernel.shutdown()
