"""The kernel environments the tests run kernels in: the daemon's own (the bench pins: IPython 8.23, numpy 1.26,
pandas 2.1) and today's (envs/kernel-today.txt: IPython 9, ipykernel 7, numpy 2, pandas 3, TensorFlow/Keras 3,
JAX, polars, xgboost, lightgbm), built by `make kernel-today` (which `make test` runs first).

`KERNEL_ENVS` parametrises a test over both: `@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)` and
`kernel_python(kernel_env)` gives the interpreter to start the kernel with. Under CI the today environment must
exist (a missing one fails the test); elsewhere a test that needs it is skipped with the command that builds it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TODAY_LINK = ROOT / "build" / "kernel-today"

# ids: the IPython major version of each environment (what changed most for the sacred-kernel guarantees)
KERNEL_ENVS = ["ipython8", "ipython9"]


def today_python() -> str | None:
    """The today environment's interpreter (CRANE_TODAY_PYTHON overrides), or None where it is not built."""
    override = os.environ.get("CRANE_TODAY_PYTHON")
    if override:
        return override
    exe = TODAY_LINK / "bin" / "python"
    return str(exe) if exe.exists() and (TODAY_LINK / ".complete").exists() else None


def require_today_python() -> str:
    """The today interpreter, or skip (fail under CI) with the command that builds it."""
    exe = today_python()
    if exe is None:
        message = "the today kernel environment is not built: run `make kernel-today`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return exe


def kernel_python(kernel_env: str) -> str:
    """The interpreter for a kernel of `kernel_env` (one of KERNEL_ENVS)."""
    if kernel_env == "ipython8":
        return sys.executable
    if kernel_env == "ipython9":
        return require_today_python()
    raise ValueError(f"unknown kernel environment {kernel_env!r}")
