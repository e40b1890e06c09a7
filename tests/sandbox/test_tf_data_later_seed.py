"""A tf.data shuffle made with an op seed before the notebook set TensorFlow's global seed is copied exactly
(issue 42 part 2, benchmarks/dl-fresh `tf_data_unbatched_fit`).

The pipeline `from_tensor_slices(...).shuffle(512, seed=0)...` is made first, then `keras.utils.set_random_seed(3)`
sets the global seed. The shuffle's seeds are (TensorFlow's default graph seed, 0): they do not come from the global
seed. The copy refused it ("a shuffle seeded from TensorFlow's global seed") because a global seed is set now, and
both twins were `unavailable`. A one-run copy's worker makes the pipelines again before it applies the kernel's
global seed, so with none, as the kernel made this one: the copy's elements come in the kernel's order. A shuffle
made after the global seed was set is still refused, naming it."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import require_today_python
from .marked_runs import speculate_unmarked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import numpy as np, tensorflow as tf, keras
X = np.arange(24, dtype='float32').reshape(12, 2)
early = tf.data.Dataset.from_tensor_slices(X).shuffle(12, seed=0).batch(4)
keras.utils.set_random_seed(3)
late = tf.data.Dataset.from_tensor_slices(X).shuffle(12).batch(4)
"""
CELL = "print([b[:, 0].tolist() for b in early.as_numpy_iterator()])"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("tf-later-seed"), python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=300)
    assert run.status == "ok", run
    yield k.connection, str(tmp_path_factory.mktemp("tf-later-marker") / "never.txt")
    k.shutdown()


def test_a_shuffle_seeded_before_the_global_seed_is_copied_in_the_kernels_order(kernel):
    v = speculate_unmarked(kernel, CELL)
    assert v.mode == "transplant" and v.verdict == "no-crash", (v.verdict, v.reason)
    real = kernel[0].run_cell(CELL, timeout=120)
    assert real.status == "ok" and v.stdout.strip() == real.stdout.strip(), (v.stdout, real.stdout)
    v = speculate_unmarked(kernel, "print(len(list(late)))")
    assert v.verdict == "unavailable" and "`late`" in (v.reason or "") and "global seed" in v.reason, v
