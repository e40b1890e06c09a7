"""Loop miniatures in the general case (real kernel, the fork sandbox and the portable one): `while` loops are bounded
by the same rule as `for` loops, and so are the loops of functions EARLIER cells defined that the cell calls (their
code rebuilt with the bound only in the run's copy: the user's function object keeps its code). Both ways for each
shape: a crash in the first iterations is found (certain when no cut came first), a clean long loop is a miniature
no-crash never called certain; the kernel is untouched."""

from __future__ import annotations

import os

import pytest

from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.scale import loop_spec, speculate_scaled

from ..sacred import kernel_state, settle

SETUP = """
import functools
import time
EPOCHS = 400

def train(n_epochs, bad_at=None, step_s=0.02):
    history = []
    epoch = 0
    while epoch < n_epochs:
        for step in range(50):
            time.sleep(step_s)
            if bad_at is not None and epoch == bad_at and step == 1:
                raise RuntimeError('loss is nan')
        history.append(epoch)
        epoch += 1
    return history

def logged(f):
    @functools.wraps(f)
    def wrapper(*a, **k):
        return f(*a, **k)
    return wrapper

class Base:
    def step(self, i):
        time.sleep(0.1)
        return i

class Model(Base):
    @logged
    def fit(self, epochs):
        losses, e = [], 0
        while e < epochs:
            losses.append(super().step(e))
            e += 1
        return losses

class Trainer:
    def __init__(self):
        self.done = 0
    def fit(self, steps):
        converged = False
        while not converged:
            time.sleep(0.05)
            self.done += 1
            converged = self.done >= steps
        return self.done
"""

WHILE_CLEAN = """
epoch, losses = 0, []
while epoch < EPOCHS:
    time.sleep(0.3)
    losses.append(1.0 / (epoch + 1))
    epoch += 1
print(len(losses) > 0, losses[0])
"""
WHILE_FIRST = """
epoch = 0
while epoch < EPOCHS:
    time.sleep(0.3)
    if epoch == 1:
        raise RuntimeError('diverged at epoch 1')
    epoch += 1
"""
WHILE_NOT = """
converged, k = False, 0
while not converged:
    time.sleep(0.3)
    k += 1
    converged = k > 10_000
w = [1, 2] @ [3]
"""
# an early stop the full run reaches at epoch 300/390; a cut loop's `else` is not the full run's path: skipped
WHILE_ELSE = """
k = 0
while k < EPOCHS:
    time.sleep(0.3)
    k += 1
    if k == 300:
        break
else:
    raise RuntimeError('never stopped early')
print(k)
"""
FOR_ELSE = """
for epoch in range(EPOCHS):
    time.sleep(0.3)
    if epoch == EPOCHS - 10:
        break
else:
    raise RuntimeError('never stopped early')
print('stopped')
"""
# `while True:` with no `break`: only an exception ends it (a next() that runs dry, say): a clean cut run says nothing
ENDLESS = """
k = 0
while True:
    time.sleep(0.3)
    k += 1
"""
ENDLESS_BREAK = """
k = 0
while True:
    time.sleep(0.3)
    k += 1
    for j in range(2):
        break
    if k >= 300:
        break
print(k)
"""
QUICK_ELSE = "i = 0\nwhile i < 3:\n    i += 1\nelse:\n    print('done', i)\nfor j in range(2):\n    pass\nelse:\n    print(j)"
QUICK_WHILE = "i = t = 0\nwhile i < 3000:\n    t += i\n    i += 1\nprint(t)"
EARLIER = "the functions earlier cells defined ("
EARLIER_CLEAN = "h = train(EPOCHS)\nprint(len(h) >= 1, h[0])\n"
EARLIER_FIRST = "h = train(EPOCHS, bad_at=0)\n"
# a decorated method (reached through `__wrapped__`; its closure-held function) that calls `super()`
EARLIER_WRAPPED = "losses = Model().fit(10_000)\nprint(len(losses) >= 2, losses[0])\n"
EARLIER_METHOD = "tr = Trainer()\nprint(tr.fit(100_000) >= 2)\n"


@pytest.fixture(scope="module")
def ready(conn, watcher):
    res = conn.run_cell(SETUP, timeout=120)
    assert res.status == "ok", res
    settle(watcher, conn)  # the setup's messages all in before the watcher is cleared
    watcher.clear()
    return kernel_state(conn)


def code_of(conn, expr: str) -> str:
    """A digest of the kernel's own function code (its bytecode, line table and names), read privately."""
    c = f"({expr}).__code__"
    return conn.evaluate(f"__import__('hashlib').sha256({c}.co_code + {c}.co_linetable + repr({c}.co_names).encode()"
                         ").hexdigest()", timeout=30)


def loops(conn, source: str, budget: float = 30.0, **kw):
    return speculate(conn, source, budget, miniature=loop_spec(), **kw)


def test_while_loops_both_ways(conn, ready):
    v = loops(conn, WHILE_FIRST)
    assert v.verdict == "crash" and v.ename == "RuntimeError" and v.line == 6, v
    assert "before any loop was cut" in (v.reason or "") and "certain" in (v.reason or ""), v
    assert "`while`" in (v.reason or ""), v
    v = loops(conn, WHILE_CLEAN)
    assert v.verdict == "no-crash" and v.scale == "miniature" and v.stdout == "True 1.0\n", v
    assert "loops on line 3 cut short" in (v.reason or "") and "certain" not in (v.reason or ""), v
    v = loops(conn, WHILE_NOT)  # a `while not converged` cut; the crash after it is not about the skipped epochs
    assert v.verdict == "crash" and v.ename == "TypeError" and v.line == 7, v
    assert "not certain" in (v.reason or "") and "line 3 were cut" in (v.reason or ""), v
    v = loops(conn, ENDLESS)  # cut, clean: inconclusive (the full run never ends)
    assert v.verdict == "timeout" and "endless `while` loop on line 3 was cut short" in (v.reason or ""), v
    v = loops(conn, ENDLESS_BREAK)  # its own `break` (not the inner loop's): the usual rule
    assert v.verdict == "no-crash" and v.stdout == "2\n" and "line 3 cut short" in (v.reason or ""), v
    v = loops(conn, QUICK_WHILE)  # quick: never cut, the full run
    assert v.verdict == "no-crash" and v.stdout == "4498500\n" and "no loop reached" in (v.reason or ""), v
    assert kernel_state(conn) == ready


def test_a_cut_loops_else_is_skipped(conn, ready):
    v = loops(conn, WHILE_ELSE)
    assert v.verdict == "no-crash" and v.stdout == "2\n" and "line 3 cut short" in (v.reason or ""), v
    v = loops(conn, FOR_ELSE)
    assert v.verdict == "no-crash" and v.stdout == "stopped\n" and "line 2 cut short" in (v.reason or ""), v
    v = loops(conn, QUICK_ELSE)  # loops never cut run their `else` as the full run does
    assert v.verdict == "no-crash" and v.stdout == "done 3\n1\n", v
    assert kernel_state(conn) == ready


def test_earlier_cells_functions_both_ways(conn, ready):
    before = code_of(conn, "train"), code_of(conn, "Trainer.fit")
    v = loops(conn, EARLIER_FIRST)
    assert v.verdict == "crash" and v.ename == "RuntimeError" and v.line == 1, v
    assert "before any loop was cut" in (v.reason or "") and EARLIER in v.reason and "`train`" in v.reason, v
    v = loops(conn, EARLIER_CLEAN)
    assert v.verdict == "no-crash" and v.scale == "miniature" and v.stdout == "True 0\n", v
    assert "of `train` cut short" in (v.reason or "") and "certain" not in (v.reason or ""), v
    v = loops(conn, EARLIER_METHOD)  # a method of an earlier cell's class
    assert v.verdict == "no-crash" and v.stdout == "True\n" and "of `Trainer.fit`" in (v.reason or ""), v
    v = loops(conn, EARLIER_WRAPPED)
    assert v.verdict == "no-crash" and v.stdout == "True 0\n" and "of `Model.fit` cut short" in (v.reason or ""), v
    assert (code_of(conn, "train"), code_of(conn, "Trainer.fit")) == before  # the user's functions untouched
    assert kernel_state(conn) == ready


def test_scaled_reaches_an_earlier_function(conn, ready):
    # no loop in the cell's text: the call reaches one; the full run (3 s to the crash) times out at 2 s
    v = speculate_scaled(conn, "h = train(EPOCHS, bad_at=1, step_s=0.15)", budget_s=2.0)
    assert v.verdict == "crash" and v.ename == "RuntimeError" and v.scale == "miniature", v
    assert "not certain" in (v.reason or "") and "of `train` were cut" in (v.reason or ""), v
    v = speculate_scaled(conn, WHILE_CLEAN, budget_s=2.0)
    assert v.verdict == "no-crash" and v.scale == "miniature", v
    assert kernel_state(conn) == ready


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels")
def test_portable_path(conn, ready):
    portable = SandboxOptions(confinement="portable")
    before, wrapped = code_of(conn, "train"), code_of(conn, "Model.fit.__wrapped__")
    v = loops(conn, WHILE_FIRST, 60.0, sandbox=portable)
    assert v.mode == "portable" and v.verdict == "crash" and v.ename == "RuntimeError" and v.line == 6, v
    assert "before any loop was cut" in (v.reason or ""), v
    v = loops(conn, WHILE_CLEAN, 60.0, sandbox=portable)
    assert v.verdict == "no-crash" and v.scale == "miniature" and "certain" not in (v.reason or ""), v
    v = loops(conn, EARLIER_FIRST, 60.0, sandbox=portable)
    assert v.verdict == "crash" and v.ename == "RuntimeError" and "before any loop was cut" in (v.reason or ""), v
    assert EARLIER in (v.reason or "") and "`train`" in (v.reason or ""), v
    v = loops(conn, EARLIER_CLEAN, 60.0, sandbox=portable)
    assert v.verdict == "no-crash" and v.stdout == "True 0\n" and "of `train` cut short" in (v.reason or ""), v
    v = loops(conn, EARLIER_WRAPPED, 60.0, sandbox=portable)
    assert v.verdict == "no-crash" and v.stdout == "True 0\n" and "of `Model.fit` cut short" in (v.reason or ""), v
    assert code_of(conn, "train") == before and code_of(conn, "Model.fit.__wrapped__") == wrapped
    assert kernel_state(conn) == ready


def test_fewer_items_after_a_cut_is_inconclusive():
    """A cut generator or collecting loop hands the rest of the cell fewer items than the full run: those errors
    are the skipped iterations' (kernel/miniature `_loop_artefact`), never a crash; without a cut they are not."""
    from crane.sandbox.kernel import miniature
    saved = dict(miniature._LOOPS)
    try:
        for text in ("not enough values to unpack (expected 2, got 0)", "need at least one array to stack"):
            miniature._LOOPS.update(cuts=[(3, 2, -1)])
            assert miniature._loop_artefact(ValueError(text)), text
            miniature._LOOPS.update(cuts=[])
            assert miniature._loop_artefact(ValueError(text)) is None, text
    finally:
        miniature._LOOPS.clear()
        miniature._LOOPS.update(saved)


# a newer history entry that defines the same function on the same line but never ran it (its first line raised):
# same bytecode, other constants — never the source a loop miniature takes (the copy would return 'B')
DONOR_A = "import time\ndef stage(n):\n    for i in range(n):\n        time.sleep(0.3)\n    return 'A'\n"
DONOR_B = "1 / 0\ndef stage(n):\n    for i in range(n):\n        time.sleep(0.3)\n    return 'B'\n"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels")
def test_a_def_that_never_ran_is_not_the_functions_source(tmp_path):
    from crane.kernel.manager import start_kernel
    k = start_kernel(tmp_path)
    try:
        c = k.connection
        assert c.run_cell(DONOR_A, timeout=60).status == "ok"
        assert c.run_cell(DONOR_B, timeout=60).status == "error"
        for sandbox in (None, SandboxOptions(confinement="portable")):
            kw = {"sandbox": sandbox} if sandbox is not None else {}
            v = loops(c, "print(stage(1000))", 60.0, **kw)
            assert v.verdict == "no-crash" and v.stdout == "A\n" and "of `stage` cut short" in (v.reason or ""), v
    finally:
        k.shutdown()
