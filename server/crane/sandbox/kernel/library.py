"""Transplant, kernel side and worker side: which files are the interpreter's installation (its prefixes and
their stdlib/site-packages) rather than the user's own. Library modules are imported again in the worker before
confinement; a class of the user's own (the notebook, or a module outside those places) is user code, which the
export never runs in the kernel.

The roots are found when the module is installed (in the user's kernel: the prefixes and the standard library's
directory from the interpreter's data first, sysconfig's paths once kernel/stdlib_own.py's install check proved
sysconfig's code the standard library's: `base_roots`, `library_roots`). A path is resolved by `_lb_realpath`, this module's own:
`os.path.realpath` is Python code of `posixpath`/`ntpath` that looks `os.lstat`, `os.path.join`, `os.getcwd`,
`stat.S_ISLNK`, ... up in shared modules each time it runs (the notebook may have replaced any of them since the
install), so it is never called at run time; only the interpreter's C functions (`posix.lstat`, `posix.readlink`,
`posix.getcwd`; `nt._getfullpathname`, `nt._getfinalpathname` on Windows), bound here at install, are.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from crane.sandbox.kernel.shield import own_c  # kernel: strip

_LB_POSIX = os.sep == "/"
# `posix` or `nt`: the C functions themselves (never `os`'s names, rebindable), each checked by `own_c`
_LB_LSTAT = own_c(os.name, "lstat")
_LB_READLINK = own_c(os.name, "readlink")
_LB_GETCWD = own_c(os.name, "getcwd")
_LB_FULL = None if _LB_POSIX else own_c(os.name, "_getfullpathname")  # Windows
_LB_FINAL = None if _LB_POSIX else own_c(os.name, "_getfinalpathname")  # Windows
_LB_IFMT, _LB_IFLNK = 0o170000, 0o120000  # stat's S_IFMT mask and S_IFLNK (POSIX values)
_LB_SYS: dict = object.__getattribute__(sys, "__dict__")
_LIB_ROOTS: list = []  # [the roots], once `library_roots` asked sysconfig
_LB_BASE: list = []  # [the roots the interpreter's own data give] (the install's check runs on these)
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


def _lb_roots(roots: set) -> tuple:
    sep = os.sep
    return tuple(_lb_realpath(r).rstrip(sep) + sep for r in roots if type(r) is str and r)


def base_roots() -> tuple:
    """The installation's prefixes and its standard library's directory, from the interpreter's own data alone
    (`sys.prefix`, ..., `sys._stdlib_dir`): nothing is called but the C path functions above."""
    if not _LB_BASE:
        _LB_BASE.append(_lb_roots({dict.get(_LB_SYS, k) for k in ("prefix", "base_prefix", "exec_prefix",
                                                                 "base_exec_prefix", "_stdlib_dir")}))
    return _LB_BASE[0]


def library_roots() -> tuple:
    """`base_roots` and sysconfig's install paths (a distribution's scheme may put site-packages elsewhere).
    sysconfig's code runs here, so in the kernel this is first asked after the install's check proved it, `os`
    and `posixpath` the standard library's (kernel/stdlib_own.py); until then `is_library` answers from
    `base_roots`."""
    if not _LIB_ROOTS:
        import sysconfig

        roots = set(base_roots())
        paths = sysconfig.get_paths()
        roots.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k))
        _LIB_ROOTS.append(_lb_roots(roots))
        _SEEN.clear()  # (answers from the base roots alone)
    return _LIB_ROOTS[0]


if "_pr_import" not in globals():  # at install; the transplant's kernel side asks after its check (kernel/pristine.py
    library_roots()               # comes first there; kernel/stdlib_own.py then asks)


def is_library(path: Any) -> bool:
    if type(path) is not str or not path:
        return False
    hit = _SEEN.get(path)
    if hit is None:
        hit = _SEEN[path] = _lb_realpath(path).startswith(_LIB_ROOTS[0] if _LIB_ROOTS else base_roots())
        if len(_SEEN) > 100_000:
            _SEEN.clear()
    return hit


# the libraries CRANE's transplant worker itself runs (its shell, its kernel-protocol stack, its own code and its
# state's decoders): the notebook's methods on their classes are never carried to it
_WORKER_LIBS = frozenset(("crane", "msgspec", "cloudpickle", "builtins", "ipykernel", "IPython", "jupyter_client",
                          "jupyter_core", "zmq", "tornado", "traitlets", "comm", "prompt_toolkit", "pygments", "jedi",
                          "parso", "matplotlib_inline", "debugpy", "stack_data", "executing", "asttokens", "pure_eval"))
_LB_STDLIB = frozenset(_LB_SYS.get("stdlib_module_names", ()))  # (taken at install: the worker's before any cell)


def carriable_module(mod: object) -> bool:
    """A class of module `mod` (its `__module__`) may get the notebook's methods set on it in the transplant
    worker (kernel/environment._patched_methods, worker/main._register_patched): not the standard library's
    (`sys.stdlib_module_names`, with their submodules and the private C modules: `json.encoder`, `_io`), whose
    code CRANE's worker runs to write its record (a carried `json.JSONEncoder.encode` rewrote it: review r1 H1),
    nor a library of `_WORKER_LIBS`."""
    if type(mod) is not str or not mod:
        return False
    top = mod.partition(".")[0]
    return not (top.startswith("_") or top in _WORKER_LIBS or top in _LB_STDLIB)
