"""Issue 42 (the export's memory, h2 session 10): shrinking a large value in the user's kernel costs it about the
copy kept and its row numbers, never a permutation of every row.

kernel/miniature's row choice took numpy's `choice(n, k, replace=False)`, which permutes all `n` rows once `k` >
n / 50 (8 bytes a row of the whole object), then a sorted copy and a Python list of the rows kept: a 40 MB uint8
array shrunk under a 16 MiB copy limit took the kernel's high-water mark 0.9 GB up (IPython 8). The rows are now
drawn chunk by chunk into one int64 array (`miniature._distinct`). Measured with the kernel's own VmHWM, reset
to its RSS just before the check (`/proc/self/clear_refs`).
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.kernel import miniature
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")


@pytest.mark.parametrize(("n", "k", "req"), [(200_000, 10_000, {5, 7, 199_999}), (300_000, 299_990, {0}),
                                             (1_500_000, 1_000_000, set(range(0, 1_500_000, 100_000))),
                                             (2_000_000, 700_000, set())])
def test_rows_drawn_are_distinct_sorted_and_hold_the_required(n, k, req):
    pos = miniature._positions(n, k, req, random.Random(3))
    assert len(pos) == k and len(np.unique(pos)) == k and bool((np.diff(pos) > 0).all())
    assert 0 <= int(pos[0]) and int(pos[-1]) < n and req <= set(np.asarray(pos).tolist())
    again = miniature._positions(n, k, req, random.Random(3))
    assert np.array_equal(pos, again)  # seeded: the same rows for every object of the group, and run to run


def _vm(conn, key: str) -> int:
    return conn.evaluate(f"[int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('{key}:')][0]")


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_shrinking_a_narrow_array_costs_the_kernel_the_copy_and_its_row_numbers(kernel_env, tmp_path, monkeypatch):
    use_options(monkeypatch, transplant_copy_mb=16)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    conn = kernel.connection
    try:
        setup = ("import sys, types\nsys.modules.setdefault('jax', types.ModuleType('jax'))\nimport numpy as np\n"
                 "narrow = np.ones(40_000_000, dtype=np.uint8)")
        assert conn.run_cell(setup, timeout=120).status == "ok"
        assert transplant(conn, "print(1)", 60.0).verdict == "no-crash"  # CRANE's modules installed first
        assert conn.run_cell("open('/proc/self/clear_refs', 'w').write('5')").status == "ok"  # VmHWM := VmRSS
        rss = _vm(conn, "VmRSS")
        with Untouched(conn) as watch:
            v = transplant(conn, "print(narrow.shape)", 60.0)
        grew_kb = _vm(conn, "VmHWM") - rss
        assert watch.unchanged, watch.changes()
        assert v.verdict == "no-crash" and v.kept, v
        rows = v.kept[0].rows
        assert rows < 40_000_000
        # the kept copy (1 byte a row) and its row numbers (8 bytes a row), plus 64 MiB for the export's own work
        assert grew_kb <= (9 * rows >> 10) + (64 << 10), (grew_kb, rows)
    finally:
        kernel.shutdown()
