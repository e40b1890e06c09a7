"""Issue 45: no worker is prepared ahead for a kernel behind a Jupyter Server (crane.sandbox.prewarm): its process
is the server's, not one this daemon can watch or copy from, even when that server runs on this machine (as here,
where a worker could otherwise be started for it)."""

from __future__ import annotations

import os

import pytest

from crane.kernel.client import KernelConnection
from crane.sandbox.options import SandboxOptions
from crane.sandbox.prewarm import prewarm_kernel
from crane.sandbox.transplant import POOL

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")


def test_no_worker_for_a_kernel_behind_a_jupyter_server(user_kernel):
    user_kernel.run("import pandas as pd\ndf = pd.DataFrame({'a': [1]})")
    conn = KernelConnection.attach(user_kernel.target, timeout=30)
    try:
        pid = int(conn.evaluate("__import__('os').getpid()"))  # the server's kernel runs on this machine here
        out = prewarm_kernel(conn, SandboxOptions(confinement="portable"))
        assert not out.started and "Jupyter Server" in out.why, out
        with POOL.lock:
            assert [k for _, k in POOL.idle if k is not None and k.pid == pid] == []
    finally:
        conn.close()
