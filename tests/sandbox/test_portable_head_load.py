"""What a head keeps between runs so that the next run's load is short (worker/head.py, issues 40/45): the library
modules a run's state load imported (unpickling a fitted scikit-learn model imports sklearn.linear_model,
sklearn.metrics, scipy.optimize, ...) are imported by the head before its next run, read from the run's setup line
(`loaded_by`); nothing the cell itself imported ever is; the head's objects are frozen out of the garbage
collector's passes before each fork (`worker/warmup.freeze_heap`), while the run's own garbage is still collected. Verdicts stay the
kernel's: an honest cell passes, a crashing one crashes. Real kernels (IPython 8 and 9), the real daemon-side
transplant, the head's process read in /proc; no mocks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.transplant import POOL
from crane.sandbox.worker.head import loaded_by
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

SETUP = ("import numpy as np\nfrom sklearn.linear_model import LogisticRegression\n"
         "rng = np.random.default_rng(0)\nX = rng.random((200, 4))\ny = (X[:, 0] > 0.5).astype(int)\n"
         "clf = LogisticRegression().fit(X, y)\n")
# an extension module of each: the first is imported by unpickling `clf` (and by the kernel), the second only by the
# first cell (the kernel never imported it)
LOADED, CELL_ONLY = "sklearn/linear_model/_cd_fast", "sklearn/tree/_tree"
GC_CHECK = ("import gc, weakref\nclass _Cyc:\n    pass\n_o = _Cyc()\n_o.me = _o\n_r = weakref.ref(_o)\ndel _o\n"
            "gc.collect()\nprint(gc.get_freeze_count() > 0, _r() is None)\n")


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(linux_layer_available() is not None, reason="heads serve runs under Landlock")
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_head_imports_what_the_load_imported_and_nothing_the_cell_did(kernel_env, tmp_path, monkeypatch):
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell(SETUP).status == "ok"
        first = speculate(conn, "import sklearn.tree\nprint(int(clf.predict(X).sum()) > 0)", 120.0, sandbox=opts)
        assert (first.verdict, first.mode, first.stdout.strip()) == ("no-crash", "portable", "True"), first
        head = first.pid
        assert head is not None
        # the head reads the next request only once it has imported what the first run's load did: after the second
        # verdict its process holds the model's modules (mapped extension modules), never the cell's own import
        second = speculate(conn, "p = clf.predict_proba(X)[:, 1]\nprint(round(float(p.mean()), 6))\n" + GC_CHECK,
                           120.0, sandbox=opts)
        assert (second.verdict, second.pid) == ("no-crash", head), second
        assert second.transplant is not None and second.transplant.warm and "landlock" in second.transplant.layers
        expected = conn.evaluate("round(float(clf.predict_proba(X)[:, 1].mean()), 6)")
        # the head's objects are frozen out of the collector's passes; the run's own cyclic garbage is collected
        assert second.stdout.split("\n")[:2] == [str(expected), "True True"], second.stdout
        maps = _maps(head)
        assert LOADED in maps and CELL_ONLY not in maps
        crash = speculate(conn, "clf.predict(X[:, :2])", 120.0, sandbox=opts)  # 2 features for a model of 4
        assert (crash.verdict, crash.ename, crash.pid) == ("crash", "ValueError", head), crash
        assert CELL_ONLY not in _maps(head)
        assert conn.evaluate("'sklearn.tree' in __import__('sys').modules") is False  # the kernel untouched
    finally:
        kernel.shutdown()
        POOL.shutdown()


def _setup_line(**transplant) -> bytes:
    return json.dumps({"event": "setup", "mode": "portable", "transplant": transplant}).encode()


def test_loaded_by_reads_only_the_workers_setup_line():
    confinement = json.dumps({"event": "setup", "mode": "portable", "steps": {}}).encode()
    names = ["numpy.fake_sub", "json.decoder", "pandas._libs", "numpy", "bad name", "os.path", 7, ".rel",
             "numpy.linalg.x"]
    data = b"\n".join([confinement, _setup_line(loaded_modules=names), b'{"verdict": "no-crash"}'])
    tops = ["numpy", "pandas"]
    got = loaded_by(data, tops)
    # submodules of the kernel's packages only (not the standard library's, not a malformed name), not held already
    assert got == [m for m in ("numpy.fake_sub", "pandas._libs", "numpy", "numpy.linalg.x") if m not in sys.modules]
    assert "numpy.fake_sub" in got and "numpy.linalg.x" in got
    # a run whose load failed (its first line is the record) names nothing, nor does any line after it: the cell's
    forged = _setup_line(loaded_modules=["numpy.fake_sub"])
    assert loaded_by(b'{"verdict": "unavailable", "reason": "x"}\n' + forged, tops) == []
    assert loaded_by(b"not json\n" + forged, tops) == []
    assert loaded_by(_setup_line(loaded_modules="numpy.fake_sub"), tops) == []
    assert loaded_by(b"", tops) == []
