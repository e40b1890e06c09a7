"""A fork child's refusal reaches the worker whole, however long its text (worker/portable._tell_parent): a pool's
task refused a write to a long path of non-ASCII names is the run's refusal, named as the child's — never "the cell
wrote into CRANE's result channel", which a notice cut to fit the pipe's atomic write (its JSON no longer parsed)
made of an honest cell's refusal. Under `--sandbox portable` where the Linux layer holds the worker (pools run
inside the run); the kernel is untouched, nothing is written."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.worker.linux import linux_layer_available
from crane.sandbox.worker.portable import NOTICES_FORGED

from .conftest import tree_hash

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels"),
              pytest.mark.skipif(linux_layer_available() is not None,
                                 reason=f"pools run only under the Linux layer: {linux_layer_available()}")]

SETUP = """
def write_to(path):
    with open(path, "w") as f:
        f.write("pwned")
"""


@pytest.fixture(scope="module")
def kernel(workdir):
    k = start_kernel(workdir)
    assert k.connection.run_cell(SETUP, timeout=120).status == "ok"
    yield k.connection
    k.shutdown()


# names whose JSON escapes (6 or 12 bytes a character) outgrow the notice's room long before its 1000 characters
@pytest.mark.parametrize("name", ["数据" * 40, "🙂" * 60, "é" * 120, "a" * 200], ids=["cjk", "emoji", "latin", "ascii"])
def test_a_childs_refusal_of_a_long_path_is_the_runs(kernel, workdir, outside, name):
    target = os.path.join(str(outside), *([name] * 6), "x.txt")
    cell = f"import multiprocessing as mp\nwith mp.Pool(2) as p:\n    p.map(write_to, [{target!r}] * 2)"
    before = (tree_hash(workdir), tree_hash(outside))
    with Untouched(kernel) as watch:
        v = speculate(kernel, cell, 60.0, sandbox=SandboxOptions(confinement="portable"))
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert (tree_hash(workdir), tree_hash(outside)) == before
    assert v.verdict == "blocked" and v.mode == "portable", v
    assert NOTICES_FORGED not in (v.reason or ""), v  # an honest cell's refusal, not a forged notice
    assert "writing a file outside the cell's working folder" in (v.reason or ""), v
    assert any("a process the cell started" in d for d in v.denied), v  # the child's, not the worker's
