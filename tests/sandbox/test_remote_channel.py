"""A kernel that cannot see the daemon's files (as behind a Jupyter Server on another machine): here a kernel
started in its own mount namespace with a private tmpfs on /tmp, where the daemon's private directory lives.
The sandbox then works through the remote channel (the kernel makes its own private directory, the daemon
collects the run with private requests): same verdicts, output, stop and cleanup."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from jupyter_client import KernelManager
from jupyter_core.paths import jupyter_runtime_dir

from crane.kernel.client import KernelConnection
from crane.kernel.manager import KERNEL_ENV
from crane.sandbox import speculate

from ..sacred import kernel_state

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")


def _interpreter_outside_tmp() -> str:
    """This environment's interpreter by a path the kernel's private /tmp cannot hide: a checkout under /tmp
    links `.venv` to an environment elsewhere (envs/make_daemon_env.sh), so the environment's real folder is
    used; an environment that really lives under /tmp cannot run there (skip, saying so)."""
    prefix = os.path.realpath(sys.prefix)
    if prefix == "/tmp" or prefix.startswith("/tmp/"):
        pytest.skip(f"this environment lives under /tmp ({prefix}), which the kernel's private /tmp hides")
    return os.path.join(prefix, "bin", os.path.basename(sys.executable))


@pytest.fixture(scope="module")
def remote():
    python = _interpreter_outside_tmp()
    runtime = Path(jupyter_runtime_dir())
    runtime.mkdir(parents=True, exist_ok=True)
    cwd = Path(tempfile.mkdtemp(prefix="crane-remote-test-", dir=runtime))  # not under /tmp: the kernel sees it
    # the connection file must be outside /tmp, which the kernel will not see
    km = KernelManager(transport="tcp", ip="127.0.0.1",
                       connection_file=str(runtime / f"crane-remote-test-{os.getpid()}.json"))
    assert km.kernel_spec is not None and km._kernel_spec is not None
    userns = [] if os.geteuid() == 0 else ["-r"]
    km._kernel_spec.argv = ["unshare", *userns, "-m", "--propagation", "private", "--", "sh", "-c",
                            'mount -t tmpfs tmpfs /tmp && exec "$0" -m ipykernel_launcher -f "$1"',
                            python, "{connection_file}"]
    km.start_kernel(cwd=str(cwd), env={**os.environ, **KERNEL_ENV})
    conn = KernelConnection(km.blocking_client(), owner=km)
    try:
        conn.wait_ready(60)
        assert conn.run_cell("import os, numpy as np\nx = np.arange(5)").status == "ok"
        assert conn.evaluate("os.listdir('/tmp')") == []  # the daemon's /tmp is not visible there
        yield conn
    finally:
        conn.close()
        km.shutdown_kernel(now=True)
        km.cleanup_connection_file()
        shutil.rmtree(cwd, ignore_errors=True)


def test_verdicts_through_the_remote_channel(remote):
    before = kernel_state(remote)
    v = speculate(remote, "open('made.txt', 'w').write('x')\nprint(x.sum())\nx.sum()", budget_s=10)
    assert (v.verdict, v.channel, v.stdout) == ("no-crash", "remote", "10\n"), v
    assert v.displays[-1].text == remote.evaluate("repr(x.sum())"), v  # the kernel's numpy's repr (np.int64(10) on 2.x)
    v = speculate(remote, "y = 1\nx[10]", budget_s=10)
    assert (v.verdict, v.ename, v.line, v.channel) == ("crash", "IndexError", 2, "remote"), v
    v = speculate(remote, "import ctypes\nctypes.string_at(0)", budget_s=10)
    assert v.verdict == "crash" and v.ename == "DeadKernelError", v
    assert kernel_state(remote) == before
    assert remote.evaluate("os.path.exists('made.txt')") is False
    assert [d for d in remote.evaluate("os.listdir('/tmp')") if d.startswith("crane-sbx")] == []


def test_timeout_and_stop_through_the_remote_channel(remote):
    v = speculate(remote, "while True:\n    pass", budget_s=1.5)
    assert v.verdict == "timeout" and "within 1.5 s" in (v.reason or ""), v  # its budget ended it (no wall clock)
    cancel = threading.Event()
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("v", speculate(remote, "import time\ntime.sleep(60)",
                                                                        budget_s=60, cancel=cancel)))
    th.start()
    time.sleep(1.0)
    cancel.set()
    th.join(120)  # the bound ends a failing test (the 60 s cell outlives it only when the stop failed)
    assert box["v"].verdict == "unavailable" and "stopped" in box["v"].reason, box["v"]
    deadline = time.monotonic() + 60  # an event waited for; the bound ends a failing test
    while remote.evaluate("len(__import__('sys').modules['_crane_sandbox']._RUNS)") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert remote.evaluate("len(__import__('sys').modules['_crane_sandbox']._RUNS)") == 0
    assert [d for d in remote.evaluate("os.listdir('/tmp')") if d.startswith("crane-sbx")] == []
