"""An OS transplant session's address-space limit counts the state it copied, not the kernel's whole size (issue 42,
h5: crane.sandbox.session_memory).

The session's worker is confined once, before it copies anything, with a hard limit of max(its size, the kernel's)
+ the budget + 1 GiB; the kernel's size counts every value the kernel holds. Here the kernel holds 2 GiB the
session never reads, the budget is 512 MiB, and a command maps 2.5 GiB (read-only: no memory used): a fork of the
kernel shares the 2 GiB and gets ENOMEM; the session's worker, whose limit counted the 2 GiB, mapped it (no-crash).
The daemon now sets the worker's soft limit before each command — its size now, the state copied so far included,
plus the budget plus the address space the kernel reserved untouched beyond the worker — and lifts it to the hard
limit for each load: the map is refused, a command within its budget runs, and a later load runs (IPython 8 and 9;
the kernel is a CuPy one: unforkable). The soft limit itself, set and lifted on a real child process:
`test_a_command_s_soft_limit_and_a_load_s`.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.session import open_session
from crane.sandbox.session_memory import MIB, lift_for_load, limit_command, vm_of

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the OS sandbox needs Linux")

SETUP = """
import sys, types
sys.modules['cupy'] = types.ModuleType('cupy')
import numpy as np
unused = np.ones((2 << 30) // 8)  # 2 GiB, written: resident in the kernel
later = np.ones((256 << 20) // 8)  # 256 MiB a later command reads
"""


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_session_s_limit_counts_what_it_copied_not_the_kernel_s_data(kernel_env, tmp_path):
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell(SETUP, timeout=180).status == "ok"
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=60, memory_mb=512) as sb:
                assert type(sb).__name__ == "TransplantSession", type(sb)
                v = sb.run("import mmap\nsmall = mmap.mmap(-1, 256 << 20, prot=mmap.PROT_READ)")
                assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)  # (within its budget)
                # before: the hard limit counted `unused` (2 GiB): the map fitted
                v = sb.run("big = mmap.mmap(-1, 5 << 29, prot=mmap.PROT_READ)")
                assert v.verdict == "crash" and v.ename == "OSError" and "[Errno 12]" in (v.evalue or ""), \
                    (v.verdict, v.ename, v.evalue, v.reason)
                # (a new worker, the log replayed; its first command set the tight limit, the load lifts it)
                v = sb.run("n = later.size\nprint(n)")
                assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
                assert v.stdout.strip() == str((256 << 20) // 8), v.stdout
        assert watch.unchanged, watch.changes()
    finally:
        kernel.shutdown()


def test_a_command_s_soft_limit_and_a_load_s():
    """On a real child with a hard limit, as the session's worker has: a command's soft limit is its size plus the
    budget (plus the reservations of a kernel larger in address space than in memory), never above the hard limit;
    a load's is the hard limit."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        hard = 8 << 30
        resource.prlimit(child.pid, resource.RLIMIT_AS, (hard, hard))
        size = vm_of(child.pid)
        assert size is not None and size.vm > 0 and size.rss > 0, size
        soft = limit_command(child.pid, None, 512)
        assert soft is not None and size.vm + 512 * MIB <= soft < size.vm + 600 * MIB, (soft, size)
        assert resource.prlimit(child.pid, resource.RLIMIT_AS) == (soft, hard)
        lift_for_load(child.pid)
        assert resource.prlimit(child.pid, resource.RLIMIT_AS) == (hard, hard)
        # a kernel (this process) holding address space it never touched: that room is added
        import mmap

        reserved = mmap.mmap(-1, 1 << 30, prot=mmap.PROT_READ)
        try:
            me = (os.getpid(), 0)
            roomier = limit_command(child.pid, me, 512)
            assert roomier is not None and roomier >= soft + (1 << 30) - 64 * MIB, (roomier, soft)
        finally:
            reserved.close()
        assert limit_command(child.pid, None, 64 << 10) == hard  # (never above the hard limit)
    finally:
        child.kill()
        child.wait()
