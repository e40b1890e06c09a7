"""Issue 45: a warm transplant worker's heap is frozen out of the garbage collector's passes before its run
(worker/warmup.py), and that changes nothing a cell can see.

- In today's interpreter (TF 2.21 / Keras 3), `warm_up()` loaded from its source file as the worker's bundle holds
  it: it runs, the heap is frozen, and the `random`/numpy global RNG states, Keras's global state (the layer-name
  counters, the name scopes, ...) and settings, and TensorFlow's global seed and its operation-seed generator are
  as they were.
- End to end on a real kernel of today's environment that imported TensorFlow/Keras (so every copied run takes a
  worker): a prewarmed worker's heap is frozen in the run (none in a cold worker), and a cell that reads what a
  worker's start could change — the next draws of `random`, numpy and TensorFlow, a new layer's automatic name,
  Keras's global state's keys — prints the same in that warm worker as in a cold one, and its random draws are
  the kernel's own; the kernel is untouched. Ready and idle, the prewarmed worker has no thread of TensorFlow's
  runtime (`tf_*`, started by its first op): nothing of TensorFlow ran before the run's confinement (a warm-up that
  did hung a layered run's `model.fit`: worker/warmup.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.prewarm import prewarm_kernel
from crane.sandbox.transplant import POOL

from ..kernel_envs import require_today_python

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")

WARMUP = Path(__file__).resolve().parents[2] / "server" / "crane" / "sandbox" / "worker" / "warmup.py"
READY_S = 300.0  # a generous bound on a worker's TensorFlow import on a loaded machine (its ready file ends it)

PROBE = """
import importlib.util, json, random, sys
import numpy as np, tensorflow as tf, keras
from keras.src.backend.common import global_state as gs
spec = importlib.util.spec_from_file_location("_warmup_under_test", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

random.seed(3); np.random.seed(4); tf.random.set_seed(5)
_ = tf.random.uniform((2,))                  # TensorFlow's operation-seed generator advanced
first = keras.layers.Dense(2).name           # a layer-name counter in Keras's global state

def seen():
    ctx = sys.modules["tensorflow.python.eager.context"].context()
    return {"random": repr(random.getstate()), "numpy": repr(np.random.get_state()),
            "tf": [ctx._seed, repr(ctx._rng.getstate())],
            "state": sorted(k for k in vars(gs.GLOBAL_STATE_TRACKER) if not k.startswith("saving_attr_skipset_")),
            "uids": repr(dict(gs.get_global_attribute("object_name_uids") or {})),
            "settings": repr(sorted(vars(gs.GLOBAL_SETTINGS_TRACKER).items()))}

before = seen()
done = mod.warm_up()
after = seen()
print(json.dumps({"done": sorted(done), "frozen": __import__("gc").get_freeze_count() > 0, "first": first, "next": keras.layers.Dense(2).name,
                  "same": {k: before[k] == after[k] for k in before}}))
"""


def test_the_warm_up_runs_whole_and_puts_back_what_a_cell_could_see(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([require_today_python(), "-c", PROBE, str(WARMUP)], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["done"] == ["gc"] and got["frozen"], got  # it ran, the heap frozen
    assert got["same"] == {k: True for k in got["same"]}, got
    assert (got["first"], got["next"]) == ("dense", "dense_1"), got  # the counter as if nothing had run


SETUP = """
import random, numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(7)
_ = tf.random.uniform((2,))
X = np.random.rand(4, 3).astype("float32")
"""

# what a worker's start could change, as a cell sees it
EXPR = ("(random.random(), float(np.random.rand()), round(float(np.asarray(tf.random.uniform((2,))).sum()), 6), "
        "round(float(np.asarray(keras.random.normal((2,))).sum()), 6), keras.layers.Dense(2).name, X.shape, "
        "sorted(k for k in vars(__import__('keras.src.backend.common.global_state', fromlist=['x'])"
        ".GLOBAL_STATE_TRACKER) if not k.startswith('saving_attr_skipset_')))")
WARMED = "__import__('gc').get_freeze_count() > 0"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("warmup"), python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=300)
    assert run.status == "ok", run
    yield k.connection
    POOL.shutdown()
    k.shutdown()


def _in_copy(conn, warm: bool) -> tuple:
    cell = f"print(repr({EXPR}))\nprint({WARMED})"
    options = SandboxOptions(warm_workers=warm)
    with Untouched(conn) as watch:
        v = speculate(conn, cell, 120.0, sandbox=options)
    assert watch.unchanged, (watch.changes(), v)
    assert v.mode == "transplant" and v.verdict == "no-crash" and v.transplant is not None, (v.reason, v.how())
    assert v.transplant.warm is warm, v.how()
    seen, warmed = v.stdout.strip().splitlines()
    return seen, warmed


def _thread_names(pid: int) -> list[str]:
    """The names of a process's threads (/proc: TensorFlow names its runtime's threads `tf_...`)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.append(Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip())
        except OSError:
            pass  # (a thread that ended meanwhile)
    return out


def test_a_warm_worker_sees_what_a_cold_one_sees(kernel):
    POOL.shutdown()
    cold, cold_warmed = _in_copy(kernel, warm=False)
    assert cold_warmed == "False"  # (a frozen heap is the warm-up's alone in such a worker)
    done = prewarm_kernel(kernel, SandboxOptions(warm_workers=True))  # (or the worker refilled after that run)
    assert done.kernel is not None and POOL.workers_of(done.kernel), done.why
    exe = kernel.evaluate("__import__('sys').executable")
    assert POOL.wait_ready(exe, READY_S), [w.log_tail() for w in POOL.workers_of(done.kernel)]
    for w in POOL.workers_of(done.kernel):  # ready and idle: TensorFlow's runtime not started before the run's
        names = _thread_names(w.proc.pid)   # confinement (its first op starts tf_Compute/tf_graph_runner threads)
        assert names and not [n for n in names if n.startswith("tf_")], names
    warm, warmed = _in_copy(kernel, warm=True)
    assert warmed == "True", f"the prewarmed worker's heap is not frozen: {warmed}"
    assert warm == cold, (warm, cold)
    real = kernel.run_cell(f"print(repr({EXPR}))", timeout=120)  # the copies ran first: the kernel's next draws
    assert real.status == "ok", real
    assert real.stdout.strip().split(", 'dense")[0] == cold.split(", 'dense")[0], (real.stdout, cold)
