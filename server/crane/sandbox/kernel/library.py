"""Transplant, kernel side and worker side: which files are the interpreter's installation (its prefixes and
their stdlib/site-packages) rather than the user's own. Library modules are imported again in the worker before
confinement; a class of the user's own (the notebook, or a module outside those places) is user code, which the
export never runs in the kernel.

The roots are found when the module is installed. A path is resolved by `_lb_realpath`, this module's own:
`os.path.realpath` is Python code of `posixpath`/`ntpath` that looks `os.lstat`, `os.path.join`, `os.getcwd`,
`stat.S_ISLNK`, ... up in shared modules each time it runs (the notebook may have replaced any of them since the
install), so it is never called at run time; only the interpreter's C functions (`posix.lstat`, `posix.readlink`,
`posix.getcwd`; `nt._getfullpathname`, `nt._getfinalpathname` on Windows), bound here at install, are.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any

_LB_OS: Any = sys.modules[os.name]  # `posix` or `nt`: the C functions themselves (never `os`'s names, rebindable)
_LB_LSTAT = getattr(_LB_OS, "lstat", None)
_LB_READLINK = getattr(_LB_OS, "readlink", None)
_LB_GETCWD = _LB_OS.getcwd
_LB_FULL = getattr(_LB_OS, "_getfullpathname", None)  # Windows
_LB_FINAL = getattr(_LB_OS, "_getfinalpathname", None)  # Windows
_LB_IFMT, _LB_IFLNK = 0o170000, 0o120000  # stat's S_IFMT mask and S_IFLNK (POSIX values)
_LB_POSIX = os.sep == "/"
_LIB_ROOTS: list = []
_SEEN: dict = {}  # path -> answer (a code object's file is asked about again and again)


def _lb_realpath(path: str) -> str:
    """`os.path.realpath(path)` (not strict) for a str, calling only the C functions bound at install."""
    if not _LB_POSIX or _LB_LSTAT is None or _LB_READLINK is None:
        return _lb_nt_realpath(path)
    # CPython 3.13's posixpath.realpath, iterative: `rest` is the stack of parts still to resolve; a None on it
    # says the symlink path popped next has been resolved to `path`
    rest: list = path.split("/")[::-1]
    out = "/" if path.startswith("/") else _LB_GETCWD()
    seen: dict = {}  # a symlink's path -> its resolved target (None while it is being resolved: a loop)
    while rest:
        name = rest.pop()
        if name is None:
            seen[rest.pop()] = out
            continue
        if not name or name == ".":
            continue
        if name == "..":
            out = out[:out.rindex("/")] or "/"
            continue
        new = out + name if out == "/" else out + "/" + name
        try:
            st = _LB_LSTAT(new)
            if st.st_mode & _LB_IFMT != _LB_IFLNK:
                out = new
                continue
            if new in seen:
                known = seen[new]
                out = known if known is not None else new  # (a loop: left as it is)
                continue
            target = _LB_READLINK(new)
        except (OSError, ValueError):
            out = new
            continue
        seen[new] = None
        if target.startswith("/"):
            out = "/"
        rest.append(new)
        rest.append(None)
        rest.extend(target.split("/")[::-1])
    return out


def _lb_nt_realpath(path: str) -> str:
    """Windows: the full path, then the final one (links resolved) when the file exists."""
    try:
        full = _LB_FULL(path) if _LB_FULL is not None else path
    except (OSError, ValueError):
        return path
    try:
        final = _LB_FINAL(full) if _LB_FINAL is not None else full
    except (OSError, ValueError):
        return full
    if final.startswith("\\\\?\\UNC\\"):
        return "\\\\" + final[8:]
    return final[4:] if final.startswith("\\\\?\\") else final


def library_roots() -> tuple:
    if not _LIB_ROOTS:
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
        paths = sysconfig.get_paths()
        roots.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k))
        sep = os.sep
        _LIB_ROOTS.append(tuple(_lb_realpath(r).rstrip(sep) + sep for r in roots if type(r) is str and r))
    return _LIB_ROOTS[0]


library_roots()  # at install


def is_library(path: Any) -> bool:
    if type(path) is not str or not path:
        return False
    hit = _SEEN.get(path)
    if hit is None:
        hit = _SEEN[path] = _lb_realpath(path).startswith(library_roots())
        if len(_SEEN) > 100_000:
            _SEEN.clear()
    return hit
