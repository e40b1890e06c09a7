"""Memory pressure from a speculative run takes the sandbox, never the user's kernel: run contained in a memory
cgroup of its own (so it cannot take the machine down), with a kernel holding more memory than any single
sandbox process, and sandbox worker processes pushing the group over its limit (the report's case: without
`oom_score_adj` the kernel, the largest process, was the OOM killer's choice)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate

from ..kernel_envs import KERNEL_ENVS, kernel_python

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup/unified")
LIMIT = 1536 << 20


def _make_group() -> tuple[Path, str, str] | None:
    """(group dir, limit file, procs file) of a new memory cgroup, or None where this machine offers none."""
    name = f"crane-test-{uuid.uuid4().hex[:8]}"
    if (V1 / "memory.limit_in_bytes").exists() and os.access(V1, os.W_OK):
        g = V1 / name
        g.mkdir()
        (g / "memory.limit_in_bytes").write_text(str(LIMIT))
        try:
            (g / "memory.memsw.limit_in_bytes").write_text(str(LIMIT))
        except OSError:
            pass
        return g, "memory.limit_in_bytes", "cgroup.procs"
    if (V2 / "cgroup.controllers").exists() and "memory" in (V2 / "cgroup.controllers").read_text():
        g = V2 / name
        g.mkdir()
        (g / "memory.max").write_text(str(LIMIT))
        (g / "memory.swap.max").write_text("0")
        return g, "memory.max", "cgroup.procs"
    return None


@pytest.fixture(params=KERNEL_ENVS)
def contained(request, tmp_path):
    made = None
    try:
        made = _make_group()
    except OSError as exc:
        pytest.skip(f"no memory cgroup can be made here: {exc}")
    if made is None:
        pytest.skip("no memory cgroup controller on this machine")
    group, _, procs = made
    kernel = start_kernel(tmp_path, python=kernel_python(request.param))
    pid = kernel.connection.evaluate("__import__('os').getpid()")
    (group / procs).write_text(str(pid))
    yield kernel
    kernel.shutdown()
    for _ in range(50):
        try:
            group.rmdir()
            break
        except OSError:
            import time
            time.sleep(0.1)  # cleanup only: the group empties once the kernel's processes are reaped


WORKERS = """
import subprocess, sys
code = "import numpy as np, time; a = np.ones((450 << 20) // 8); time.sleep(30)"
ps = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(3)]
for p in ps:
    p.wait()
"""


def test_workers_over_the_limit_are_killed_not_the_kernel(contained):
    conn = contained.connection
    assert conn.run_cell("import numpy as np\nbig = np.ones((700 << 20) // 8)\nmarker = 42").status == "ok"
    v = speculate(conn, WORKERS, 60.0, layer="layered")
    assert v.verdict != "crash" or v.ename != "DeadKernelError", v
    assert conn.evaluate("marker + int(big[-1])") == 43  # the kernel is alive and its state intact
