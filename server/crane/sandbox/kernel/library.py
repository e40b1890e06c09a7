"""Transplant, kernel side and worker side: which files are the interpreter's installation (its prefixes and
their stdlib/site-packages) rather than the user's own. Library modules are imported again in the worker before
confinement; a class of the user's own (the notebook, or a module outside those places) is user code, which the
export never runs in the kernel.

The roots and `os.path.realpath` are taken when the module is installed (nothing is imported or looked up on a
shared module at call time: the notebook may have replaced `os.path.realpath` or `builtins.__import__` since).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any

_REALPATH = os.path.realpath
_LIB_ROOTS: list = []
_SEEN: dict = {}  # path -> answer (a code object's file is asked about again and again)


def library_roots() -> tuple:
    if not _LIB_ROOTS:
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
        paths = sysconfig.get_paths()
        roots.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k))
        _LIB_ROOTS.append(tuple(_REALPATH(r).rstrip("/") + "/" for r in roots if r))
    return _LIB_ROOTS[0]


library_roots()  # at install


def is_library(path: Any) -> bool:
    if type(path) is not str or not path:
        return False
    hit = _SEEN.get(path)
    if hit is None:
        hit = _SEEN[path] = _REALPATH(path).startswith(library_roots())
        if len(_SEEN) > 100_000:
            _SEEN.clear()
    return hit
