"""Transplant runs (crane.sandbox.transplant): a kernel of today's environment with TensorFlow/Keras or JAX loaded
cannot be forked safely; its cells run in a confined worker process of the kernel's interpreter on a copy of the
state they read. Verdicts equal the real run's; what cannot be copied is `unavailable`, named; the worker's writes
and network attempts reach nothing; nothing is left after a timeout; the user's kernel is unchanged (`Untouched`:
namespace, counters, history, event callbacks, RNG states, outputs). Two kernels: JAX (most tests; torch loaded by
the CUDA test alone, the module's last, as no other test reads anything of it), and TensorFlow/Keras (its own: a
worker imports what its kernel has loaded, and TensorFlow or torch alone costs seconds in each)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.transplant import POOL, transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python, require_today_python
from .conftest import tree_hash

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import numpy as np, jax, jax.numpy as jnp
np.random.seed(0)
X = np.random.rand(32, 4).astype('float32')
def double(a):
    return a * scale
scale = 2.0
w = jnp.ones((4, 2))
fh = open('data.csv')
gen = (i for i in range(3))
"""
KERAS_SETUP = """
import numpy as np, tensorflow as tf, keras
np.random.seed(0)
X = np.random.rand(32, 4).astype('float32')
y = np.random.rand(32, 1).astype('float32')
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation='relu'), keras.layers.Dense(1)])
model.compile(optimizer='adam', loss='mse')
def double(a):
    return a * scale
scale = 2.0
"""


def _today_kernel(tmp_path_factory, setup: str):
    python = require_today_python()
    work = tmp_path_factory.mktemp("transplant")
    (work / "data.csv").write_text("a,b\n1,2\n")
    kernel = start_kernel(work, python=python)
    run = kernel.connection.run_cell(setup, timeout=180)
    assert run.status == "ok", run
    return kernel, {"conn": kernel.connection, "work": work}


@pytest.fixture(scope="module")
def today(tmp_path_factory):
    kernel, state = _today_kernel(tmp_path_factory, SETUP)
    yield state
    kernel.shutdown()


@pytest.fixture(scope="module")
def keras_today(tmp_path_factory):
    kernel, state = _today_kernel(tmp_path_factory, KERAS_SETUP)
    yield state
    kernel.shutdown()


# the cells here finish in seconds; the budget is generous so that a loaded machine (a Keras fit timed out at 60 s
# at load 25) never turns a test of the verdict into one of the machine's speed: `timeout` is not what they test
def _check(today, source: str, budget_s: float = 240.0, direct: bool = False, **kw):
    conn = today["conn"]
    with Untouched(conn) as watch:
        v = (transplant(conn, source, budget_s, **kw) if direct else speculate(conn, source, budget_s, **kw))
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert conn.evaluate("1 + 1") == 2
    return v


def _real(today, source: str):
    return today["conn"].run_cell(source, timeout=120)


def test_keras_clean_fit_and_shape_mismatch_equal_the_real_run(keras_today):
    today = keras_today
    good = "model.fit(X, y, epochs=1, verbose=0)\np = model.predict(double(X), verbose=0)\np.shape"
    v = _check(today, good)
    assert v.mode == "transplant" and v.transplant is not None, v
    assert "TensorFlow" in (v.mode_reason or "") and "device placement not checked" in v.how(), v.how()
    assert v.verdict == "no-crash", v
    assert v.displays and "(32, 1)" in v.displays[-1].text, v.displays
    assert {c.split(" (")[0] for c in v.transplant.copied} >= {"model", "X", "y", "double"}, v.transplant
    bad = "m2 = keras.models.clone_model(model)\nm2.compile(optimizer='adam', loss='mse')\nm2.fit(X[:, :3], y, epochs=1, verbose=0)"
    v = _check(today, bad)
    real = _real(today, bad)
    assert real.status == "error" and v.verdict == "crash" and v.ename == real.ename and v.line == 3, (v, real)
    # the real failed fit left m2 with a traced step and no optimizer state: a rebuilt copy would not fail the
    # same way, so the run is refused rather than a false "no-crash"
    again = "m2.fit(X, y, epochs=1, verbose=0)"
    v = _check(today, again)
    assert _real(today, again).status == "error" and v.verdict == "unavailable" and "`m2`" in v.reason, v


def test_jax_traced_if_crashes_and_clean_jit_runs(today):
    bad = "@jax.jit\ndef f(x):\n    if x.sum() > 0:\n        return x\n    return -x\nf(w)"
    v = _check(today, bad)
    real = _real(today, bad)
    assert real.status == "error" and v.verdict == "crash" and v.ename == real.ename, (v, real)
    good = "g = jax.jit(lambda x: jnp.where(x.sum() > 0, x, -x))\ng(w).shape"
    v = _check(today, good)
    assert v.verdict == "no-crash" and "(4, 2)" in v.displays[-1].text, v


def test_uncopyable_state_is_unavailable_and_named(today):
    for name, kind in (("fh", "TextIOWrapper"), ("gen", "generator")):
        v = _check(today, f"x = {name}\nprint(x)")
        assert v.verdict == "unavailable" and f"`{name}`" in (v.reason or "") and kind in v.reason, v


def test_names_in_magics_are_copied_and_indirect_reads_are_named(today):
    v = _check(today, "%time z = double(w[:2])\nz.shape")
    assert v.verdict == "no-crash" and "(2, 2)" in v.displays[-1].text, v
    v = _check(today, "eval('X').shape")  # (a name in a string where the cell reads by a string: copied)
    assert v.verdict == "no-crash", v
    v = _check(today, "eval(chr(88)).shape")  # (a computed name: not copied, and named)
    assert v.verdict == "unavailable" and "'X'" in (v.reason or ""), v


def test_writes_and_network_from_the_worker_reach_nothing(today, listener):
    before = tree_hash(today["work"])
    src = (f"open('data.csv', 'w').write('changed')\nopen('new.txt', 'w').write('x')\n"
           f"import socket\ns = socket.create_connection(('127.0.0.1', {listener.port}), timeout=2)\n"
           f"s.sendall(b'hello from transplant')\nX.shape")
    v = _check(today, src)
    assert v.mode == "transplant" and v.verdict in ("blocked", "crash"), v
    assert v.verdict != "crash" or v.ename not in ("ValueError", "TypeError"), v
    assert tree_hash(today["work"]) == before
    assert not any(b"transplant" in r for r in listener.received), listener.received


def test_no_process_left_after_a_timeout(today):
    v = _check(today, "import time\nwhile True:\n    time.sleep(0.01)", budget_s=2.0)
    assert v.verdict == "timeout", v
    assert v.pid is not None

    def parent(pid: int) -> int:
        try:
            return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return 0

    def ours(pid: int, idle: set[int]) -> bool:
        """Started by this test process (other xdist workers run transplants too), not an idle warm one."""
        for _ in range(4):
            if pid in idle:
                return False
            pid = parent(pid)
            if pid == os.getpid():
                return True
        return False

    def workers() -> set[int]:  # the worker and its layered child (same command line), idle warm ones aside
        idle = {w.proc.pid for w in POOL.idle.values()}
        out = set()
        for p in Path("/proc").iterdir():
            try:
                if p.name.isdigit() and b"_crane_boot" in (p / "cmdline").read_bytes() and ours(int(p.name), idle):
                    if " Z " not in (p / "stat").read_text().split(")", 1)[1][:3]:
                        out.add(int(p.name))
            except OSError:
                pass
        return out

    deadline = time.monotonic() + 10
    while workers() and time.monotonic() < deadline:
        time.sleep(0.1)  # the reaper thread ends the worker right after the verdict
    assert not workers()


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_transplant_on_ipython_8_and_9_kernels_leaves_them_unchanged(kernel_env, tmp_path):
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        setup = ("import numpy as np, random\narr = np.arange(12).reshape(3, 4)\nclass Box:\n    def __init__(self, v):\n"
                 "        self.v = v\n    def total(self):\n        return self.v.sum() + offset\noffset = 1\nbox = Box(arr)\n"
                 "get_ipython().events.register('post_run_cell', lambda result: None)\nnp.random.seed(3)\nrandom.seed(3)")
        assert conn.run_cell(setup).status == "ok"
        with Untouched(conn) as watch:
            bad = transplant(conn, "print(box.total())\narr['no']", 30.0)
            good = transplant(conn, "np.random.rand(2)\nrandom.random()\nbox.total()", 30.0)
        assert watch.unchanged, (watch.outputs, watch.changes())
        assert bad.verdict == "crash" and bad.ename == "IndexError" and bad.line == 2 and "67" in bad.stdout, bad
        assert good.verdict == "no-crash" and "67" in good.displays[-1].text, good
        assert good.mode == "transplant" and good.transplant is not None and good.transplant.confinement == "layered", good
    finally:
        kernel.shutdown()


TORCH = "import torch\ntx = torch.ones(3, 4)"


def test_torch_cuda_requests_run_on_the_cpu(today):
    """The module's last test on `today`: torch loaded from here on (every later worker of the kernel imports it)."""
    assert _real(today, TORCH).status == "ok"
    good = "t = tx.cuda()\nu = torch.ones(4, 2, device='cuda')\n(t @ u.to('cuda:0')).shape"
    v = _check(today, good, direct=True, map_devices=True)
    assert v.verdict == "no-crash" and "torch.Size([3, 2])" in v.displays[-1].text, v
    assert v.transplant.devices_mapped and "mapped to the CPU" in v.how(), v.how()
    bad = "t = tx.cuda()\nt @ torch.ones(3, 2, device='cuda')"
    v = _check(today, bad, direct=True, map_devices=True)
    real = _real(today, "tx @ torch.ones(3, 2)")  # the same error on the CPU
    assert real.status == "error" and v.verdict == "crash" and v.ename == real.ename == "RuntimeError", (v, real)
