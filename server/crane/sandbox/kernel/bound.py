"""Transplant export, kernel side: every name the export calls, bound when `_crane_transplant` is installed.

Runs in the user's kernel (part of `_crane_transplant`, after kernel/pristine.py, shield.py and library.py;
kernel/export.py is its entry). The export looks nothing up on a shared module when it runs: the notebook may
replace `os.path.join`, `time.perf_counter`, `threading.Thread`, `sys.modules`, ... at any time, before the install
too. So the interpreter's C functions are taken here once from their C modules (`posix.stat`,
`time.perf_counter`), each checked to be that module's own under its name (kernel/shield.own_c;
kernel/stdlib_own.py refuses the install otherwise), the types from what makes them (never `types.X`), and the
readers every other part uses go through C-level descriptors (`type.__dict__[...]`, a module's own `__dict__`): no
attribute lookup on the notebook's objects, no `isinstance`. Nothing here calls a Python function.
A Python function of the standard library bound here would not be enough (`os.path.realpath` looks `os.lstat`,
`os.path.join`, ... up in its module each time it runs): only C functions are bound; CRANE's private cloudpickle gets
private copies of the modules it names (`private_modules`), whose functions look their names up in the copy.
"""

from __future__ import annotations

import gc  # noqa: F401 (loaded, so that own_c finds it in `sys.modules`)
import itertools
import os
import sys
import threading
import types  # kernel: strip
from typing import Any

from crane.sandbox.kernel.shield import BUILTINS, SH_NOT_OWN, own_c  # kernel: strip

_O_DICT_GET = object.__getattribute__
_MODULES: dict = sys.modules if type(sys.modules) is dict else {}  # the interpreter's own table, even if rebound
_SYS: dict = _O_DICT_GET(sys, "__dict__")
_THREADING: dict = _O_DICT_GET(threading, "__dict__")
_BUILTIN_NAMES = frozenset(sys.builtin_module_names)
_STDLIB_NAMES = frozenset(_SYS.get("stdlib_module_names", ()))
_EXECUTABLE = _SYS.get("executable") if type(_SYS.get("executable")) is str else ""
# the C functions, from their C modules, each checked to be the interpreter's own (shield.own_c)
_getprofile, _setprofile = own_c("sys", "getprofile"), own_c("sys", "setprofile")
_gettrace, _settrace = own_c("sys", "gettrace"), own_c("sys", "settrace")
_getrecursionlimit, _setrecursionlimit = own_c("sys", "getrecursionlimit"), own_c("sys", "setrecursionlimit")
_start_thread, _stack_size = own_c("_thread", "start_new_thread"), own_c("_thread", "stack_size")
_allocate_lock = own_c("_thread", "allocate_lock")
_perf, _process_time = own_c("time", "perf_counter"), own_c("time", "process_time")
_monotonic = own_c("time", "monotonic")
_SEP = os.sep
_os_stat, _getcwd = own_c(os.name, "stat"), own_c(os.name, "getcwd")
_IS_FROZEN = own_c("_imp", "is_frozen")
_IO_BASE = _O_DICT_GET(_MODULES["_io"], "__dict__")["_IOBase"]


class _Bound:  # (a class of CRANE's own: its method's type is the interpreter's `MethodType`)
    def m(self) -> None:
        pass


# the interpreter's types from what makes them (as `types` does), never `types.X`, which the notebook may rebind
# (`types` is imported for the annotations alone)
_islice: Any = _O_DICT_GET(itertools, "__dict__").get("islice")
if not (type(_islice) is type and type.__dict__["__name__"].__get__(_islice) == "islice"
        and (not type.__dict__["__flags__"].__get__(_islice) & (1 << 9)  # static (3.11), or C's heap type (3.12+):
             or type.__dict__["__flags__"].__get__(_islice) & (1 << 8))):  # immutable, nothing of Python's in it
    SH_NOT_OWN.append("itertools.islice")
_MODULE_TYPE: type[types.ModuleType] = type(sys)
_BuiltinFunctionType: type[types.BuiltinFunctionType] = type(len)  # type: ignore[assignment]
_ClassMethodDescriptorType: type[types.ClassMethodDescriptorType] = type(dict.__dict__["fromkeys"])
_CodeType: type[types.CodeType] = type(_Bound.m.__code__)
_FunctionType: type[types.FunctionType] = type(_Bound.m)  # type: ignore[assignment]
_GetSetDescriptorType: type[types.GetSetDescriptorType] = type(_FunctionType.__dict__["__code__"])
_MemberDescriptorType: type[types.MemberDescriptorType] = type(_FunctionType.__dict__["__globals__"])
_MethodDescriptorType: type[types.MethodDescriptorType] = type(str.join)  # type: ignore[assignment]
_MethodType: type[types.MethodType] = type(_Bound().m)  # type: ignore[assignment]
_ModuleType: type[types.ModuleType] = _MODULE_TYPE
_SimpleNamespace: type[types.SimpleNamespace] = type(sys.implementation)  # type: ignore[assignment]
_WrapperDescriptorType: type[types.WrapperDescriptorType] = type(object.__init__)  # type: ignore[assignment]


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


_gc_referents = own_c("gc", "get_referents")  # (`gc` imported above: a built-in module)
_LRU_WRAPPER: Any = _mdict(_module("_functools")).get("_lru_cache_wrapper")
if type(_LRU_WRAPPER) is not type:
    _LRU_WRAPPER = None


def _lru_wrapped(v: Any) -> Any:
    """The callable a `functools.cache`/`lru_cache` wrapper `v` calls on a miss, read through the collector's C
    traversal (never its `__wrapped__`, which the notebook may set to anything): CPython visits a wrapper's type,
    each cached link's key and result, then its cache, function, key mark, two types and `__dict__`, in that order
    (3.11-3.13); None when the wrapper is not so laid out or its cache holds a key of another type than the exact
    `str`, `int` or tuple `functools` makes (a lookup compares keys of an equal hash: a key of a notebook class's
    would run its `__eq__`). Nothing is called."""
    if _LRU_WRAPPER is None or type(v) is not _LRU_WRAPPER or _gc_referents is None:
        return None
    own = _O_DICT_GET(v, "__dict__")  # (made now if it was not: the traversal below then visits it)
    refs = _gc_referents(v)
    if len(refs) < 7 or refs[-1] is not own or type(refs[-6]) is not dict or type(refs[-4]) is not object \
            or type(refs[-3]) is not type or type(refs[-2]) is not type:
        return None
    if not all(type(k) is str or type(k) is int or type(k) is tuple for k in dict.keys(refs[-6])):
        return None
    return refs[-5]


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
