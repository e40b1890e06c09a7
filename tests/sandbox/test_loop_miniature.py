"""Loop miniatures (real kernel, the fork sandbox and the portable one): a long cell whose time is in `for` loops runs
with each loop cut after its first iterations once it has run a time slice (quick loops run whole; a cut range runs
its last iteration too), its data whole. What such a run may
conclude (kernel/miniature): a crash before any loop was cut is on the full run's own path (certain, said in the
reason); one after a cut is a miniature crash, unless the skipped iterations may explain it (then inconclusive); a
clean bounded run is a miniature's clean run, never called certain. The kernel is untouched."""

from __future__ import annotations

import os

import pytest

from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.scale import loop_spec, speculate_scaled

from ..sacred import kernel_state, settle

SETUP = """
import time
import numpy as np
EPOCHS = 400
batches = [np.ones((8, 4)) for _ in range(50)]
W = np.ones((4, 3))
W_bad = np.ones((5, 3))
X_test = np.ones((10, 7))
def slow_step(xb, w):
    time.sleep(0.02)
    return xb @ w
"""

# about 400 s at full size: 400 epochs of 50 steps of 20 ms
TRAIN = """
history = []
for epoch in range(EPOCHS):
    for xb in batches:
        out = slow_step(xb, {w})
    history.append(float(out.sum()))
"""
CLEAN = TRAIN.format(w="W") + "print(len(history), history[-1])\n"
FIRST_BATCH = TRAIN.format(w="W_bad")  # raises in the first step: the full run's own path
AFTER_LOOP = TRAIN.format(w="W") + "pred = X_test @ W\n"  # raises after the loop, whatever the epochs did
SKIPPED = TRAIN.format(w="W") + "print(history[EPOCHS // 2])\n"  # an index the skipped epochs would have filled
QUICK_THEN_SLOW = """cols = []
for k in ('a', 'b', 'c', 'd', 'e', 'f'):
    cols.append(k)
for epoch in range(EPOCHS):
    time.sleep(0.3)
print(len(cols), len(cols) * 2)
"""
IN_FUNCTION = """
def fit(n):
    for i in range(n):
        time.sleep(0.05)
        if i == 1:
            raise RuntimeError('diverged at step 1')
fit(10_000)
"""


@pytest.fixture(scope="module")
def ready(conn, watcher):
    res = conn.run_cell(SETUP, timeout=120)
    assert res.status == "ok", res
    settle(watcher, conn)  # the setup's messages all in before the watcher is cleared
    watcher.clear()
    return kernel_state(conn)


def loops(conn, source: str, budget: float = 20.0, **kw):
    return speculate(conn, source, budget, miniature=loop_spec(), **kw)


def test_a_crash_before_any_cut_is_certain(conn, ready):
    v = loops(conn, FIRST_BATCH)
    assert v.verdict == "crash" and v.ename == "ValueError" and v.line == 5, v
    assert v.scale == "miniature" and [k.kind for k in v.kept] == ["loop"], v
    assert "before any loop was cut" in (v.reason or "") and "certain" in (v.reason or ""), v
    assert "cut after 2 iterations once it had run 0.5 s" in v.how()
    v = loops(conn, IN_FUNCTION)  # a loop in a function the cell defines is bounded too: the crash is in it
    assert v.verdict == "crash" and v.ename == "RuntimeError" and v.line == 6, v
    assert "before any loop was cut" in (v.reason or ""), v
    assert kernel_state(conn) == ready


def test_a_crash_after_a_cut_is_a_miniature_crash_not_called_certain(conn, ready):
    v = loops(conn, AFTER_LOOP)
    assert v.verdict == "crash" and v.ename == "ValueError" and v.line == 7 and v.scale == "miniature", v
    assert "not certain" in (v.reason or "") and "lines 4, 3 were cut" in (v.reason or ""), v
    v = loops(conn, SKIPPED)  # the skipped epochs explain an IndexError: inconclusive, never a crash
    assert v.verdict == "timeout" and "artefact" in (v.reason or "") and v.ename == "IndexError", v
    assert kernel_state(conn) == ready


def test_a_clean_bounded_run_is_a_miniature_no_crash(conn, ready):
    v = loops(conn, CLEAN)
    assert v.verdict == "no-crash" and v.scale == "miniature", v
    assert v.stdout.split() == ["3", "96.0"], v  # epochs 0, 1 and the last (399); each of 2 batches
    assert "cut short" in (v.reason or "") and "certain" not in (v.reason or ""), v
    v = loops(conn, "t = 0\nfor i in range(3000):\n    t += i\nprint(t)")  # quick: never cut, a full run
    assert v.verdict == "no-crash" and "no loop reached its bound" in (v.reason or "") and v.stdout == "4498500\n", v
    v = loops(conn, QUICK_THEN_SLOW)  # the quick loop runs whole, only the slow one is cut
    assert v.verdict == "no-crash" and v.stdout == "6 12\n" and "loops on line 4 cut short" in (v.reason or ""), v
    assert kernel_state(conn) == ready


def test_scaled_falls_back_to_a_loop_miniature(conn, ready):
    v = speculate_scaled(conn, AFTER_LOOP, budget_s=2.0)  # full: timeout; rows: nothing large; loops: the crash
    assert v.verdict == "crash" and v.ename == "ValueError" and v.scale == "miniature", v
    v = speculate_scaled(conn, CLEAN, budget_s=2.0)
    assert v.verdict == "no-crash" and v.scale == "miniature", v
    v = speculate_scaled(conn, "time.sleep(30)", budget_s=1.0)  # no loop: still undecided
    assert v.verdict == "timeout" and "no miniature run" in (v.reason or ""), v
    assert kernel_state(conn) == ready


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels")
def test_portable_path(conn, ready):
    portable = SandboxOptions(confinement="portable")
    v = loops(conn, AFTER_LOOP, 60.0, sandbox=portable)
    assert v.mode == "portable" and v.verdict == "crash" and v.ename == "ValueError" and v.line == 7, v
    assert v.scale == "miniature" and "not certain" in (v.reason or ""), v
    v = loops(conn, FIRST_BATCH, 60.0, sandbox=portable)
    assert v.verdict == "crash" and "before any loop was cut" in (v.reason or ""), v
    v = loops(conn, CLEAN, 60.0, sandbox=portable)
    assert v.verdict == "no-crash" and v.scale == "miniature" and v.stdout.split() == ["3", "96.0"], v
    assert kernel_state(conn) == ready
