"""Issue 42 (h6): finalizers on the shapes the copy's tail did not read — a class a cell defined, and an exact set
held inside another container — run in the copy as in the kernel (OS transplant and portable one-shot runs;
IPython 8 and 9).

`weakref.finalize(K, os._exit, 0)` on a notebook class: the cell's `del K; gc.collect()` frees the class in the kernel
(a class is in reference cycles of its own: only the collector frees it) and the finalizer ends it (the fork path:
`crash DeadKernelError`). The copy's tail left classes out (`no-crash`, certain). A finalizer on a set held in a
list (`sn = [set()]`, `weakref.finalize(sn[0], ...)`): the cell's `del sn` frees both in the kernel; the pickler
never hands a builtin container to the tail, which took only sets copied by name (`no-crash`, certain). Now a class
of `__main__` that is weakly referenced is read like any object (kernel/finalizers._fz_main_class), and sets that
a live `weakref.finalize` is registered on are found through the registry and kept where the namespace's pickle
holds them (`FinalizerWatch._registered_sets`). Each run leaves the kernel unchanged and its finalizers alive."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

PATHS = {
    "transplant": lambda conn, src: transplant(conn, src, 60.0),
    "portable": lambda conn, src: speculate(conn, src, 60.0, sandbox=SandboxOptions(confinement="portable")),
}
SETUP = """
import sys, types
sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: every run is a copy
import os, gc, weakref
class K:
    pass
f_k = weakref.finalize(K, os._exit, 0)
sn = [set([1, 2])]
f_sn = weakref.finalize(sn[0], os._exit, 0)
fz = {'a': frozenset([3])}
f_fz = weakref.finalize(fz['a'], os._exit, 0)
"""
ALIVE = "f_k.alive and f_sn.alive and f_fz.alive"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp(f"h6-shapes-{request.param}"), python=kernel_python(request.param))
    c = kernel.connection
    assert c.run_cell(SETUP, timeout=300).status == "ok"
    yield c
    kernel.shutdown()


def _run(conn, path: str, cell: str):
    with Untouched(conn) as watch:
        v = PATHS[path](conn, cell)
    assert watch.unchanged, (watch.changes(), watch.outputs, v)
    assert conn.run_cell(f"assert {ALIVE}").status == "ok"  # nothing ran in the kernel
    return v


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("cell", ["del K\ngc.collect()", "del sn", "del fz"])
def test_a_finalizer_on_a_class_or_a_nested_set_ends_the_copy(conn, path, cell):
    v = _run(conn, path, cell)
    # (before: no-crash, certain — the tail never read a class's or a nested set's finalizer)
    assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), (v.verdict, v.ename, v.reason, v.stdout)


@pytest.mark.parametrize("path", list(PATHS))
def test_rebinding_a_class_with_a_finalizer_ends_the_copy(conn, path):
    """`K = 1; gc.collect()` (K not read: copied because its value has a finalizer, kernel/finalizers.rebound): the
    copy ends as the kernel does, on both paths, also after earlier copies that read K (fixD, issue 42: each export's
    proof, held in cycles by its pickler classes until the kernel's next collection, kept K referenced; the next
    export counted that as the kernel's and pinned the copy: no-crash, certain — h6 saw it on the OS path only
    because of the order the runs came in)."""
    for before in PATHS:  # (the state h6's report came from: copies that read K just before)
        assert _run(conn, before, "k = K()").verdict == "no-crash"
    v = _run(conn, path, "K = 1\ngc.collect()")
    assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), (v.verdict, v.ename, v.reason, v.stdout)


@pytest.mark.parametrize("path", list(PATHS))
def test_an_export_leaves_no_reference_to_the_notebook_s_class(conn, path):
    """After a copy that read K, the kernel holds K exactly as often as before (fixD): the export's proof caches are
    emptied when it returns, not when the kernel's collector next runs (before: one more reference per export until
    then, so the kernel's own `del` of a notebook object the caches held freed it only at the next collection)."""
    count = "sys.getrefcount(K)"
    before = conn.evaluate(count)
    for _ in range(2):
        assert _run(conn, path, "k = K()\nn = len(sn[0])").verdict == "no-crash"
        assert conn.evaluate(count) == before


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("cell", ["k = K()\nn = len(sn[0]) + len(fz['a'])", "del K"])
def test_a_class_or_a_nested_set_kept_alive_runs_nothing(conn, path, cell):
    """The same objects not freed (`del K` without the collector: a class is in cycles of its own) run nothing."""
    v = _run(conn, path, cell)
    assert (v.verdict, v.certain) == ("no-crash", True), (v.verdict, v.ename, v.reason)


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_install_keeps_no_class_of_the_notebook_alive(kernel_env, tmp_path):
    """CRANE's kernel side, installed at the first copy, holds no class of the notebook's: kernel/pristine.py's install
    loop over `object.__subclasses__()` left its last one (the newest class: one a cell just defined) in the module's
    globals, so the kernel's own `del K; gc.collect()` no longer freed it nor ran its finalizer (and the copy,
    counting that reference as the kernel's, pinned its copy: no-crash)."""
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        c = kernel.connection
        setup = ("import sys, types, gc, weakref\nsys.modules.setdefault('jax', types.ModuleType('jax'))\n"
                 "ran = []\nclass Newest:\n    pass\nf_newest = weakref.finalize(Newest, ran.append, 1)")
        assert c.run_cell(setup, timeout=300).status == "ok"
        v = transplant(c, "x = 1", 60.0)  # (the first copy: the kernel side is installed now)
        assert v.verdict == "no-crash", (v.verdict, v.reason)
        assert c.run_cell("del Newest\ngc.collect()").status == "ok"
        assert c.evaluate("ran") == [1]  # (before: [] — `_crane_transplant._pr_k` held the class)
    finally:
        kernel.shutdown()
