"""Issue 42: TensorFlow's global `tf.random.Generator` (`tf.random.get_global_generator()`) is carried like its
global seed (shared/carry.py: its algorithm and state read by TensorFlow's own properties in the kernel, applied and
read back in the worker, unequal -> "likely" naming `tf`): a cell drawing from it in the copy draws the kernel's next
numbers, where a fresh worker's generator (seeded at random) gave a certain false crash. A kernel of today's
environment; the kernel is unchanged and runs nothing of the notebook's (marked_runs)."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import kernel_state

from ..kernel_envs import require_today_python
from .marked_runs import speculate_unmarked as _check

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import tensorflow as tf
g = tf.random.get_global_generator()
g.reset_from_seed(5)
g.normal([3])
# the next draw, from a copy of the generator's state (the kernel's own generator does not move)
nxt = float(tf.random.Generator.from_state(g.state.numpy(), g.algorithm).normal([1])[0])
"""
CELL = "v = float(tf.random.get_global_generator().normal([1])[0])\nassert v == nxt, (v, nxt)\nprint(v)"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("tf-generator"), python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=300)
    assert run.status == "ok", run
    yield k.connection, str(tmp_path_factory.mktemp("tf-generator-marker") / "never.txt")
    k.shutdown()


def test_the_global_generator_draws_the_kernels_next_numbers_in_the_copy(kernel):
    v = _check(kernel, CELL)
    assert v.mode == "transplant" and v.verdict == "no-crash", (v.reason, v.how())
    before = kernel_state(kernel[0])["rng"]
    real = kernel[0].run_cell(CELL, timeout=120)  # (last: it moves the kernel's generator)
    assert real.status == "ok" and v.stdout.strip() == real.stdout.strip(), (v.stdout, real)
    # the untouched fingerprint sees the generator (a CRANE run that moved it would be caught)
    after = kernel_state(kernel[0])["rng"]
    assert "tensorflow" in before and before["tensorflow"] != after["tensorflow"], (before, after)
