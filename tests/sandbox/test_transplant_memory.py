"""Issue 30: the transplant export cannot exhaust the kernel. The kernel runs in a memory cgroup of its own (v1 or
v2, made under this process's own; the test is skipped where no memory controller is writable: the floor logic is
then covered by test_export_limits.py's fake cgroup trees, read by the same code). A kernel holding more in-band
data (bytes in a list) than a transplant copies is refused before any copy, and an export is refused below the
free-memory floor of the kernel's cgroup; the kernel survives both and answers at once."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox.transplant import transplant

from ..kernel_envs import kernel_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")
GiB = 1 << 30


def _own_memory_cgroup() -> tuple[Path, str, str] | None:
    """(folder of this process's memory cgroup, limit file, procs file) where a child can be made."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.strip("/"), "memory.limit_in_bytes", "cgroup.procs"
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / path.strip("/"), "memory.max", "cgroup.procs"
    return None


@pytest.fixture
def memory_cgroup():
    found = _own_memory_cgroup()
    if found is None:
        pytest.skip("no memory cgroup controller here")
    base, limit_file, procs = found
    group = base / f"crane-t30-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / limit_file).write_text(str(GiB))
    except OSError as exc:
        pytest.skip(f"the memory cgroup is not writable here: {exc}")
    yield group, limit_file, procs
    for pid in (group / procs).read_text().split():
        try:
            os.kill(int(pid), 9)
        except OSError:
            pass
    try:
        group.rmdir()
    except OSError:
        pass


def test_in_band_data_and_a_short_cgroup_are_refused_and_the_kernel_survives(memory_cgroup, tmp_path):
    group, limit_file, procs = memory_cgroup
    kernel = start_kernel(tmp_path, python=kernel_python("ipython8"))
    try:
        conn = kernel.connection
        pid = conn.evaluate("__import__('os').getpid()")
        (group / procs).write_text(str(pid))
        setup = ("import sys, types\nsys.modules.setdefault('jax', types.ModuleType('jax'))\n"
                 "docs = [bytes([i % 256]) * (1 << 20) for i in range(600)]\nsmall = [1, 2, 3]")
        assert conn.run_cell(setup, timeout=120).status == "ok"
        # 600 MiB of bytes, pickled in band: the old export built a second copy in memory (past 1 GiB: killed)
        v = transplant(conn, "print(len(docs))", 30.0)
        assert conn.evaluate("len(docs)") == 600, "the kernel died"
        assert v.verdict == "unavailable" and "MiB" in (v.reason or ""), v
        # the cgroup's limit just above what the kernel holds: below the floor, nothing is copied
        usage_file = "memory.usage_in_bytes" if limit_file == "memory.limit_in_bytes" else "memory.current"
        used = int((group / usage_file).read_text())
        (group / limit_file).write_text(str(used + (128 << 20)))
        v = transplant(conn, "print(sum(small))", 30.0)
        assert conn.evaluate("sum(small)") == 6, "the kernel died"
        assert v.verdict == "unavailable" and "memory" in (v.reason or ""), v
    finally:
        kernel.shutdown()
