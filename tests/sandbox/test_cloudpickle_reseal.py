"""Issue 42 (review M1): CRANE's own change to its private cloudpickle at the first export (its builtins, private
stdlib copies, `_walk_global_ops`: kernel/pickling._cloudpickle) seals the module again in that request, and the
export's reply carries the new seal's addresses (`ExportReply.cp_seal`), which the daemon calls it by from then on:
the next export uses the module as it is (no install), and a function the notebook rebinds in it after that is
never used (the module is installed afresh). Real kernels of both environments, on the transplant path."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.private_module import ModuleClient
from crane.sandbox.transplant import CLOUDPICKLE_MODULE, transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sacred import kernel_state

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import sys, types
sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: transplant path
HITS = []
def sq(x):
    return x * x
"""
CP = "sys.modules['_crane_cloudpickle']"


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_export_reseals_cranes_cloudpickle_and_the_daemon_calls_it_by_the_new_seal(tmp_path, kernel_env):
    with start_kernel(tmp_path, python=kernel_python(kernel_env)) as kernel:
        conn = kernel.connection
        assert conn.run_cell(SETUP, timeout=60).status == "ok"
        cp = ModuleClient(conn, CLOUDPICKLE_MODULE)
        cp.ensure_installed(timeout=60)
        installed, module = cp.address, conn.evaluate(f"id({CP})")
        v = transplant(conn, "print(sq(3))", 60.0)
        assert v.verdict == "no-crash" and v.stdout.strip() == "9", v
        resealed = cp.address
        assert resealed is not None and resealed != installed  # (adopted from the export's reply)
        assert conn.evaluate(f"id({CP})") == module  # (the same module: not installed again)
        v = transplant(conn, "print(sq(4))", 60.0)
        assert v.verdict == "no-crash" and v.stdout.strip() == "16", v
        assert (cp.address, conn.evaluate(f"id({CP})")) == (resealed, module)  # (called by that seal, as it is)
        # the notebook rebinds a function of the re-sealed module: the next export installs it afresh
        assert conn.run_cell(f"_m = {CP}\n_walk = _m._walk_global_ops\n"
                             "_m._walk_global_ops = lambda code: (HITS.append('walk'), _walk(code))[1]\n"
                             "_m = None", timeout=60).status == "ok"
        before = kernel_state(conn)
        v = transplant(conn, "print(sq(5))", 60.0)
        assert v.verdict == "no-crash" and v.stdout.strip() == "25", v
        assert kernel_state(conn) == before
        assert conn.evaluate("HITS") == []
        assert conn.evaluate(f"id({CP})") != module
        assert cp.address not in (installed, resealed)
