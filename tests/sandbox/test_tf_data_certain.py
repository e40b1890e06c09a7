"""Issue 42: a TensorFlow crash over a tf.data pipeline the copy rebuilt exactly (shared/tf_data.py: the same
tf.data calls from what each stage recorded) is certain — the pipeline is the kernel's, and TensorFlow's settings
are carried and compared — while the same crash over a pipeline with a stage made again only approximately (a
shuffle without any seed: random in the kernel and in the copy) stays "likely". A kernel of today's environment
(TF 2.21); the kernel is unchanged and runs nothing of the notebook's (marked_runs)."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import require_today_python
from .marked_runs import speculate_unmarked as _check

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import os, numpy as np, tensorflow as tf
X = np.arange(48, dtype="float32").reshape(8, 6)
exact = tf.data.Dataset.from_tensor_slices(X).map(lambda r: r * 2.0).batch(4).prefetch(1)
approx = tf.data.Dataset.from_tensor_slices(X).shuffle(8).batch(4)
"""
# a crash inside TensorFlow's frames: a batch of 24 values reshaped to 9
CRASH = "for b in {}:\n    tf.reshape(b, (3, 3))"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("tf-data-certain"), python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=300)
    assert run.status == "ok", run
    yield k.connection, str(tmp_path_factory.mktemp("tf-data-certain-marker") / "never.txt")
    k.shutdown()


@pytest.mark.parametrize(("name", "certain"), [("exact", True), ("approx", False)])
def test_a_crash_over_a_rebuilt_pipeline_is_certain_only_when_every_stage_is_exact(kernel, name, certain):
    cell = CRASH.format(name)
    v = _check(kernel, cell)
    real = kernel[0].run_cell(cell, timeout=120)
    assert real.status == "error", real
    assert v.mode == "transplant" and v.verdict == "crash" and v.ename == real.ename, (v.reason, v.how(), real)
    assert v.certain is certain, v.how()
