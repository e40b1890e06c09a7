"""A head imports, before its next run, the library submodules the kernel holds (issue 45, worker/head.py
`kernel_held`): the kernel's export lists them in env.json (kernel/environment.py `_submodules`), so a cell's first
call in a run does not import what the kernel had already loaded lazily (a fitted model's `predict_proba` on a frame
imports ~20 narwhals/pyarrow modules in a fresh process). Only modules the kernel holds under its own packages, never
what a run's cell imported. Real kernels (IPython 8 and 9), the real daemon-side transplant, the head's process read
in /proc; no mocks."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.transplant import POOL
from crane.sandbox.worker.head import kernel_held
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

# `import sklearn` loads neither: the kernel imports the first itself (a package the head would not hold), the
# second only a run's cell does
HELD, HELD_EXT = "sklearn.svm", "sklearn/svm/_libsvm"
CELL_ONLY, CELL_ONLY_EXT = "sklearn.tree", "sklearn/tree/_tree"


def _mapped(pid: int, ext: str, timeout: float = 180.0) -> bool:
    """Whether the process `pid` maps the extension module `ext` within `timeout` (the head imports after it sent the
    run's frame: waited for as an event, the deadline only bounds a failure)."""
    done = threading.Event()
    while not done.wait(0.1):
        if ext in Path(f"/proc/{pid}/maps").read_text():
            return True
        timeout -= 0.1
        if timeout <= 0:
            return False
    return False


@pytest.mark.skipif(linux_layer_available() is not None, reason="heads serve runs under Landlock")
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_head_imports_the_kernels_submodules_before_its_next_run(kernel_env, tmp_path, monkeypatch):
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell(f"import numpy as np\nimport sklearn\nimport {HELD}\nX = np.ones((4, 2))\n").status == "ok"
        check = f"import sys\nprint({HELD!r} in sys.modules, {CELL_ONLY!r} in sys.modules)\nimport {CELL_ONLY}"
        first = speculate(conn, check, 120.0, sandbox=opts)
        assert (first.verdict, first.mode) == ("no-crash", "portable"), first
        head = first.pid
        assert head is not None
        # after the run, the head imports what the kernel holds under its packages (before: never)
        assert _mapped(head, HELD_EXT), f"the head never imported {HELD}"
        second = speculate(conn, check, 120.0, sandbox=opts)
        assert (second.verdict, second.pid) == ("no-crash", head), second
        assert second.transplant is not None and second.transplant.warm
        # the run starts with the kernel's submodule imported; never with what the last run's cell imported
        assert second.stdout.split("\n")[0] == "True False", second.stdout
        assert CELL_ONLY_EXT not in Path(f"/proc/{head}/maps").read_text()
        assert conn.evaluate(f"{CELL_ONLY!r} in __import__('sys').modules") is False  # the kernel untouched
    finally:
        kernel.shutdown()
        POOL.shutdown()


def test_kernel_held_names_only_submodules_of_the_kernels_packages():
    names = ["numpy.fake_sub", "json.decoder", "pandas._libs", "bad name", "os.path", 7, ".rel", "numpy.linalg.x",
             "numpy..x"]
    got = kernel_held({"submodules": names}, ["numpy", "pandas"])
    # under the kernel's packages, well-formed, not held already (the standard library's and malformed ones never)
    assert got == [m for m in ("numpy.fake_sub", "pandas._libs", "numpy.linalg.x") if m not in sys.modules]
    assert "numpy.fake_sub" in got
    assert kernel_held({"submodules": "numpy.fake_sub"}, ["numpy"]) == []
    assert kernel_held({}, ["numpy"]) == []
