"""Transplant, kernel side and worker side: which files are the interpreter's installation (its prefixes and
their stdlib/site-packages) rather than the user's own. Library modules are imported again in the worker before
confinement; a class of the user's own (the notebook, or a module outside those places) is user code, which the
export never runs in the kernel."""

from __future__ import annotations

import os
import sys
from typing import Any

_ROOTS: list = []


def library_roots() -> tuple:
    if not _ROOTS:
        import sysconfig
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
        paths = sysconfig.get_paths()
        roots.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k))
        _ROOTS.append(tuple(os.path.realpath(r).rstrip("/") + "/" for r in roots if r))
    return _ROOTS[0]


def is_library(path: Any) -> bool:
    return bool(path) and os.path.realpath(str(path)).startswith(library_roots())
