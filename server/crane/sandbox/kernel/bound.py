"""Transplant export, kernel side: every name the export calls, bound when `_crane_transplant` is installed.

Runs in the user's kernel (part of `_crane_transplant`, the first of the export's parts; kernel/export.py is its
entry). The export looks nothing up on a shared module when it runs: the notebook may replace `os.path.join`,
`time.perf_counter`, `threading.Thread`, `sys.modules`, ... at any time after the install. So the interpreter's
functions and tables are taken here once, and the readers every other part uses go through C-level descriptors
(`type.__dict__[...]`, a module's own `__dict__`): no attribute lookup on the notebook's objects, no `isinstance`.
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

