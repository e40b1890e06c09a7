"""Sessions on the copy paths for tests: which sandbox each kind names, and a kernel made to refuse the fork
sandbox for the time of a test (CuPy in `sys.modules`), so that a default session opens as a transplant one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from crane.sandbox.options import SandboxOptions

SESSIONS = {"transplant": None, "portable": SandboxOptions(confinement="portable")}


@contextmanager
def copy_path_kernel(conn: Any, kind: str) -> Iterator[None]:
    """For `kind == "transplant"`: the kernel holds a stand-in `cupy` module (what makes the fork sandbox
    refuse) inside the block, and not after it."""
    if kind == "transplant":
        assert conn.run_cell("import sys, types\nsys.modules.setdefault('cupy', types.ModuleType('cupy'))").status == "ok"
    try:
        yield
    finally:
        if kind == "transplant":
            assert conn.run_cell("sys.modules.pop('cupy', None)\ndel sys, types").status == "ok"
