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


# -- interpreters ----------------------------------------------------------------------------------------------
# The Pythons CRANE supports (pyproject.toml: requires-python >= 3.10), free-threaded builds ("3.13t") included.
SUPPORTED_VERSIONS = ["3.10", "3.11", "3.12", "3.13", "3.14", "3.13t", "3.14t"]


def _runs(exe: str, version: str) -> bool:
    """`exe` starts and is that version (a pyenv shim of a version not selected exists but fails)."""
    import subprocess

    probe = "import sys, sysconfig; print('%d.%d%s' % (*sys.version_info[:2], 't' if sysconfig.get_config_var('Py_GIL_DISABLED') else ''))"
    try:
        out = subprocess.run([exe, "-I", "-c", probe], capture_output=True, text=True, timeout=60)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def find_interpreter(version: str) -> str | None:
    """An interpreter of `version` ("3.13", "3.13t") on this machine: CRANE_PYTHON<version> (dots dropped, e.g.
    CRANE_PYTHON313), pyenv's versions, then `python<version>` on PATH; None where there is none."""
    import glob
    import shutil

    override = os.environ.get(f"CRANE_PYTHON{version.replace('.', '')}")
    candidates = [override] if override else []
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(f"{pyenv}/versions/{version.rstrip('t')}.*/bin/python{version}"), reverse=True)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    for exe in candidates:
        if _runs(exe, version):
            return exe
    return None


def supported_interpreters() -> list[str]:
    """Every supported interpreter this machine has (the running one among them)."""
    found = [find_interpreter(version) for version in SUPPORTED_VERSIONS]
    return [exe for exe in found if exe]
