"""A transplant worker's address-space limit is what a fork of the kernel gets (issue 42 part 2, benchmarks/dl-fresh).

The fork sandbox limits its child's address space to the kernel's size at the fork plus the run's budget. A
transplant worker is a fresh process: the reservations a library makes once per process, lazily (pyarrow's
mimalloc arenas, 1 GiB at the first pandas 3 `df.drop`; TensorFlow's thread stacks), were already made in the
kernel but are made again in the worker, after its limit was set from its own smaller size. On dl-fresh's
`keras_sequential_target_in_features/fixed` (a pandas 3 frame, a Keras `fit` with `validation_split`) the
arenas took the budget and TensorFlow's tf.data thread could not be created: the worker aborted (`killed by
SIGSEGV`, a "likely" DeadKernelError) where the kernel runs the cell clean. The worker's limit is now
max(its size, the kernel's) + the budget.

Here a small module stands for such a library: its first call in a process reserves 3 GiB of address space
(read-only, no memory used) and the kernel has called it. A cell calling it again must be as clean in the copy as
in the kernel; a cell reserving past the kernel's size plus the budget is still refused there (as in a fork).

The floor is the kernel's size less the values the copy loads anew (review r1 M2): the run's memory counts the copy
on top of the budget, and the kernel's size already holds those values; a floor of its whole size gave a cell
reading a large array that array's size again past its budget, where a fork of the kernel runs out of memory."""

from __future__ import annotations

import os
import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the OS sandbox needs Linux")

LIBRARY = '''
import mmap

_ARENA = None


def use():
    """Reserve this process's arena on first use (as an allocator does), then hand out from it."""
    global _ARENA
    if _ARENA is None:
        _ARENA = mmap.mmap(-1, 3 << 30, prot=mmap.PROT_READ)
    return len(_ARENA) >> 30
'''

# the kernel cannot be forked (the fork sandbox recognises CuPy by its module), so every run is a transplant
SETUP = ("import sys, types\nsys.modules['cupy'] = types.ModuleType('cupy')\n"
         "import arena_lib\nsizes = [arena_lib.use()]\n")


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_reservation_the_kernel_made_fits_in_the_copy(kernel_env, tmp_path):
    lib_dir = tmp_path / "site"
    lib_dir.mkdir()
    (lib_dir / "arena_lib.py").write_text(LIBRARY)
    work = tmp_path / "nb"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(lib_dir))
    kernel = start_kernel(work, python=kernel_python(kernel_env), env=env)
    try:
        conn = kernel.connection
        assert conn.run_cell(SETUP, timeout=120).status == "ok"
        cell = "sizes.append(arena_lib.use())\nprint(sizes)"
        with Untouched(conn) as watch:
            v = speculate(conn, cell, 60.0)
        assert watch.unchanged, watch.changes()
        assert v.mode == "transplant", (v.mode, v.reason)
        assert v.verdict == "no-crash" and v.stdout.strip() == "[3, 3]", (v.verdict, v.reason, v.ename, v.evalue)
        # the floor is the kernel's size, not a way past the budget: 8 GiB more than the kernel holds is refused
        v = speculate(conn, "import mmap\nbig = mmap.mmap(-1, 8 << 30, prot=mmap.PROT_READ)", 60.0)
        assert v.mode == "transplant", (v.mode, v.reason)
        assert v.verdict == "crash" and v.ename == "OSError" and "[Errno 12]" in (v.evalue or ""), \
            (v.verdict, v.reason, v.ename, v.evalue)
    finally:
        kernel.shutdown()



# 1.5 GiB the kernel holds (written: resident), a budget of 256 MiB, and a cell that reads the array and maps as much
# again (read-only: no memory used): a fork of the kernel has 256 MiB of room and gets ENOMEM; so must the copy,
# whether it holds the array whole or shrunk. Before, the copy's limit counted the array twice (in the kernel's
# size, the floor, and in the run's memory) and the map fitted.
DATA = "import numpy as np, mmap\na = np.ones((3 << 30) // 16)\n"
CELL = "n = a.size\nbig = mmap.mmap(-1, 3 << 29, prot=mmap.PROT_READ)\nprint('mapped', n)"
NO_FORK = "import sys, types\nsys.modules['cupy'] = types.ModuleType('cupy')\n"


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_copy_does_not_count_the_kernels_data_twice(kernel_env, tmp_path, monkeypatch):
    """The fork's verdict, then the copy's, whole and shrunk, on one kernel (each holding 1.5 GiB: one kernel, one
    array and one fork run for both copies)."""
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell(DATA, timeout=120).status == "ok"
        fork = speculate(conn, CELL, 120.0, memory_mb=256)
        assert fork.mode in ("layered", "blocking"), (fork.mode, fork.reason)  # a fork of the kernel
        assert fork.verdict == "crash" and fork.ename == "OSError" and "[Errno 12]" in (fork.evalue or ""), \
            (fork.verdict, fork.reason, fork.ename, fork.evalue)
        assert conn.run_cell(NO_FORK, timeout=60).status == "ok"
        for copy in ("whole", "shrunk"):
            # (the copy of 1.5 GiB may take the kernel over a second: the cap on the kernel's time a copy may take is
            # not what this checks, and at load 20 the whole copy went over the default 0.7 s / 5 s and was not made)
            use_options(monkeypatch, transplant_copy_mb=0 if copy == "whole" else 128, export_seconds=60.0,
                        watched_export_seconds=60.0)
            with Untouched(conn) as watch:
                v = speculate(conn, CELL, 120.0, memory_mb=256)
            assert watch.unchanged, (copy, watch.changes())
            assert v.mode == "transplant", (copy, v.mode, v.reason)
            assert bool(v.transplant and v.transplant.shrunk) == (copy == "shrunk"), (copy, v.transplant)
            assert (v.verdict, v.ename, v.evalue) == (fork.verdict, fork.ename, fork.evalue), (copy, v.verdict, v.reason)
    finally:
        kernel.shutdown()
