"""A copied set of strings and a cell's `hash()` of a string (red team round 17h, F8): the worker's string hashes
were never the kernel's, so a set rebuilt in the worker iterated in another order (`list(features)` gave other
columns: scikit-learn's "Feature names must be in the same order", certain) and `hash(u) % 10` other buckets.
Now the worker starts with the kernel's `PYTHONHASHSEED` where its environment names one (transplant.worker_env),
and checks its hash of a probe string against the kernel's (`str_hash`, taken in the kernel at install): where
they differ, a cell calling `hash(` gets a likely verdict. A set of strings rebuilt in the worker iterates in
another order even with equal hashes (its slots depend on the order its items came in): a cell that iterates a
copied one where the order shows gets a likely verdict, saying why (worker/main `_hash_missed`,
transplant.state_doubt, sandbox/set_order.py). Kernels started with seed 0 and with a random
seed; IPython 8 and 9; one-shot and session copy paths, the fork path (the kernel's own hashes) as the baseline."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .end_paths import path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

COPY_PATHS = ["transplant", "portable", "transplant session", "portable session"]
HISTORY = ("features = set('feature_%d' % i for i in range(16))\norder = list(features)\nh = hash('user_1')\n"
           "nums = {1, 2, 3}\nbuilt = list({'col_%d' % i for i in range(16)})\n"
           "def ordered():\n    return [f for f in features]\ndef through(f):\n    return f()\n"
           "def has(c):\n    return c in features and c not in nums\ndef count():\n    return len(features)\n"
           "by_id = {id(features): 'features'}\ndef name_of(o):\n    return by_id[id(o)]")
CELLS = {"set-order": "assert list(features) == order", "hash": "assert hash('user_1') == h",
         "built-set": "assert list({'col_%d' % i for i in range(16)}) == built"}


@pytest.fixture(scope="module", params=[(env, seed) for env in KERNEL_ENVS for seed in ("0", "random")],
                ids=lambda p: f"{p[0]}-seed-{p[1]}")
def hk(request, workdir, outside):
    env, seed = request.param
    kernel = start_kernel(workdir, python=kernel_python(env), env={"PYTHONHASHSEED": seed})
    conn = kernel.connection
    assert conn.run_cell(HISTORY, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside, "seed": seed}
    kernel.shutdown()


def _served(sb) -> None:
    assert sb.run("y = len(nums)").verdict == "no-crash"


@pytest.mark.parametrize("path", ["fork", *COPY_PATHS])
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_the_kernels_string_hashes(hk, path, cell):
    v = path_verdict(hk, path, CELLS[cell], _served)
    if path == "fork" or (cell != "set-order" and hk["seed"] == "0"):  # the kernel's hashes: its verdict, certain
        assert (v.verdict, v.certain) == ("no-crash", True), v
    else:  # never certain, and the reason says why (a rebuilt set's order differs even with the kernel's seed)
        assert v.verdict in ("crash", "no-crash") and not v.certain, v
        assert {"hash": "string hashes", "built-set": "a set it builds",
                "set-order": "the set of strings 'features'"}[cell] in (v.reason or ""), v


@pytest.mark.parametrize("path", COPY_PATHS)
def test_a_cell_that_rests_on_no_string_hash_stays_certain(hk, path):
    v = path_verdict(hk, path, "assert len(nums) == 4", _served)
    assert (v.verdict, v.ename, v.certain) == ("crash", "AssertionError", True), v


@pytest.mark.parametrize("path", ["fork", *COPY_PATHS])
def test_a_set_a_notebook_function_iterates_counts_as_the_cells(hk, path):
    """The cell calls a notebook function (through another) that iterates the copied set: never certain on a copy
    path, saying which set (kernel/dynamic_reads `reach_sets`; before, certain either way)."""
    v = path_verdict(hk, path, "assert through(ordered) == order", _served)
    if path == "fork":
        assert (v.verdict, v.certain) == ("no-crash", True), v
    else:
        assert not v.certain and "notebook function" in (v.reason or "") and "'features'" in (v.reason or ""), v


@pytest.mark.parametrize("path", COPY_PATHS)
@pytest.mark.parametrize("cell, verdict", [
    ("assert has('feature_1') and not has('x')", ("no-crash", None)),
    ("assert count() == 17", ("crash", "AssertionError")),
], ids=["membership", "len"])
def test_a_notebook_function_reading_a_set_without_its_order_stays_certain(hk, path, cell, verdict):
    v = path_verdict(hk, path, cell, _served)
    assert (v.verdict, v.ename, v.certain) == (*verdict, True), v


@pytest.mark.parametrize("path", ["fork", *COPY_PATHS])
@pytest.mark.parametrize("cell", ["assert by_id[id(features)] == 'features'", "assert name_of(features) == 'features'"],
                         ids=["cell", "helper"])
def test_object_ids_are_never_certain_in_a_copy(hk, path, cell):
    """Red team round 18, G14: every copied object has another id in the worker (a dict keyed by `id(df)`: a
    certain false KeyError); a cell, or a notebook function it calls, reading `id()` gets a likely verdict."""
    v = path_verdict(hk, path, cell, _served)
    if path == "fork":
        assert (v.verdict, v.certain) == ("no-crash", True), v
    else:
        assert not v.certain and "object ids" in (v.reason or ""), v
