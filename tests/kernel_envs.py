"""The kernel environments the tests run kernels in: the daemon's own (the bench pins: IPython 8.23, numpy 1.26,
pandas 2.1) and today's (envs/kernel-today.txt: IPython 9, ipykernel 7, numpy 2, pandas 3, TensorFlow/Keras 3,
JAX, polars, xgboost, lightgbm), built by `make kernel-today` (which `make test` runs first).

`KERNEL_ENVS` parametrises a test over both: `@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)` and
`kernel_python(kernel_env)` gives the interpreter to start the kernel with. Under CI the today environment must
exist (a missing one fails the test); elsewhere a test that needs it is skipped with the command that builds it.

`PYTHON_KERNELS` ("3.11", "3.12", "3.13") and `python_kernel(version)`: a small kernel environment per Python
(`make kernel-pythons`, envs/kernel-py3XX.txt) for the tests that run CRANE on each supported interpreter
(tests/kernel/test_kernel_pythons.py); a version the machine has no interpreter of is skipped, saying so.
`supported_interpreters()`: every supported Python found here (envs/find_python.sh), kernels or not.
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


# -- interpreters ----------------------------------------------------------------------------------------------
# The Pythons CRANE supports (pyproject.toml: requires-python >= 3.10), free-threaded builds ("3.13t") included.
SUPPORTED_VERSIONS = ["3.10", "3.11", "3.12", "3.13", "3.14", "3.13t", "3.14t"]
# The kernels of each Python the tests run through CRANE: build/kernel-py3XX (`make kernel-pythons`,
# envs/kernel-py3XX.txt), one per version the machine has an interpreter of.
PYTHON_KERNELS = ["3.11", "3.12", "3.13"]


def find_interpreter(version: str) -> str | None:
    """An interpreter of `version` ("3.13", "3.13t") on this machine (envs/find_python.sh), or None."""
    import subprocess

    out = subprocess.run([str(ROOT / "envs" / "find_python.sh"), version], capture_output=True, text=True,
                         timeout=120)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def supported_interpreters() -> list[str]:
    """Every supported interpreter this machine has (the running one among them)."""
    found = [find_interpreter(version) for version in SUPPORTED_VERSIONS]
    return [exe for exe in found if exe]


def python_kernel(version: str) -> str:
    """The interpreter of the kernel environment for Python `version` (one of PYTHON_KERNELS), or skip: where the
    machine has no such interpreter, and where the environment is not built (under CI that fails)."""
    link = ROOT / "build" / f"kernel-py{version.replace('.', '')}"
    exe = link / "bin" / "python"
    if exe.exists() and (link / ".complete").exists():
        return str(exe)
    if find_interpreter(version) is None:
        pytest.skip(f"no Python {version} interpreter on this machine (envs/find_python.sh {version}): its kernels "
                    "are not tested")
    message = f"the Python {version} kernel environment is not built: run `make kernel-pythons`"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
