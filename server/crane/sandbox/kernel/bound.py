"""Transplant export, kernel side: every name the export calls, bound when `_crane_transplant` is installed.

Runs in the user's kernel (part of `_crane_transplant`, the first of the export's parts; kernel/export.py is its
entry). The export looks nothing up on a shared module when it runs: the notebook may replace `os.path.join`,
`time.perf_counter`, `threading.Thread`, `sys.modules`, ... at any time after the install. So the interpreter's
functions and tables are taken here once, and the readers every other part uses go through C-level descriptors
(`type.__dict__[...]`, a module's own `__dict__`): no attribute lookup on the notebook's objects, no `isinstance`.
A Python function of the standard library bound here would not be enough (`os.path.realpath` looks `os.lstat`,
`os.path.join`, ... up in its module each time it runs): only C functions are bound; CRANE's private cloudpickle gets
private copies of the modules it names (`private_modules`), whose functions look their names up in the copy.
"""

from __future__ import annotations

import _imp
import _thread
import itertools
import os
import sys
import threading
import time
import types
from typing import Any

from crane.sandbox.kernel.shield import BUILTINS  # kernel: strip

_O_DICT_GET = object.__getattribute__
_MODULES: dict = sys.modules if type(sys.modules) is dict else {}  # the interpreter's own table, even if rebound
_SYS: dict = _O_DICT_GET(sys, "__dict__")
_THREADING: dict = _O_DICT_GET(threading, "__dict__")
_BUILTIN_NAMES = frozenset(sys.builtin_module_names)
_STDLIB_NAMES = frozenset(_SYS.get("stdlib_module_names", ()))
_EXECUTABLE = _SYS.get("executable") if type(_SYS.get("executable")) is str else ""
_getprofile, _setprofile, _gettrace, _settrace = sys.getprofile, sys.setprofile, sys.gettrace, sys.settrace
_getrecursionlimit, _setrecursionlimit = sys.getrecursionlimit, sys.setrecursionlimit
_start_thread, _stack_size, _allocate_lock = _thread.start_new_thread, _thread.stack_size, _thread.allocate_lock
_perf, _process_time, _monotonic = time.perf_counter, time.process_time, time.monotonic
_islice = itertools.islice
_SEP = os.sep
_os_stat, _getcwd = os.stat, os.getcwd
_IO_BASE = _O_DICT_GET(_MODULES["_io"], "__dict__")["_IOBase"]
_IS_FROZEN = _imp.is_frozen
_MODULE_TYPE = types.ModuleType
_BuiltinFunctionType = types.BuiltinFunctionType
_ClassMethodDescriptorType = types.ClassMethodDescriptorType
_CodeType = types.CodeType
_FunctionType = types.FunctionType
_GetSetDescriptorType = types.GetSetDescriptorType
_MemberDescriptorType = types.MemberDescriptorType
_MethodDescriptorType = types.MethodDescriptorType
_MethodType = types.MethodType
_ModuleType = types.ModuleType
_SimpleNamespace = types.SimpleNamespace
_WrapperDescriptorType = types.WrapperDescriptorType


def _join(d: str, name: str) -> str:
    return d + name if d.endswith(_SEP) else d + _SEP + name


def _exists(path: str) -> bool:
    try:
        _os_stat(path)
    except OSError:
        return False
    return True


def _module(name: str) -> Any:
    """`sys.modules[name]` when it is a plain module object (None otherwise: an object of the notebook's that stands
    in for a module is never touched)."""
    m = dict.get(_MODULES, name)
    return m if type(m) is _MODULE_TYPE else None


def _mdict(m: Any) -> dict:
    """A plain module's namespace, read without attribute lookup (a module `__getattr__` is never called)."""
    d = _O_DICT_GET(m, "__dict__") if type(m) is _MODULE_TYPE else None
    return d if type(d) is dict else {}


# C-level readers of a class (no metaclass attribute hook runs)
_T_DICT = type.__dict__["__dict__"]
_T_MRO = type.__dict__["__mro__"]
_T_MODULE = type.__dict__["__module__"]
_T_QUALNAME = type.__dict__["__qualname__"]
_T_FLAGS = type.__dict__["__flags__"]
_DATA = (str, bytes, int, float, bool, type(None), tuple, frozenset, dict, list, set, type)
_T_NAME = type.__dict__["__name__"]
_HEAPTYPE = 1 << 9


def _mro(cls: Any) -> tuple:
    """`cls.__mro__` read from the C slot (no metaclass hook runs); () for a static type that was never readied,
    whose slot is empty (f2py's `fortran` type in SciPy's compiled modules, numpy's `fortran` too): such a type is
    compiled code's, holds no Python function, and is nobody's base."""
    mro = _T_MRO.__get__(cls, type)
    return mro if type(mro) is tuple else ()


def _cls_dict(cls: object) -> dict:
    return _T_DICT.__get__(cls, type)


def _type_name(obj: Any) -> str:
    t = type(obj)
    try:
        mod, qual = _T_MODULE.__get__(t, type), _T_QUALNAME.__get__(t, type)
    except Exception:
        return "?"
    mod = mod if type(mod) is str else "?"
    qual = qual if type(qual) is str else "?"
    return qual if mod in ("builtins", "__main__") else f"{mod}.{qual}"


def _type_name_of(cls: type) -> str:
    try:
        mod, qual = _T_MODULE.__get__(cls, type), _T_QUALNAME.__get__(cls, type)
        return f"{mod}.{qual}" if type(mod) is str and type(qual) is str else "?"
    except Exception:
        return "?"



def _snapshot(m: Any, memo: dict, depth: int) -> Any:
    """A private copy of the module `m` as it is now: a fresh module whose namespace is a copy of `m`'s, each of
    `m`'s Python functions copied to run in it (its globals), CRANE's builtins; the modules it names copied the same
    way, `depth` levels down. Nothing such a function looks up at call time (`dis.get_instructions` calling
    `_get_instructions_bytes`, `sys.modules`, `types.new_class`) is then the shared module's, which the notebook may
    change. Mutable state stays shared (`sys.modules` is the interpreter's own dict)."""
    hit = memo.get(id(m))
    if hit is not None:
        return hit[1]
    src = _mdict(m)
    name = src.get("__name__")
    priv = _ModuleType(name if type(name) is str else "?")
    memo[id(m)] = (m, priv)
    pd = _O_DICT_GET(priv, "__dict__")
    pd.update(src)
    pd["__builtins__"] = BUILTINS
    if m is sys:
        pd["modules"] = _MODULES  # the interpreter's table, never a mapping the notebook bound to `sys.modules`
    for n, v in list(src.items()):
        if type(v) is _FunctionType and v.__globals__ is src:
            f = _FunctionType(v.__code__, pd, v.__name__, v.__defaults__, v.__closure__)
            f.__kwdefaults__ = v.__kwdefaults__
            f.__qualname__ = v.__qualname__
            f.__module__ = v.__module__
            pd[n] = f
        elif type(v) is _ModuleType and depth > 0 and n != "__builtins__":
            pd[n] = _snapshot(v, memo, depth - 1)
    return priv


def private_modules(md: dict, depth: int = 1) -> None:
    """Every module named in the namespace `md` (CRANE's private cloudpickle's `dis`, `sys`, `types`, `weakref`,
    ...) replaced by a private copy taken now (`_snapshot`): its code then calls nothing the notebook rebinds in
    those modules later."""
    memo: dict = {}
    for n, v in list(md.items()):
        # (not `logging`: cloudpickle returns its `getLogger` for pickling by reference, as the library's own)
        if type(v) is _ModuleType and n not in ("__builtins__", "logging"):
            md[n] = _snapshot(v, memo, depth)
