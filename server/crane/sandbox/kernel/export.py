"""Transplant, kernel side: export what one cell needs from the user's kernel into the run's private directory.

Installed privately as `_crane_transplant` (see `crane.sandbox.transplant`) and called through a private
request, like the probe: it binds no name in the user's namespace, leaves RNG states and event callbacks alone,
and runs none of the user's code. `export(args)` (a dict literal: nothing is parsed in the kernel) writes into
`args["dir"]`:
- `state.pkl`: `{name: object}` for the names the cell reads (`args["names"]`, found in the daemon: the kernel's
  input transformers are never run), `In`/`Out`/`_`-names included when the cell reads them, pickled in ONE
  pickle (identity and sharing between names survive) with CRANE's private copy of cloudpickle
  (`sys.modules["_crane_cloudpickle"]`) at protocol 5, straight into the file (no in-memory copy);
- `buf-N`: the out-of-band buffers of protocol 5, each written as the pickler meets it;
- `phase`: what it is doing ("shrinking", then "copying"), rewritten as it goes;
- `env.json`: the interpreter, cwd, environment, `sys.path`, the modules to import again, torch's CUDA facts,
  and the settings a fresh interpreter would not have (`settings`: the recursion limit, `np.seterr` and print
  options, pandas options and jax config values, TensorFlow/Keras flags, pandas accessors the notebook
  registered).
Safety (the export never runs notebook code and never harms the kernel):
- only what is proven safe is pickled (`_Proof`): each object's exact type is importable to the same object
  from a library module, or a notebook class copied by value; no user-defined metaclass; no pickling or
  attribute hook (`__reduce_ex__`, `__getstate__`, `__getattr__`, `__class__`, ...) of the user's own, on the
  class or the instance; no property over a slot; no notebook dict/list subclass; no library pickling function
  the notebook replaced; no library object whose own reducer would meet a notebook object (a Keras model with
  notebook layers). Every check reads through C-level descriptors (`type.__dict__[...]`), never `getattr` on the
  user's objects, never `isinstance` (which reads `__class__`);
- the user's profile/trace hooks are off while it runs (kernel/shield.py); files are opened with `_io.open`;
- the pickler runs in a thread of its own with a known stack (`_STACK`) under a recursion limit CRANE sets
  (`_DEPTH`), so a deep structure is refused, never a C-stack overflow;
- it stops (and the run is refused) as soon as a request waits for the kernel's main thread (the user's cell
  comes first: kernel/waiting.py watches the kernel's shell queue without reading it; where it cannot, the reply's
  `watch` says why), past `args["max_s"]` seconds of kernel time (`args["watched_max_s"]` where the watch works), when the daemon writes `cancel` into the
  directory, past the copy cap (out-of-band and in-band bytes both count), and when the memory the kernel may
  still use (kernel/shield.memory_headroom, cgroup-aware) falls under `_FLOOR`.
Large values are shrunk BEFORE they are copied (kernel/miniature's rules: consistent row subsets, on a copy of the
cell's names, never the user's namespace): in a miniature run (`args["miniature"]`), and when the values the cell
reads hold more than `args["copy_mb"]` MiB (array data and in-band strings/bytes both count). Shrinking is bound
by the same stops as the copy (`_Control.check` between objects, columns and chunks of rows); its time: where the
watch works, `_WATCHED_SHRINK_S` of its own (nothing of the user's waits behind it), then the copy its `max_s`;
elsewhere one `max_s` budget for both. A stop for a waiting request or the time cap is `transient` in the answer. Then `state.pkl`
also holds, under a key no Python name can have, what the worker needs about each original for
kernel/miniature's `artefact`.
What cannot be pickled (open files, sockets, generators, locks, ...) makes the answer
`{"ok": False, "reason": "... `name` (type) ..."}`.
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

from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.miniature import (  # kernel: strip
    _GATE,  # kernel: strip
    _REGISTRY,  # kernel: strip
    _SHRINK_CHUNK,  # kernel: strip
    ShrinkStopped,  # kernel: strip
    _kind,  # kernel: strip
    _shrink_check,  # kernel: strip
    shrink_namespace,  # kernel: strip
)  # kernel: strip
from crane.sandbox.kernel.shield import (  # kernel: strip
    BUILTINS,
    dumps,
    environ_strings,
    free_threaded,
    memory_headroom,
    private_open,
    process_identity,
)
from crane.sandbox.kernel.waiting import own_dict, shell_watch  # kernel: strip
from crane.sandbox.shared.carry import CARRIED_RUNTIMES, read_carried  # kernel: strip

# -- bound at install (the export looks nothing up on a shared module when it runs: the notebook may replace
# `os.path.join`, `time.perf_counter`, `threading.Thread`, `sys.modules`, ... at any time after) ----------------
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


def _sys_path() -> list:
    p: Any = dict.get(_SYS, "path")
    return [x for x in list.__iter__(p) if type(x) is str] if issubclass(type(p), list) else []


_SKIP = {"get_ipython", "exit", "quit", "__builtins__", "__builtin__", "__name__", "__doc__", "__spec__", "__loader__",
         "__package__"}
# modules of the kernel itself, not of the notebook: never imported again in a worker
_KERNEL_MODS = ("ipykernel", "IPython", "jupyter_client", "jupyter_core", "zmq", "tornado", "traitlets", "comm",
                "debugpy", "prompt_toolkit", "pygments", "jedi", "parso", "matplotlib_inline", "psutil",
                "nest_asyncio", "pexpect", "ptyprocess", "wcwidth", "stack_data", "executing", "asttokens",
                "pure_eval", "decorator", "platformdirs", "dateutil", "pickleshare", "backcall", "six", "_pytest")
_STACK = 256 << 20  # the pickler thread's C stack
_DEPTH = 20_000  # the recursion limit while pickling (a deeper structure is refused)
_FLOOR = 256 << 20  # the export stops when the kernel could allocate less than this
_CHECK_EVERY = 8 << 20  # bytes written between two looks at the clock, the cancel file and the memory left
_QUEUED = "a request is waiting for the kernel (the user's cell comes first)"
_OVER_TIME = "copying its inputs took longer than the kernel may be kept busy"
# Shrinking a large frame to a miniature can take seconds of the kernel; where the watch sees a queued request at
# once (ipykernel 7), nothing of the user's waits behind it, so it gets this much (the copy after it its own max_s);
# elsewhere it shares the one max_s budget with the copy
_WATCHED_SHRINK_S = 10.0


_T_DICT = type.__dict__["__dict__"]
_T_MRO = type.__dict__["__mro__"]
_T_MODULE = type.__dict__["__module__"]
_T_QUALNAME = type.__dict__["__qualname__"]
_T_FLAGS = type.__dict__["__flags__"]
_DATA = (str, bytes, int, float, bool, type(None), tuple, frozenset, dict, list, set, type)
_T_NAME = type.__dict__["__name__"]
_HEAPTYPE = 1 << 9


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


# what pickling reads on an object through its class (a user's definition of any of these is user code run by
# pickle); `__setstate__` is called only when loading (in the confined worker)
_CALLED = ("__reduce__", "__reduce_ex__", "__getstate__", "__getnewargs__", "__getnewargs_ex__", "__getattr__",
           "__getattribute__", "__class__", "__dict__", "__reducer_override__")
_PICKLING = ("__reduce__", "__reduce_ex__", "__getstate__", "__getnewargs__", "__getnewargs_ex__")
# names through which code reaches attributes it does not name (the walk of `_Proof._reachable` cannot bound it)
_DYNAMIC = frozenset(("getattr", "__getattribute__", "attrgetter", "methodcaller", "eval", "exec", "vars", "globals",
                      "locals", "__import__", "import_module", "getattr_static"))
# dunders no operation on an object calls (class set-up and construction); any other a notebook class defines
# may be called by the hook's code without its name (`str(self)`, `self == x`)
_NOT_CALLED_BY_OPERATIONS = frozenset((
    "__init__", "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__", "__slots__",
    "__init_subclass__", "__class_getitem__", "__set_name__", "__del__", "__firstlineno__", "__static_attributes__",
    "__orig_bases__", "__parameters__", "__abstractmethods__", "__classcell__", "__type_params__",
    "__annotate__", "__annotate_func__", "__annotations_cache__", "__setstate__"))
_REACH_LIMIT = 100  # code objects the walk follows before it gives up (then every library name counts)
_C_CALLABLES = (_BuiltinFunctionType, _WrapperDescriptorType, _MethodDescriptorType,
                _GetSetDescriptorType, _MemberDescriptorType, _ClassMethodDescriptorType,
                type(type.__dict__["__dict__"]))


def _library_function(v: Any) -> bool:
    """`v` is code of the interpreter's installation (a C callable, or a Python function whose file is a
    library's), unwrapping staticmethod/classmethod/property."""
    t = type(v)
    if t is staticmethod or t is classmethod:
        v, t = v.__func__, type(v.__func__)
    if t is property:
        return all(f is None or _library_function(f) for f in (v.fget, v.fset, v.fdel))
    if any(t is c for c in _C_CALLABLES):
        return True
    if t is _FunctionType:
        code = v.__code__
        return type(code.co_filename) is str and (is_library(code.co_filename) or _frozen_stdlib(v))
    if t is _MethodType:
        return _library_function(v.__func__)
    if _compiled_callable_type(t):  # nanobind's nb_func/nb_method, pybind11's, ... : made by compiled code only
        return True
    if type.__dict__["__name__"].__get__(t, type) in ("cython_function_or_method", "fused_cython_function"):
        mod = dict.get(_MODULES, v.__module__) if type(v.__module__) is str else None
        path = dict.get(_O_DICT_GET(mod, "__dict__"), "__file__") if type(mod) is _ModuleType else None
        return type(path) is str and is_library(path)  # compiled into a library's extension module
    return False


def _frozen_stdlib(f: Any) -> bool:
    """A function of a standard-library module the interpreter froze (`<frozen io>`: io, os, ... since 3.11),
    living in that module's namespace."""
    name = f.__code__.co_filename
    if not (name.startswith("<frozen ") and name.endswith(">")):
        return False
    mod = name[8:-1]
    return _IS_FROZEN(mod) and f.__globals__ is _mdict(_module(mod))


_COMPILED_CALLABLES = {("nanobind", "nb_func"), ("nanobind", "nb_method"), ("nanobind", "nb_bound_method"),
                       ("builtins", "pybind11_static_property")}


def _compiled_object(v: Any) -> bool:
    """An object of a type defined in C (a static type, or one of a built-in module like `_abc`) holding no Python
    code: nothing of the notebook's can run through it."""
    t = type(v)
    if own_dict(v):
        return False
    if not _T_FLAGS.__get__(t, type) & _HEAPTYPE:
        return True
    return _T_MODULE.__get__(t, type) in _BUILTIN_NAMES and not any(
        type(x) is _FunctionType for k in _T_MRO.__get__(t, type) for x in _cls_dict(k).values())


def _compiled_callable_type(t: type) -> bool:
    """`t` is the function type of a binding generator (nanobind, pybind11): its objects are made by compiled
    code only (a heap type named after a module that does not exist, defining no Python function)."""
    try:
        key = (_T_MODULE.__get__(t, type), _T_QUALNAME.__get__(t, type))
    except Exception:
        return False
    if key not in _COMPILED_CALLABLES or type(t) is not type:
        return False
    return not any(type(x) is _FunctionType for k in _T_MRO.__get__(t, type) for x in _cls_dict(k).values())


def _imports(code: types.CodeType) -> bool:
    """The code imports a module (an IMPORT_NAME instruction; wordcode: every other byte is an opcode). Without
    the interpreter's `opcode` module loaded, assume it does."""
    op = _MODULES.get("opcode")
    opmap = dict.get(_O_DICT_GET(op, "__dict__"), "opmap") if type(op) is _ModuleType else None
    num = dict.get(opmap, "IMPORT_NAME") if type(opmap) is dict else None
    return type(num) is not int or num in code.co_code[::2]


def _generated_by_library(f: types.FunctionType) -> bool:
    """A function made by `exec` (file `<string>`, ...) outside the notebook's namespace: a dataclass's or a
    namedtuple's generated method in a library module (a notebook's cell has a real file, and code it makes with
    `exec` runs in `__main__`)."""
    name = f.__code__.co_filename
    g = f.__globals__
    return type(name) is str and name.startswith("<") and not name.startswith("<ipython-input") \
        and type(g) is dict and dict.get(g, "__name__") != "__main__"


_INERT = (str, bytes, int, float, complex, bool, type(None))


def _in_mro(t: type, name: str) -> bool:
    """`name` is defined on `t` or a base (read from the classes' dicts: no metaclass `__getattr__` is called)."""
    return any(name in _cls_dict(k) for k in _T_MRO.__get__(t, type))


def _is_class(v: Any) -> bool:
    return any(k is type for k in _T_MRO.__get__(type(v), type))


def _generated_by_library_value(v: Any) -> bool:
    t = type(v)
    if t is staticmethod or t is classmethod:
        v = v.__func__
    return type(v) is _FunctionType and _generated_by_library(v)


def _inert(v: Any) -> bool:
    """A class attribute no code can run through: a plain value, or a plain container of plain values (the set of
    names scikit-learn's `__init_subclass__` stores on every estimator class)."""
    t = type(v)  # compared by identity: `in` would call a notebook metaclass's __eq__
    if any(t is c for c in _INERT):
        return True
    if t is tuple or t is frozenset or t is set or t is list:
        return len(v) <= 1000 and all(any(type(x) is c for c in _INERT) for x in v)
    return False


class _Refused(Exception):
    """An object pickling it would run the user's code for (or that cannot be proven not to)."""


class _Stopped(Exception):
    """The export was stopped: time, cancel, size or memory."""


class _Proof:
    """Proves objects safe to pickle without running the user's code; caches its answers per type (keyed by
    id, the type held alive: a class is never hashed, which would call its metaclass's `__hash__`)."""

    def __init__(self) -> None:
        self.types: dict = {}  # id(type) -> (type, reason or "", library: bool)
        self.walked: dict = {}  # id(obj) -> obj, for the pre-walk of library reducers' state
        self.libs: dict = {}  # id(class) -> (class, library: bool)
        self.refs: dict = {}  # id(function) -> the instance attributes that hold it (pre-walk)
        # torch state a copy leaves out, seen while pickling (a non-leaf tensor needing grad, ...): then a crash in
        # torch is not certain (ExportReply.carried)
        self.uncarried: list = []

    def library_class(self, cls: type) -> bool:
        """`cls` is the library's: the class a library module's qualified name gives, a static (C) type, or a
        class of a library module whose every Python function is library code (a class claiming a module it is
        not in, with code of the notebook's, is not)."""
        hit = self.libs.get(id(cls))
        if hit is not None and hit[0] is cls:
            return hit[1]
        ok = self._library_class(cls)
        self.libs[id(cls)] = (cls, ok)
        return ok

    def _library_class(self, cls: type) -> bool:
        try:
            mod, qual = _T_MODULE.__get__(cls, type), _T_QUALNAME.__get__(cls, type)
            flags = _T_FLAGS.__get__(cls, type)
        except Exception:
            return False
        if not flags & _HEAPTYPE:
            return True  # a static type: defined in C, nothing the notebook can make
        if type(mod) is not str or mod.startswith("_cython_"):  # Cython's shared types (their metatype's
            meta = type(cls)  # `__module__` is a descriptor)
            return (meta is type or self.library_class(meta)) and self._only_library_code(cls)
        if type(qual) is not str or mod == "__main__":
            return False
        m = dict.get(_MODULES, mod)
        if m is None or type(m) is not _ModuleType:
            return self._only_library_code(cls)  # an extension's type named after a private module
        d = _O_DICT_GET(m, "__dict__")
        path = dict.get(d, "__file__")
        if path is None and mod not in _BUILTIN_NAMES:
            return self._only_library_code(cls)  # a submodule an extension made (no file of its own)
        if not (type(path) is str and is_library(path)) and mod not in _BUILTIN_NAMES:
            return False
        obj: object = m
        for part in qual.split("."):
            if part == "<locals>":
                obj = None
                break
            try:
                src = d if obj is m else _cls_dict(obj)
            except TypeError:
                obj = None
                break
            if part not in src:
                obj = None
                break
            obj = src[part]
        if obj is cls:
            return True
        return self._only_library_code(cls)  # not importable by its name (a factory's class): its code decides

    def _only_library_code(self, cls: type) -> bool:
        """Every value of the class's dict is library code or plain data (a namedtuple's generated `__new__`, which
        neither pickling nor a library's saving calls, aside)."""
        cd = _cls_dict(cls)
        for name, v in cd.items():
            t = type(v)
            if name == "__new__" and t is staticmethod and "_fields" in cd and type(v.__func__) is _FunctionType \
                    and v.__func__.__code__.co_filename == "<string>":
                continue
            if t is _FunctionType or t is staticmethod or t is classmethod or t is property:
                if not _library_function(v):
                    return False
            elif not (_library_function(v) or any(t is d for d in _DATA) or _T_NAME.__get__(t, type)
                      in ("PyCapsule", "getset_descriptor", "member_descriptor", "_tuplegetter")
                      or _compiled_object(v)):  # a C object (abc's `_abc_data`)
                return False
        return True

    def pristine(self, cls: Any) -> bool:
        """`cls` is a library class none of whose classes (its MRO, its metaclass) holds anything of the notebook's:
        only library functions, plain data, and objects of library classes holding only those (pandas' accessors
        included; one the notebook registered is not). Library code may then be called on its instances in the
        kernel (shrinking, sizing): no method the notebook added or replaced can run."""
        key = ("pristine", id(cls))
        hit = self.libs.get(key)
        if hit is not None and hit[0] is cls:
            return bool(hit[1])
        ok = _is_class(cls) and self.library_class(cls) and (type(cls) is type or self.pristine(type(cls)))
        if ok:
            for k in _T_MRO.__get__(cls, type):
                if k is object or k is type:
                    continue
                if not self.library_class(k) or not all(self._pristine_value(v, 0) for v in _cls_dict(k).values()):
                    ok = False
                    break
        self.libs[key] = (cls, ok)
        return ok

    def _pristine_value(self, v: Any, depth: int) -> bool:
        t = type(v)
        if _inert(v) or t is dict and len(v) <= 1000 and all(_inert(x) for x in dict.values(v)):
            return True
        if _library_function(v) or _generated_by_library_value(v):
            return True
        if t is staticmethod or t is classmethod:
            return self._pristine_value(v.__func__, depth)  # a classmethod over functools.cache, over a class
        if t is _FunctionType or t is _MethodType or t is property:
            return False  # code of the notebook's
        if _is_class(v):
            return self.library_class(v)
        if depth > 1 or not self.library_class(t) or self.check_type(t)[0]:
            return False
        try:
            d = _O_DICT_GET(v, "__dict__")
        except Exception:
            return True  # a library object without instance state (a slot wrapper, a C descriptor)
        return type(d) is dict and all(self._pristine_value(x, depth + 1) for x in dict.values(d))

    def check_type(self, t: type) -> tuple[str, bool]:
        """(why pickling an instance of `t` could run the user's code, or ""; `t` is a library class)."""
        hit = self.types.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1], hit[2]
        why, lib = self._check_type(t)
        self.types[id(t)] = (t, why, lib)
        return why, lib

    def module_hook(self, mod: Any) -> str:
        """Why looking a name up in the module `mod` names (as pickling a class or function by reference does) could
        run the notebook's code: an object standing in for a module, or a module `__getattr__` of the notebook's;
        else ""."""
        m = dict.get(_MODULES, mod) if type(mod) is str else None
        if m is None:
            return ""
        if type(m) is not _MODULE_TYPE:
            return "" if self.library_class(type(m)) and self.pristine(type(m)) else \
                f"`sys.modules[{mod!r}]` is an object of the notebook's"
        hook = _mdict(m).get("__getattr__")
        return "" if hook is None or _library_function(hook) else f"the module `{mod}` has a `__getattr__` of the notebook's"

    def _check_type(self, t: type) -> tuple[str, bool]:
        meta = type(t)
        if meta is not type:
            mwhy, mlib = self.check_type(meta)
            if not mlib:
                return f"its metaclass {_type_name_of(meta)} is the notebook's", False
            for k in _T_MRO.__get__(meta, type):  # a library metaclass the notebook patched
                if k is not type and any(n in _cls_dict(k) and not _library_function(_cls_dict(k)[n])
                                         for n in ("__getattribute__", "__getattr__", "__hash__", "__eq__")):
                    return f"its metaclass {_type_name_of(meta)} has a hook of the notebook's", False
        lib = self.library_class(t)
        hook = self.module_hook(_T_MODULE.__get__(t, type))
        if hook:
            return f"its class's module: {hook}", lib
        mro = _T_MRO.__get__(t, type)
        for k in mro:
            if k is object:
                continue
            kd = _cls_dict(k)
            klib = k is t and lib or (k is not t and self.library_class(k))
            for name in _CALLED:
                if name in kd:
                    v = kd[name]
                    if _library_function(v) and (klib or type(v) is _FunctionType):
                        continue  # the library's own (or library code a notebook class reuses: namedtuple's)
                    if type(v) is _GetSetDescriptorType and name in ("__dict__",):
                        continue
                    return f"{name} of {_type_name_of(k)} is the notebook's code", lib
            if not klib:  # a notebook class (or one lying about its module) in the MRO
                for builtin_base in (dict, list, set, frozenset):
                    if any(b is builtin_base for b in mro):
                        return f"{_type_name_of(k)} is a notebook subclass of {builtin_base.__name__}", lib
                for name, v in kd.items():
                    if type(v) is property or (_in_mro(type(v), "__get__") and _in_mro(type(v), "__set__")
                                               and type(v) is not _MemberDescriptorType
                                               and type(v) is not _GetSetDescriptorType):
                        if any(self.library_class(b) and b is not object and any(
                                n in _cls_dict(b) and type(_cls_dict(b)[n]) is _FunctionType for n in _PICKLING)
                               for b in mro):
                            return (f"the property `{name}` of {_type_name_of(k)} may be read by its library "
                                    "pickling code"), lib
            slots = kd.get("__slots__")
            if slots is not None:
                for s in ([slots] if type(slots) is str else list(slots) if type(slots) in (list, tuple) else []):
                    if type(s) is not str or s in ("__dict__", "__weakref__"):
                        continue
                    attr = f"_{_T_QUALNAME.__get__(k, type).rsplit('.', 1)[-1].lstrip('_')}{s}" \
                        if s.startswith("__") and not s.endswith("__") else s
                    for k2 in mro:
                        d2 = _cls_dict(k2)
                        if attr in d2:
                            if type(d2[attr]) is not _MemberDescriptorType:
                                return f"`{attr}` of {_type_name_of(k2)} shadows a slot pickle reads", lib
                            break
        if not lib:
            why = self._c_reducer_override(t, mro)
            if why:
                return why, lib
            # a notebook class whose library base pickles it with its own Python code: that code may call any
            # method the notebook overrides (a Keras layer's get_config, a subclassed model's save_own_variables)
            for b in mro:
                if b is t or b is object or not self.library_class(b):
                    continue
                bd = _cls_dict(b)
                if any(n in bd and type(bd[n]) is _FunctionType for n in _PICKLING):
                    lib_names, bounded, notebook = self._reachable(mro)
                    notebook = notebook or self._reachable(mro, modules=True)[2]
                    if notebook:
                        return f"{_type_name_of(b)}'s own pickling reaches {notebook}", lib
                    if bounded and any(n.startswith("__") and n not in _NOT_CALLED_BY_OPERATIONS and not _inert(v)
                                       for k in mro if k is not object and not self.library_class(k)
                                       for n, v in _cls_dict(k).items() if type(n) is str):
                        bounded = False  # `str(self)`, `self == x`, `len(self)` in the hook call these unnamed
                    if not bounded:  # the library's pickling code may call any name its classes define
                        for x in mro:
                            if x is not object and self.library_class(x):
                                lib_names.update(n for n in _cls_dict(x) if type(n) is str and not n.startswith("__"))
                    overridden = [n for k in mro if k is not object and not self.library_class(k)
                                  for n, v in _cls_dict(k).items() if type(n) is str and n in lib_names
                                  and not _inert(v)]
                    if overridden:
                        return (f"{_type_name_of(t)} overrides `{overridden[0]}` of {_type_name_of(b)}, whose own "
                                "pickling would call it"), lib
                    break
        elif any(type(_cls_dict(b).get(n)) is _FunctionType for b in mro if b is not object for n in _PICKLING):
            notebook = self._reachable(mro, modules=True)[2]  # a library class: may reach what the notebook patched
            if notebook:
                return f"{_type_name_of(t)}'s own pickling reaches {notebook}", lib
        return "", lib

    def _c_reducer_override(self, t: type, mro: tuple) -> str:
        """A notebook subclass of an extension type whose reducer is compiled code (numpy's ndarray reads `shape`,
        `__dict__`, ... through attribute lookup): which names that code reads cannot be seen, so a name the
        notebook defines over one of the library's, or any property of its own, could be called by it."""
        base = next((b for b in mro if b is not object and _T_MODULE.__get__(b, type) != "builtins"
                     and self.library_class(b) and any(n in _cls_dict(b) and type(_cls_dict(b)[n]) is not _FunctionType
                                                        and _library_function(_cls_dict(b)[n]) for n in _PICKLING)), None)
        if base is None:
            return ""
        library_names = {n for k in mro if k is not object and self.library_class(k) for n in _cls_dict(k)}
        for k in mro:
            if k is object or self.library_class(k):
                continue
            for n, v in _cls_dict(k).items():
                if type(n) is str and not _inert(v) and n not in _NOT_CALLED_BY_OPERATIONS and (
                        n in library_names or type(v) is property or _in_mro(type(v), "__get__")
                        and type(v) is not _FunctionType):
                    return (f"{_type_name_of(k)} defines `{n}` over {_type_name_of(base)}, whose compiled pickling "
                            "may read it")
        return ""

    def _reachable(self, mro: tuple, modules: bool = False) -> tuple[set, bool, str]:
        """What the library's pickling hooks of these classes can reach: every attribute and global name (and
        identifier constant) in their code, followed through the library functions those names resolve to (the
        library classes of `mro`, the hooks' module globals, classes they name, closures, nested code).
        `modules`: also follow every module the code's names can denote (`torch._utils._get_obj_state`, a name
        that is also a module's: broader, for the search of patched functions only).
        Returns (names, bounded, notebook): `bounded` False when the names may be incomplete: a computed lookup
        (`getattr(self, name)`), a module the code names or imports (Keras's pickling goes through its saving
        modules, which call methods a subclass overrides), more than `_REACH_LIMIT` code objects; `notebook` names a function of the notebook's
        the hooks reach (a library module or class the notebook patched), else ""."""
        libs = [x for x in mro if x is not object and self.library_class(x)]
        todo: list = []
        for x in libs:
            for n in _PICKLING:
                v = _cls_dict(x).get(n)
                if type(v) is _FunctionType:
                    todo.append((v.__code__, v.__globals__, v))
        names: set = set()
        seen: set = set()
        bounded = True
        while todo:
            code, globs, fn = todo.pop()
            if id(code) in seen:
                continue
            seen.add(id(code))
            if len(seen) > _REACH_LIMIT:
                return names, False, ""
            co_names = code.co_names
            if bounded and (any(n in _DYNAMIC for n in co_names) or _imports(code)):
                bounded = False  # a computed lookup, or a module it imports (whose code calls what?)
            spaces: list = [_cls_dict(x) for x in libs]
            for n in co_names if modules else ():  # modules it may import by name (`from torch import _utils`)
                m = dict.get(_MODULES, n)
                if type(m) is _ModuleType:
                    spaces.append(_O_DICT_GET(m, "__dict__"))
            if type(globs) is dict:
                spaces.append(globs)
                for n in co_names:
                    g: Any = dict.get(globs, n)
                    if type(g) is _ModuleType:
                        bounded = False
                    elif any(k is type for k in _T_MRO.__get__(type(g), type)) and self.library_class(g):
                        for k in _T_MRO.__get__(g, type):
                            if k is not object:
                                spaces.append(_cls_dict(k))
                                co_names += tuple(i for i in ("__init__", "__new__", "__call__") if i in _cls_dict(k))
            for k in code.co_consts:
                if type(k) is _CodeType:
                    todo.append((k, globs, None))
                elif type(k) is str and k.isidentifier():
                    names.add(k)
            found = []
            if fn is not None and fn.__closure__ is not None:
                for cell in fn.__closure__:
                    try:
                        found.append(cell.cell_contents)
                    except ValueError:
                        continue
            for n in co_names:
                names.add(n)
                for space in spaces:  # (grows: a module an attribute chain reaches, `torch._utils._get_obj_state`)
                    val: Any = space.get(n)  # a class's mappingproxy or a module's dict
                    tv = type(val)
                    if tv is _ModuleType and modules and len(spaces) < 64:
                        md = _O_DICT_GET(val, "__dict__")
                        if type(md) is dict and not any(md is x for x in spaces):
                            spaces.append(md)
                        continue
                    if tv is staticmethod or tv is classmethod:
                        val, tv = val.__func__, type(val.__func__)
                    found.extend((val.fget, val.fset, val.fdel) if tv is property else (val,))
            for f in found:
                if type(f) is not _FunctionType:
                    continue
                if not _library_function(f):
                    if _generated_by_library(f):
                        continue  # a dataclass's or namedtuple's generated method: not the notebook's
                    return names, bounded, f"the notebook's function `{f.__code__.co_name}`"
                todo.append((f.__code__, f.__globals__, f))
        return names, bounded, ""

    def check(self, obj: Any) -> None:
        """Raise `_Refused` when pickling `obj` could run the user's code."""
        t = type(obj)
        why, lib = self.check_type(t)
        if why:
            raise _Refused(f"{_type_name(obj)}: {why}")
        if t is _FunctionType or issubclass(t, type) or t is _BuiltinFunctionType:
            mod = _T_MODULE.__get__(obj, type) if t is not _FunctionType and t is not _BuiltinFunctionType \
                else obj.__module__  # (a function's and a C function's: a C member of their static type)
            hook = self.module_hook(mod) if mod is not None else self.hooked_modules()
            if hook:  # pickled by reference: its name is looked up in its module (or, unnamed, in every module)
                raise _Refused(f"{_type_name(obj)}: {hook}")
            return  # a class (its metaclass was checked) or a function: no instance hooks pickle reads
        if t is _ModuleType:
            return
        try:
            d = _O_DICT_GET(obj, "__dict__")
        except Exception:
            return
        if type(d) is not dict:
            raise _Refused(f"{_type_name(obj)}: its __dict__ is not a plain dict")
        for k in d:
            if type(k) is not str:
                raise _Refused(f"{_type_name(obj)}: its __dict__ has a non-string key")
            if k in _PICKLING or k == "__reducer_override__":
                raise _Refused(f"{_type_name(obj)}: the instance has its own `{k}`: pickling it would run it")

    def hooked_modules(self) -> str:
        """A module whose name lookups could run the notebook's code, if any (pickle searches every module for an
        object that names none)."""
        hit = self.libs.get("hooked")
        if hit is None:
            hit = next((h for h in (self.module_hook(n) for n in list(dict.keys(_MODULES))) if h), "")
            self.libs["hooked"] = hit
        return str(hit)

    def prewalk(self, obj: Any, limit: int = 200_000) -> None:
        """A library object its library pickles with its own code (which pickle does not see into, Keras's
        model saving): every object reachable through instance dicts, lists, tuples and dicts must be proven
        safe first, and no notebook class may be among them."""
        stack, seen = [obj], 0
        while stack:
            o = stack.pop()
            if id(o) in self.walked:
                continue
            self.walked[id(o)] = o
            seen += 1
            if seen > limit:
                raise _Refused(f"{_type_name(obj)} holds too many objects to prove its own pickling safe")
            t = type(o)
            if t in (int, float, str, bytes, bool, type(None), complex):
                continue
            self.check(o)
            if o is not obj and t is not type and t is not _FunctionType and not self.library_class(t):
                raise _Refused(f"{_type_name(obj)} holds a {_type_name(o)} of the notebook's, which its library's "
                               "own pickling would call")
            if t is _ModuleType:
                continue
            if t is _FunctionType and not _library_function(o) and o is not obj:
                for ref in self.refs.get(id(o), ()):
                    raise _Refused(f"{_type_name(obj)} holds the notebook's function `{ref}` on an object, which its "
                                   "library's own pickling may call")
            if t is dict or (issubclass(t, dict) and self.check_type(t)[1]):
                stack.extend(dict.values(o))
            elif t is list or t is tuple or ((issubclass(t, (list, tuple))) and self.check_type(t)[1]):
                stack.extend(list.__iter__(o) if issubclass(t, list) else tuple.__iter__(o))
            if t is not type:
                try:
                    d = _O_DICT_GET(o, "__dict__")
                except Exception:
                    d = None
                if type(d) is dict:
                    for k, x in dict.items(d):
                        if type(x) is _FunctionType:
                            self.refs.setdefault(id(x), []).append(k)
                        stack.append(x)


def _type_name_of(cls: type) -> str:
    try:
        mod, qual = _T_MODULE.__get__(cls, type), _T_QUALNAME.__get__(cls, type)
        return f"{mod}.{qual}" if type(mod) is str and type(qual) is str else "?"
    except Exception:
        return "?"


_OWN_REDUCER_MODULES = ("keras", "tf_keras", "tensorflow")  # libraries whose pickling walks state pickle cannot see


def _unreproducible(obj: Any) -> str | None:
    """State of a library object its own serialization does not carry, which the cell may depend on."""
    mod = _T_MODULE.__get__(type(obj), type)
    if type(mod) is str and mod.startswith(("keras.", "tf_keras.", "tensorflow.")):
        d = own_dict(obj)
        traced = any(d.get(f) is not None for f in ("train_function", "test_function", "predict_function"))
        opt = d.get("_optimizer") or d.get("optimizer")
        built = True
        if opt is not None:
            od = own_dict(opt) if type(opt) is not type else {}
            built = od.get("built", True) if type(od) is dict else True
        if traced and opt is not None and built is False:
            return ("has a traced training step whose optimizer was never built (a failed fit): a copy rebuilt "
                    "from its configuration and weights would not fail the way the kernel's model does")
    return None


class _Control:
    """What stops an export: a request waiting for the kernel, the deadline, the daemon's cancel file, the copy
    cap, the memory floor."""

    def __init__(self, d: str, max_s: float, cap: int, waiting: Any = None) -> None:
        self.cancel_path = _join(d, "cancel")
        self.max_s = max_s
        self.budget(max(max_s, _WATCHED_SHRINK_S) if waiting is not None else max_s)
        self.cap = cap
        self.written = 0
        self.next_check = 0
        self.stop: str | None = None
        self.waiting = waiting  # kernel/waiting.shell_watch's check (the main thread's only), or None

    def budget(self, seconds: float) -> None:
        """From now on, at most `seconds` of the kernel's CPU time: what the user's queued cell waits on (a loaded
        machine stretches the wall clock, not the work); the wall clock bounds it too, at a multiple, for a kernel
        starved of CPU."""
        self.cpu_deadline = _process_time() + seconds
        self.deadline = _monotonic() + max(5.0, 5 * seconds)

    def copying(self) -> None:
        """The copy itself starts: its own `max_s` where shrinking had the watched budget (else what is left of
        the one budget shrinking shared)."""
        if self.waiting is not None:
            self.budget(self.max_s)

    def watch(self) -> None:
        """On the kernel's main thread: stop when a request waits for it."""
        if not self.stop and self.waiting is not None and self.waiting():
            self.stop = _QUEUED

    def check(self) -> None:
        """On the kernel's main thread, between the steps of shrinking: the same stops as while pickling."""
        self.watch()
        self.poll()
        if self.stop:
            raise ShrinkStopped(self.stop)

    def add(self, n: int) -> None:
        self.written += n
        if self.cap and self.written > self.cap:
            self.stop = f"the values it reads pickle to more than {self.cap >> 20} MiB"
        if _process_time() > self.cpu_deadline:  # at every frame (64 KiB): what the user's cell waits on
            self.stop = _OVER_TIME
        if self.written >= self.next_check:
            self.next_check = self.written + _CHECK_EVERY
            self.poll()
        if self.stop:
            raise _Stopped(self.stop)

    def poll(self) -> None:
        if self.stop:
            return
        if _monotonic() > self.deadline or _process_time() > self.cpu_deadline:
            self.stop = _OVER_TIME
        elif _exists(self.cancel_path):
            self.stop = "cancelled"
        else:
            room = memory_headroom()
            if room is not None and room < _FLOOR:
                self.stop = (f"the kernel's memory is short ({room >> 20} MiB left before its limit): copying "
                             "could push it out of memory")


class _Sink:
    """The state file, written as the pickler goes (its 64 KiB frames), counted."""

    def __init__(self, path: str | None, ctl: _Control) -> None:
        self.f = private_open(path, "wb", buffering=0) if path else None
        self.ctl = ctl

    def write(self, b: bytes | bytearray | memoryview) -> int:
        n = len(b)
        self.ctl.add(n)
        if self.f is not None:
            self.f.write(b)
        return n

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def _pickler_class(cp: Any, proof: _Proof, ctl: _Control) -> type[Any]:
    torch: Any = _MODULES.get("torch")  # when None, `tensor` is None too and no torch branch runs
    copyreg = _MODULES.get("copyreg")  # its reducers: the notebook's may be registered there (copyreg.pickle)
    table = dict.get(_O_DICT_GET(copyreg, "__dict__"), "dispatch_table") if copyreg is not None else None
    registered = table if type(table) is dict else {}
    io_base = _IO_BASE
    tensor: Any = _mdict(torch).get("Tensor") if torch is not None else None
    parameter: Any = _mdict(_module("torch.nn.parameter")).get("Parameter") if tensor is not None else None
    if tensor is not None and not (proof.pristine(tensor) and proof.pristine(parameter)):
        tensor = None  # torch's classes patched by the notebook: tensors are pickled by torch's own (proven) hook
    if tensor is not None:
        torch = _SimpleNamespace(Tensor=tensor, nn=_SimpleNamespace(Parameter=parameter))
    nd = _ndarray()

    def tagged(obj: Any, copy: Any, device: str, keep_dict: bool) -> Any:
        """`copy` (a detached tensor over `obj`'s data, or its CPU copy) made `obj`'s kind again and tagged with
        the device it lives on (worker/devices.py): what is pickled in its place; the user's tensor is not touched."""
        if type(obj) is torch.nn.Parameter:
            copy = torch.nn.Parameter(copy, requires_grad=obj.requires_grad)
        elif obj.requires_grad:
            copy.requires_grad_(True)
        if keep_dict:
            copy.__dict__.update(obj.__dict__)
        copy.__dict__["_crane_vdev"] = device
        if obj.is_leaf and obj.grad is not None:
            # torch's pickling drops `.grad`; loading sets every `__dict__` key with setattr, so the copy gets its
            # gradient back (the `grad` descriptor wins over this key here)
            copy.__dict__["grad"] = obj.grad
        return copy.__reduce_ex__(5)

    base: Any = cp.CloudPickler

    class Pickler(base):
        def reducer_override(self, obj: Any) -> Any:
            if ctl.stop:
                raise _Stopped(ctl.stop)
            proof.check(obj)  # before anything reads the object (cloudpickle's isinstance reads __class__)
            t = type(obj)
            red = dict.get(registered, t)
            if red is not None and not _library_function(red):  # copyreg.pickle(T, notebook_function)
                raise _Refused(f"{_type_name(obj)}: its pickling was registered with copyreg by the notebook")
            mro = _T_MRO.__get__(t, type)
            if any(k is io_base for k in mro) and _T_NAME.__get__(t, type) not in ("BytesIO", "StringIO"):
                raise TypeError(f"cannot copy an open file or stream ({_T_NAME.__get__(t, type)})")
            if nd is not None and any(k is nd for k in mro):
                _materialised(obj, nd, ctl)
            mod = _T_MODULE.__get__(t, type)
            if type(mod) is str and mod.partition(".")[0] in _OWN_REDUCER_MODULES and id(obj) not in proof.walked:
                proof.prewalk(obj)
            if tensor is not None and (t is tensor or t is parameter):  # torch's own classes: nothing of the notebook's
                try:
                    device = obj.device.type
                    if device != "cpu" or obj.retains_grad or obj.is_inference() or (
                            obj.requires_grad and not obj.is_leaf):
                        # the copy differs: a CPU leaf in the worker, its graph, retained gradient and
                        # inference flag gone
                        proof.uncarried.append("torch")
                    if device == "cpu" and (t is torch.Tensor or t is torch.nn.Parameter) \
                            and "_crane_vdev" not in obj.__dict__:
                        return tagged(obj, obj.detach(), "cpu", keep_dict=True)
                    if device not in ("cpu", "meta"):
                        return tagged(obj, obj.detach().to("cpu"), str(obj.device), keep_dict=False)
                except (_Refused, _Stopped):
                    raise
                except Exception:
                    pass
            return super().reducer_override(obj)

    return Pickler


def _ndarray() -> Any:
    """numpy's `ndarray` (a static type: nothing on it can be replaced), or None."""
    nd = _mdict(_module("numpy")).get("ndarray")
    return nd if type(nd) is type and not _T_FLAGS.__get__(nd, type) & _HEAPTYPE else None


def _array_bytes(obj: Any, nd: Any) -> tuple[int, bool]:
    """(what pickling the array materialises: its `nbytes`, a view's and a broadcast's included; whether its
    data goes out of band as is: contiguous) read through ndarray's own C descriptors (a subclass's `nbytes` or
    `shape` property is never called)."""
    nd_dict = _cls_dict(nd)
    flags = nd_dict["flags"].__get__(obj, nd)
    return int(nd_dict["nbytes"].__get__(obj, nd)), bool(flags.c_contiguous or flags.f_contiguous)


def _materialised(obj: Any, nd: Any, ctl: _Control) -> None:
    """Stop before numpy's reducer copies a non-contiguous array (a view, a broadcast, a zero-stride array) in band
    inside the kernel when the copy would pass the cap or the memory the kernel has left: a broadcast of 8 bytes
    can be gigabytes once materialised."""
    nbytes, contiguous = _array_bytes(obj, nd)
    if contiguous:
        return  # its buffer goes out of band, written as it is
    if ctl.cap and ctl.written + nbytes > ctl.cap:
        ctl.stop = f"the values it reads pickle to more than {ctl.cap >> 20} MiB (a non-contiguous array)"
        raise _Stopped(ctl.stop)
    room = memory_headroom()
    if room is not None and nbytes > room - _FLOOR:
        ctl.stop = (f"the kernel's memory is short ({room >> 20} MiB left before its limit): copying a "
                    f"non-contiguous array of {nbytes >> 20} MiB could push it out of memory")
        raise _Stopped(ctl.stop)


def _dump_thread(cp: Any, objs: dict, d: str | None, tag: str, ctl: _Control, proof: _Proof) -> dict:
    """Pickle `objs` into `d` (None: count only) in a thread with a known stack and CRANE's recursion limit;
    the calling thread waits, polling the controls. {"ok", "buffers": [sizes], "bytes", "error"}."""
    out: dict = {"ok": False, "buffers": [], "bytes": 0, "error": None}
    sink = _Sink(_join(d, f"state{tag}.pkl") if d else None, ctl)

    def keep(pb: Any) -> bool:  # a pickle.PickleBuffer
        try:
            raw = pb.raw()
        except BufferError:
            return True  # not contiguous: in band
        i = len(out["buffers"])
        ctl.add(raw.nbytes)
        if d:
            with private_open(_join(d, f"buf{tag}-{i}"), "wb", buffering=0) as f:
                step = 1 << 24
                for off in range(0, raw.nbytes, step):
                    f.write(raw[off:off + step])
                    if off:
                        ctl.add(0)
        out["buffers"].append(raw.nbytes)
        return False

    def work() -> None:
        _setprofile(None)
        _settrace(None)
        try:
            _pickler_class(cp, proof, ctl)(sink, protocol=5, buffer_callback=keep).dump(objs)
            out["ok"] = True
        except RecursionError:
            out["error"] = ("RecursionError", "it is nested deeper than a copy may go")
        except BaseException as exc:  # noqa: BLE001 - reported, the kernel carries on
            out["error"] = (type(exc).__name__, str(exc)[:500])
        finally:
            sink.close()

    old_limit = _getrecursionlimit()
    done = _allocate_lock()  # held by the pickler thread until it ends (`_thread`: no `threading.Thread` looked up)
    done.acquire()

    def run() -> None:
        try:
            work()
        finally:
            done.release()

    _setrecursionlimit(max(_DEPTH, 200))
    try:
        old_stack = _stack_size(_STACK)
        try:
            _start_thread(run, ())
        finally:
            _stack_size(old_stack)
        while not done.acquire(True, 0.05):
            ctl.watch()  # here only: the main thread's own queue
            ctl.poll()  # the pickler sees `stop` at its next object or write
    finally:
        _setrecursionlimit(old_limit)
    out["bytes"] = ctl.written
    if ctl.stop and not out["ok"]:
        out["error"] = ("Stopped", ctl.stop)
    return out


def _lib_method(t: type, name: str) -> types.FunctionType | None:
    """The library's own function `name` of class `t` (None when the notebook replaced or shadowed it)."""
    for k in _T_MRO.__get__(t, type):
        kd = _cls_dict(k)
        if name in kd:
            v = kd[name]
            return v if type(v) is _FunctionType and _library_function(v) else None
    return None


_SAMPLE = 64  # items of a container looked at to size it (beyond, the sample is scaled to its length)


def _sample(v: Any) -> tuple[list, int]:
    """(up to `_SAMPLE` items of a plain container, spread over it, keys of a dict included; its length). Exact
    types only: nothing of the user's is called."""
    t = type(v)
    n = len(v)
    if t is dict:
        if n <= _SAMPLE:
            return list(dict.keys(v)) + list(dict.values(v)), n
        out: list = []
        for k, x in _islice(dict.items(v), 0, None, n // _SAMPLE):  # a dict has no positions: a C-level stride
            out += (k, x)
        return out[:2 * _SAMPLE], n
    if t is list or t is tuple:
        step = max(1, n // _SAMPLE)
        return [v[i] for i in range(0, n, step)][:_SAMPLE], n
    items: list = []
    for x in set.__iter__(v) if t is set else frozenset.__iter__(v):
        items.append(x)
        if len(items) >= _SAMPLE:
            break
    return items, n


def _raw_bytes(obj: Any, proof: _Proof, depth: int = 0, seen: dict | None = None, top: str = "") -> int:
    """What copying a value whole costs, counted by what a pickle will materialise: numpy arrays at their `nbytes`
    wherever they sit (a view's and a broadcast's included: numpy's reducer copies those whole; each array once),
    in-band strings/bytes, plain containers by a sample of their items (`_SAMPLE`) scaled to their length, and
    objects of library classes (a DataFrame and its blocks, a sparse matrix, a fitted model) by the arrays their
    instance dicts hold, five levels deep. Nothing is called: no pandas `memory_usage`, no `nbytes` property of a
    class claiming numpy; reads go through C descriptors and instance dicts only."""
    seen = {} if seen is None else seen
    if id(obj) in seen or len(seen) > 20_000:
        return 0
    seen[id(obj)] = obj
    t = type(obj)
    if t is str or t is bytes or t is bytearray:
        return len(obj) + 8
    if depth > 5:
        return 16
    if t is dict or t is list or t is tuple or t is set or t is frozenset:
        items, n = _sample(obj)
        if not items:
            return 8
        per = sum(_raw_bytes(x, proof, depth + 1, seen, top) for x in items) / (len(items) / (2 if t is dict else 1))
        return int(per * n) + 8
    nd = _ndarray()
    mro = _T_MRO.__get__(t, type)
    if nd is not None and any(k is nd for k in mro):
        return _array_bytes(obj, nd)[0]
    tensor = _mdict(_module("torch")).get("Tensor")
    if tensor is not None and t is tensor and proof.pristine(tensor):
        try:
            return int(obj.element_size() * obj.numel())
        except Exception:
            return 0
    if not proof.library_class(t) or proof.check_type(t)[0]:
        return 16
    size = next((_cls_dict(k)["nbytes"] for k in mro if "nbytes" in _cls_dict(k)), None)
    if type(size) is _GetSetDescriptorType:  # a compiled class's own size (pyarrow's arrays): C code, no property
        try:
            n = size.__get__(obj, t)
            return n if type(n) is int else 16
        except Exception:
            return 16
    if not top:  # the library of the outermost library object: only its own compiled fields are read
        mod = _T_MODULE.__get__(t, type)
        top = mod.partition(".")[0] if type(mod) is str else "?"
    return 16 + sum(_raw_bytes(x, proof, depth + 1, seen, top) for x in _held(obj, t, mro, proof, top))


def _held(obj: Any, t: type, mro: tuple, proof: _Proof, top: str) -> list:
    """What a library object holds: its instance dict's values, and the fields the classes of the outermost
    object's own library (`top`) expose through C descriptors (slots; Cython's `cdef public` attributes: pandas'
    blocks and their values; never another library's, whose fields may be computed properties)."""
    out = list(dict.values(own_dict(obj)))[:256]
    for k in mro:
        mod = _T_MODULE.__get__(k, type)
        if k is object or type(mod) is not str or mod.partition(".")[0] != top or not proof.library_class(k):
            continue
        for name, d in list(_cls_dict(k).items())[:64]:
            # slots (a struct field: no code), and Cython's `cdef public` fields (getsets without a docstring; a
            # documented getset is a computed property, which may warn or compute: never read)
            if (type(d) is _MemberDescriptorType or type(d) is _GetSetDescriptorType and d.__doc__ is None) \
                    and type(name) is str and not name.startswith("__"):
                try:
                    out.append(d.__get__(obj, t))
                except Exception:
                    continue
    return out


def _settings(proof: _Proof, recursion_limit: int) -> dict:
    """Interpreter and library settings a fresh interpreter would not have (shared/carry.py's read side, through
    `_Lib`), and torch's."""
    out = read_carried(_Lib(proof), recursion_limit)
    torch_settings = _torch_settings()
    if torch_settings is not None:
        out["torch"] = torch_settings
    return out


class _Lib:
    """What shared/carry.py's read side may touch in the kernel: plain modules' namespaces, functions proven to be
    the library's own (and named as expected: `np.geterr = os.fork` is not called), C-level attributes."""

    def __init__(self, proof: _Proof) -> None:
        self.proof = proof

    def mod(self, name: str) -> dict:
        return _mdict(_module(name))

    def call(self, fn: Any, name: str, *args: Any) -> Any:
        if not _callable_ok(fn, name):
            raise _Refused(name)
        return fn(*args)

    def method(self, cls: Any, name: str, *default: Any) -> Any:
        """`name` as the class's MRO defines it (read from the classes' dicts)."""
        if _is_class(cls):
            for k in _T_MRO.__get__(cls, type):
                kd = _cls_dict(k)
                if name in kd:
                    return kd[name]
        if default:
            return default[0]
        raise _Refused(name)

    def attr(self, obj: Any, name: str) -> Any:
        """A C-level attribute (a getset or member descriptor of the object's class), else refused."""
        d = self.method(type(obj), name)
        if type(d) is not _GetSetDescriptorType and type(d) is not _MemberDescriptorType:
            raise _Refused(name)
        return d.__get__(obj, type(obj))

    def attrs(self, obj: Any) -> dict:
        return own_dict(obj)

    def proven(self, cls: Any) -> bool:
        return _is_class(cls) and self.proof.pristine(cls)

    def class_name(self, cls: Any) -> str | None:
        if not _is_class(cls) or not self.proof.library_class(cls):
            return None
        mod, qual = _T_MODULE.__get__(cls, type), _T_QUALNAME.__get__(cls, type)
        if type(mod) is not str or type(qual) is not str or "<" in qual:
            return None
        obj: Any = _module(mod)
        for part in qual.split("."):
            obj = (_mdict(obj) if type(obj) is _MODULE_TYPE else _cls_dict(obj) if _is_class(obj) else {}).get(part)
        return f"{mod}:{qual}" if obj is cls else None


def _callable_ok(fn: Any, name: str) -> bool:
    """`fn` is the library's own function called `name`: a C function of a module, a C method descriptor, or a
    Python (or compiled) function of a library's file; never a bound method (of an object of whose?)."""
    t = type(fn)
    if t is _MethodType or fn is None:
        return False
    try:
        own = _O_DICT_GET(fn, "__name__")
    except Exception:
        own = None
        if _compiled_callable_type(t):  # nanobind's functions answer `__name__` in their type's own C getattr
            getter = next((_cls_dict(k)["__getattribute__"] for k in _T_MRO.__get__(t, type)
                           if "__getattribute__" in _cls_dict(k)), None)
            own = getter(fn, "__name__") if type(getter) is _WrapperDescriptorType else None
    if type(own) is not str or own != name:
        return False
    if t is _BuiltinFunctionType:
        owner = type(_O_DICT_GET(fn, "__self__"))
        return owner is _MODULE_TYPE or owner is type(None)
    return _library_function(fn)


def _torch_settings() -> dict | None:
    """torch's process-wide state a fresh interpreter would not have: the default dtype and device, grad mode (the
    main thread's: cells run there), deterministic algorithms, anomaly detection, matmul precision, the CPU random
    generator's state. Only torch's own functions are called (one the notebook replaced is not: then None, and a
    crash in torch stays "likely")."""
    torch = _MODULES.get("torch")
    if type(torch) is not _ModuleType:
        return None
    td = _O_DICT_GET(torch, "__dict__")

    def call(name: str, owner: dict = td) -> Any:
        fn: Any = dict.get(owner, name)
        t = type(fn)  # a module's C function or a library's Python function: never a bound method of an object
        owner_t = type(fn.__self__) if t is _BuiltinFunctionType else None
        if not (t is _BuiltinFunctionType and (owner_t is _ModuleType or owner_t is type(None))
                or t is _FunctionType and _library_function(fn)):
            raise _Refused(name)
        return fn()

    try:
        rnd = dict.get(td, "random")
        rng = call("get_rng_state", _O_DICT_GET(rnd, "__dict__")) if type(rnd) is _ModuleType else None
        out = {"default_dtype": str(call("get_default_dtype")), "grad_enabled": bool(call("is_grad_enabled")),
               "deterministic": bool(call("are_deterministic_algorithms_enabled")),
               "deterministic_warn_only": bool(call("is_deterministic_algorithms_warn_only_enabled")),
               "anomaly": bool(call("is_anomaly_enabled")),
               "matmul_precision": str(call("get_float32_matmul_precision")),
               "rng": bytes(rng.tolist()).hex() if rng is not None and type(rng) is dict.get(td, "Tensor") else None}
        out["default_device"] = str(call("get_default_device")) if "get_default_device" in td else "cpu"
        return out
    except Exception:
        return None


def _accessors(proof: _Proof) -> list:
    """Pandas accessors the notebook registered: (class name, accessor name, accessor class), copied by value.
    Read from the classes' dicts, types compared by identity (no `isinstance`, no metaclass `__eq__`)."""
    pd = _mdict(_module("pandas"))
    out: list = []
    for target in ("DataFrame", "Series", "Index"):
        cls: Any = pd.get(target)
        if not _is_class(cls) or not proof.library_class(cls):
            continue
        names = _cls_dict(cls).get("_accessors")
        found: list = list(set.__iter__(names)) if type(names) is set else \
            list(frozenset.__iter__(names)) if type(names) is frozenset else []
        for name in sorted(n for n in found if type(n) is str):
            acc = _cls_dict(cls).get(name)
            if not _is_class(type(acc)) or not proof.library_class(type(acc)):
                continue
            inner = dict.get(own_dict(acc), "_accessor")
            if type(inner) is type and not proof.library_class(inner):
                out.append((target, name, inner))
    return out


def _modules() -> list[str]:
    """The top-level packages the notebook imported (not the standard library's, not the kernel's own), to import
    again in the worker: read from `sys.modules` as a dict, each module's `__file__` from its namespace (a module
    object's `__getattr__`, or an object standing in for a module, is never touched)."""
    out: list[str] = []
    for name in list(dict.keys(_MODULES)):
        if type(name) is not str:
            continue
        top = name.partition(".")[0]
        if top in out or top in _STDLIB_NAMES or top.startswith(("_", "pydev")) or top in _KERNEL_MODS:
            continue
        path = _mdict(_module(top)).get("__file__")
        if type(path) is str and path:
            out.append(top)
    return out


def _torch_facts() -> dict:
    cuda = _mdict(_module("torch.cuda"))
    if not cuda:
        return {}
    try:
        if not _call(cuda, "is_initialized"):
            return {"cuda": False}
        n = _call(cuda, "device_count")
        if type(n) is not int:
            return {"cuda": False}
        names = [_call(cuda, "get_device_name", i) for i in range(n)]
        return {"cuda": True, "count": n, "names": [x if type(x) is str else "?" for x in names]}
    except Exception:
        return {"cuda": False}


def _call(owner: dict, name: str, *args: Any) -> Any:
    """`owner[name](*args)` when it is the library's own function of that name (else refused)."""
    fn: Any = dict.get(owner, name)
    if not _callable_ok(fn, name):
        raise _Refused(name)
    return fn(*args)


def _in_kernel_ok(obj: Any) -> bool:
    """Shrinking runs library code in the kernel: only for values whose subsets touch no file (a Hugging Face
    dataset's `select` may write an indices cache: those are copied whole). Called under `_shrink`'s gate."""
    vals = dict.values(obj) if type(obj) is dict else obj if type(obj) is list or type(obj) is tuple else ()
    return all((_kind(v) or ("",))[0] != "HFDataset" for v in [obj, *list(vals)[:32]])


def _known(kind: str, orig: Any, check: Any = None) -> dict | None:
    """What the worker needs to tell a label the subset dropped from one the data never had (kernel/miniature's
    `artefact`): the original index (RangeIndex, or up to 1M labels; else unknown) and, for each label-like
    column, its dtype and the sorted stable hashes (pandas' `hash_array`) of its distinct values (up to 1M;
    else unknown). A hash collision can only make a crash inconclusive, never a false one. `check` is called
    between columns and chunks (kernel/miniature's `ShrinkStopped` stops it)."""
    if kind not in ("DataFrame", "Series"):
        return None
    pd = _MODULES.get("pandas")
    idx = orig.index
    index = idx if (type(idx).__name__ == "RangeIndex" or len(idx) <= 1_000_000) else None
    cols: dict = {}
    names = [None] if kind == "Series" else list(orig.columns)[:200]
    for c in names:
        _shrink_check(check)
        try:
            col = orig if c is None else orig[c]
            if getattr(col, "ndim", 1) != 1 or col.dtype.kind not in "OiubU":
                continue
            arr = col.to_numpy()
            hashes = _label_hashes(arr, pd, check) if pd is not None else None
            cols[c] = {"dtype": str(arr.dtype), "hashes": hashes}
        except ShrinkStopped:
            raise
        except Exception:
            cols[c] = None
    return {"index": index, "columns": cols}


def _label_hashes(arr: Any, pd: Any, check: Any) -> Any:
    """The sorted distinct `hash_array` values of `arr` (each value's hash depends on it alone: chunks of
    `_SHRINK_CHUNK` rows, `check` between them), or None past 1M."""
    np = sys.modules["numpy"]
    acc = None
    for a in range(0, max(1, len(arr)), _SHRINK_CHUNK):
        _shrink_check(check)
        u = np.unique(pd.util.hash_array(arr[a:a + _SHRINK_CHUNK]))
        acc = u if acc is None else np.union1d(acc, u)
        if len(acc) > 1_000_000:
            return None
    return acc


_SHRINK_LIBRARIES = ("numpy", "pandas", "pandas.util", "torch", "torch.utils.data", "scipy.sparse", "datasets")


def _untouched(proof: _Proof, name: str) -> bool:
    """A library none of whose loaded modules (`name` and `name.*`) holds a function the notebook put there or a
    class the notebook patched (`_Proof.pristine`): its code, run in the kernel (shrinking), reaches only its own.
    A library not loaded is untouched. Cached in the proof."""
    key = ("untouched", name)
    hit = proof.libs.get(key)
    if hit is not None:
        return bool(hit)
    ok = True
    prefix = name + "."
    for mod_name in list(dict.keys(_MODULES)):
        if type(mod_name) is not str or not (mod_name == name or mod_name.startswith(prefix)):
            continue
        m = dict.get(_MODULES, mod_name)
        if m is None:
            continue
        if type(m) is not _MODULE_TYPE and not (proof.library_class(type(m)) and proof.pristine(type(m))):
            ok = False
            break
        for v in list(dict.values(_mdict(m))):
            if _is_class(v):
                own = _T_MODULE.__get__(v, type)
                ok = (proof.library_class(v) or _no_notebook_code(v)) and (
                    not (type(own) is str and own.startswith(name)) or proof.pristine(v))
            elif type(v) is _FunctionType or type(v) is _MethodType:
                ok = _library_function(v) or _generated_by_library_value(v)
            if not ok:
                break
        if not ok:
            break
    proof.libs[key] = ok
    return ok


def _no_notebook_code(cls: type) -> bool:
    """No function, method wrapper or property of the class's own dict is code of the notebook's (its data aside:
    zoneinfo's class keeps a cache in a class attribute)."""
    for v in _cls_dict(cls).values():
        t = type(v)
        if (t is _FunctionType or t is staticmethod or t is classmethod or t is property) and not (
                _library_function(v) or _generated_by_library_value(v)):
            return False
    return True


def _shrink_gate(proof: _Proof) -> Any:
    """What kernel/miniature may look into while it shrinks in the kernel: an object proven (`_Proof.check`), a
    plain container, or an instance of a pristine library class, and only while the libraries shrinking calls are
    untouched by the notebook (their functions and classes its own)."""
    def gate(obj: Any) -> bool:
        if not all(_untouched(proof, n) for n in _SHRINK_LIBRARIES):
            return False
        try:
            proof.check(obj)
        except _Refused:
            return False
        t = type(obj)
        return t is dict or t is list or t is tuple or proof.pristine(t)
    return gate


def _shrink(objs: dict, spec: dict, proof: _Proof, check: Any = None) -> tuple[list, list]:
    """Replace the large values in `objs` (a copy of the cell's names, never the user's namespace) by consistent
    row subsets (kernel/miniature's rules): (kept, what the worker needs about each original). `check` is called
    between objects, columns and chunks: kernel/miniature's `ShrinkStopped` stops it (`objs` left whole).
    kernel/miniature looks only into what `_shrink_gate` passes: nothing of the notebook's is sized or called."""
    _GATE[:] = [_shrink_gate(proof)]
    try:
        return _shrink_gated(objs, spec, check)
    finally:
        _GATE.clear()


def _shrink_gated(objs: dict, spec: dict, check: Any = None) -> tuple[list, list]:
    names = [n for n, o in dict.items(objs) if _in_kernel_ok(o)]
    _REGISTRY["objects"].clear()
    before = dict(objs)
    try:
        kept = shrink_namespace(objs, names, spec, check)
        known = [{"label": label, "kind": kind, "n": n, "k": k, "known": _known(kind, orig, check)}
                 for label, kind, orig, _new, n, k in _REGISTRY["objects"]]
    except ShrinkStopped:
        objs.clear()
        objs.update(before)
        raise
    finally:
        _REGISTRY["objects"].clear()  # no reference to the user's objects is kept in the kernel
    return kept, known


def _process() -> dict:
    """This kernel's process: pid, start time, pid namespace (the daemon ends its workers when it ends)."""
    pid, start, pidns = process_identity()
    return {"kernel_pid": pid, "kernel_start": start, "kernel_pidns": pidns}


def _history_value(ns: dict, name: str) -> Any:
    """`In`/`_ih` as a plain list of strings and `Out`/`_oh` as a plain dict (copies: never the user's)."""
    v = dict.get(ns, name)
    if name in ("In", "_ih") and type(v) is list:
        return [x if type(x) is str else "" for x in list.__iter__(v)]
    if name in ("Out", "_oh") and type(v) is dict:
        return dict(dict.items(v))
    return v


def export(args: Any) -> dict:
    """Write the state the cell reads into the run's private directory (see the module docstring). The user's
    profile/trace hooks are off meanwhile (inline: kernel/shield.py)."""
    saved = (_getprofile(), _gettrace(), _THREADING.get("_profile_hook"),
             _THREADING.get("_trace_hook"))
    _setprofile(None)
    _settrace(None)
    _THREADING["_profile_hook"] = _THREADING["_trace_hook"] = None
    try:
        why = free_threaded()
        if why:
            return {"ok": False, "reason": why}
        return _export(args)
    finally:
        _THREADING["_profile_hook"], _THREADING["_trace_hook"] = saved[2], saved[3]
        _settrace(saved[1])
        _setprofile(saved[0])


def _connection_file() -> str | None:
    """The kernel's connection file (`-f PATH` / `--f=PATH` on its command line, read from `sys.argv` by exact
    type), so the portable worker can hide it (it holds the key that signs requests to this kernel)."""
    argv = dict.get(_SYS, "argv")
    if type(argv) is not list:
        return None
    argv = list(list.__iter__(argv))
    for i, a in enumerate(argv):
        if type(a) is not str:
            continue
        if a in ("-f", "--f") and i + 1 < len(argv) and type(argv[i + 1]) is str:
            return _abspath(argv[i + 1])
        for p in ("-f=", "--f="):
            if a.startswith(p):
                return _abspath(a[len(p):])
    return None


def _abspath(p: str) -> str:
    return p if p.startswith(_SEP) else _join(_getcwd(), p)


def _cloudpickle() -> Any:
    """CRANE's private cloudpickle, taken once (a reference kept from then on: the notebook replacing
    `sys.modules["_crane_cloudpickle"]` or its classes later changes nothing), its `CloudPickler` proven to be
    CRANE's own code; the module's `__builtins__` become CRANE's (the C pickler imports the modules of the classes
    it saves through the `__import__` it finds there)."""
    m = dict.get(_MODULES, "_crane_cloudpickle")
    if _CP and (m is None or _CP[0] is m):
        return _CP[1]
    if type(m) is not _MODULE_TYPE:
        return None
    md = _mdict(m)
    cls = md.get("CloudPickler")
    if type(cls) is not type or not all(
            type(v) is not _FunctionType or v.__code__.co_filename.startswith("<crane-kernel")
            for v in _cls_dict(cls).values()):
        return None
    md["__builtins__"] = BUILTINS
    _CP[:] = [m, _SimpleNamespace(CloudPickler=cls)]
    return _CP[1]


_CP: list = []
# builtins the export and the libraries it calls rely on: one the notebook replaced (before CRANE was installed, or
# since) would run in the kernel
_CORE_BUILTINS = ("__import__", "__build_class__", "len", "isinstance", "issubclass", "getattr", "hasattr", "setattr",
                  "iter", "next", "super", "type", "object", "dict", "list", "tuple", "set", "frozenset", "str",
                  "bytes", "int", "float", "bool", "repr", "hash", "id", "sorted", "min", "max", "sum", "any", "all",
                  "map", "filter", "zip", "enumerate", "range", "compile", "exec", "eval", "vars", "callable",
                  "format", "abs", "round", "divmod", "ord", "chr", "reversed", "slice", "memoryview", "bytearray",
                  "property", "staticmethod", "classmethod")
_BUILTINS_DICT: dict = _O_DICT_GET(_MODULES["builtins"], "__dict__")


def _patched_builtins() -> str | None:
    """A builtin the notebook replaced (named), else None: the C pickler and every library function look theirs
    up in the builtins module at call time."""
    for name in _CORE_BUILTINS:
        now, then = dict.get(_BUILTINS_DICT, name), dict.get(BUILTINS, name)
        if now is not then or not (type(then) is _BuiltinFunctionType or type(then) is type):
            return f"`builtins.{name}`"
    return None


_COPYREG_CALLED = ("_slotnames", "__newobj__", "__newobj_ex__", "_reconstructor", "_reduce_ex")


def _patched_copyreg() -> str | None:
    """A function of `copyreg` the C pickler calls for every plain instance (`object.__reduce_ex__`) that the
    notebook replaced (named), else None."""
    cr = _mdict(_module("copyreg"))
    for name in _COPYREG_CALLED:
        fn = cr.get(name)
        if fn is not None and not (type(fn) is _FunctionType and _library_function(fn)) and not _is_class(fn):
            return f"`copyreg.{name}`"
    return None


def _shell() -> Any:
    """The kernel's InteractiveShell: IPython's singleton, read from the class's own dict (no `get_ipython` the
    notebook may have replaced)."""
    cls = _mdict(_module("IPython.core.interactiveshell")).get("InteractiveShell")
    if not _is_class(cls):
        return None
    shell = _cls_dict(cls).get("_instance")
    return shell if shell is not None and _is_class(type(shell)) and _Proof().library_class(type(shell)) else None


def _user_ns(shell: Any) -> Any:
    """The shell's namespace from its instance dict (IPython 8: `user_ns`, 9: `_user_ns` behind a property)."""
    d = own_dict(shell)
    ns = dict.get(d, "_user_ns")
    return ns if ns is not None else dict.get(d, "user_ns")


def _interactivity(shell: Any) -> str:
    """`ast_node_interactivity` from the shell's trait values (an exact str; else IPython's default)."""
    values = dict.get(own_dict(shell), "_trait_values")
    v = dict.get(values, "ast_node_interactivity") if type(values) is dict else None
    return v if type(v) is str else "last_expr"


def _carried(settings: dict, facts: dict, proof: _Proof, objs: dict) -> list:
    """The rebuilt runtimes whose process-wide state the copy carries (then compared in the worker, shared/carry.py):
    torch on the CPU (its tensors carried whole); JAX, TensorFlow and Keras when their settings were read, no GPU is
    in play (their devices are the worker's own then), and, for TensorFlow/Keras, no value of theirs is copied
    (rebuilt from its configuration by its own saving code: not the kernel's object)."""
    out: list = []
    ts = settings.get("torch")
    if ts and ts["default_device"] == "cpu" and ts["rng"] and not facts["torch"].get("cuda") and not proof.uncarried:
        out.append("torch")
    if _exists("/dev/nvidia0") or _exists("/dev/kfd"):
        return out
    own_values = any(type(m) is str and m.partition(".")[0] in _OWN_REDUCER_MODULES
                     for m in (_T_MODULE.__get__(type(v), type) for v in dict.values(objs)))
    for key, runtimes in CARRIED_RUNTIMES.items():
        if key in settings and (key == "jax" or not own_values):
            out.extend(runtimes)
    return out


def _patched_classes(proof: _Proof, objs: dict) -> list:
    """The short names of the library classes of copied values the notebook patched (a method added or replaced):
    an AttributeError naming one in the copy is only "likely" (the copy's class is the library's own)."""
    out: list = []
    for v in dict.values(objs):
        t = type(v)
        if proof.library_class(t) and not proof.pristine(t):
            name = _T_NAME.__get__(t, type)
            if type(name) is str and name not in out:
                out.append(name)
    return out


def _export(args: Any) -> dict:
    t0 = _perf()
    if type(args) is not dict:
        return {"ok": False, "reason": "bad export request"}
    d = str(args["dir"])
    try:
        with private_open(_join(d, "token"), "r") as f:
            if f.read() != args["token"]:
                raise OSError("token mismatch")
    except OSError:
        return {"ok": False, "reason": "the kernel does not see the daemon's files (another machine or container)"}
    cp = _cloudpickle()
    if cp is None:
        return {"ok": False, "reason": "CRANE's private cloudpickle is not installed in the kernel"}
    patched = _patched_builtins() or _patched_copyreg()
    if patched:
        return {"ok": False, "reason": f"the notebook replaced {patched}: copying would call it in the kernel"}
    shell = _shell()
    if shell is None:
        return {"ok": False, "reason": "not an IPython kernel"}
    waiting, watch = shell_watch(shell)  # on the main thread, which owns what it watches
    ns = _user_ns(shell)
    if type(ns) is not dict:
        return {"ok": False, "reason": "the kernel's namespace is not a plain dict"}
    keys = list(dict.keys(ns))
    if not all(type(k) is str for k in keys):  # a str subclass's __eq__/__hash__ would run on every lookup
        return {"ok": False, "reason": "the kernel's namespace has a key that is not a plain string"}
    room = memory_headroom()
    if room is not None and room < _FLOOR:
        return {"ok": False, "reason": f"the kernel's memory is short ({room >> 20} MiB left before its limit): "
                                       "copying its state could push it out of memory"}
    proof = _Proof()
    objs: dict = {}
    skip = args.get("skip") or []  # a session's names already copied
    skip = {n for n in skip if type(n) is str} if type(skip) is list else set()
    names = args.get("names")
    if type(names) is not list:
        return {"ok": False, "reason": "bad export request (no names)"}
    for name in names:
        if type(name) is not str or name in _SKIP or name in skip or name not in ns:
            continue
        obj = _history_value(ns, name) if name in ("In", "_ih", "Out", "_oh") else dict.get(ns, name)
        try:
            proof.check(obj)
        except _Refused as exc:
            return {"ok": False, "reason": f"`{name}` ({_type_name(obj)}) cannot be copied without running the "
                                           f"notebook's code in the kernel: {exc}"}
        why = _unreproducible(obj)
        if why:
            return {"ok": False, "reason": f"`{name}` ({_type_name(obj)}) {why}"}
        objs[name] = obj
    for pair in (("In", "_ih"), ("Out", "_oh")):  # read under either name: the same object under both
        for a, b in (pair, pair[::-1]):
            if a in objs and b not in objs and b in ns:
                objs[b] = objs[a]
    spec, why, raw = args.get("miniature"), None, 0
    limit = int(args.get("copy_mb") or 0) << 20
    if not spec and limit:
        raw = sum(_raw_bytes(o, proof) for o in dict.values(objs))  # each name on its own, as each is pickled
        if raw > limit:
            spec = {"fraction": max(0.0005, min(0.5, limit / raw)), "floor_rows": 64, "min_rows": 2000,
                    "relative": 0.05, "seed": 0}
            why = (f"the values it reads hold {raw / 1e6:,.0f} MB, more than the {limit >> 20} MiB a transplant "
                   "copies whole")
    if room is not None and raw and raw > room - _FLOOR and not spec:
        return {"ok": False, "reason": f"the values it reads hold {raw >> 20} MiB, more than the kernel's memory "
                                       f"allows copying ({room >> 20} MiB left before its limit)"}
    kept: list = []
    known: list = []
    shrink_error = None
    cap = max(2 * limit, limit + (64 << 20)) if limit else 0
    # one kernel-time budget for the whole export, shrinking included; the same stops from here on
    # where the watch works the copy stops the moment a request waits: it may take `watched_max_s` of kernel time
    max_s = float(args.get("max_s") or 10.0)
    ctl = _Control(d, float(args.get("watched_max_s") or max_s) if waiting is not None else max_s, cap, waiting)
    watched = watch if waiting is not None else None  # what stopped it for a queued request (None: its time cap)
    if spec:
        _phase(d, "shrinking")
        try:
            kept, known = _shrink(objs, spec, proof, ctl.check)
        except ShrinkStopped:
            return _stopped(ctl.stop or _OVER_TIME, waiting, watch, watched, t0)
        except Exception as exc:  # copied whole, as if nothing were large
            shrink_error = f"{type(exc).__name__}: {exc}"
        if kept:
            objs["\x00crane-shrunk"] = known
    if cap and raw > cap and not kept:
        return {"ok": False, "reason": f"the values it reads hold {raw >> 20} MiB, more than a transplant copies "
                                       f"({cap >> 20} MiB), and cannot be shrunk to row subsets"}
    settings = _settings(proof, int(args.get("recursionlimit") or _getrecursionlimit()))
    accessors = _accessors(proof)
    if accessors:
        objs["\x00crane-accessors"] = accessors
    tag = str(args.get("tag") or "")  # a session's exports: state-N.pkl, buf-N-i
    tag = f"-{int(tag)}" if tag else ""
    _phase(d, "copying")
    ctl.copying()
    out = _dump_thread(cp, objs, d, tag, ctl, proof)
    objs.pop("\x00crane-accessors", None)
    if not out["ok"]:
        objs.pop("\x00crane-shrunk", None)
        ename, evalue = out["error"] or ("Error", "")
        if ename == "Stopped":
            return _stopped(evalue, waiting, watch, watched, t0)
        return {"ok": False, "reason": _culprit(cp, objs, ename, evalue, d, waiting), "watch": watched}
    sizes = out["buffers"]
    total = out["bytes"]
    facts: dict = {"executable": _EXECUTABLE, "cwd": _getcwd(), "env": environ_strings(), "path": _sys_path(),
                   "modules": _modules(), "torch": _torch_facts(), "buffers": len(sizes), "settings": settings,
                   "names": [k for k in keys if not k.startswith("_")][:100000],
                   "interactivity": _interactivity(shell), "connection_file": _connection_file()}
    with private_open(_join(d, "env.json"), "w") as f:
        f.write(dumps(facts))
    objs.pop("\x00crane-shrunk", None)
    return {"ok": True, "copied": [[n, _type_name(o)] for n, o in dict.items(objs)], "bytes": total,
            "patched": _patched_classes(proof, objs),
            "kept": kept, "shrunk": why if kept else None, "raw_bytes": raw, "shrink_error": shrink_error,
            "executable": _EXECUTABLE, "modules": facts["modules"], "cuda": bool(facts["torch"].get("cuda")),
            "carried": _carried(settings, facts, proof, objs),
            **_process(), "export_ms": round((_perf() - t0) * 1000.0, 3), "watch": watched}


def _phase(d: str, what: str) -> None:
    """Say in the run's private directory what the export is doing (`phase`: "shrinking", then "copying"): the
    daemon names it when the export outlasts its request."""
    try:
        with private_open(_join(d, "phase"), "w") as f:
            f.write(what)
    except OSError:
        pass


def _stopped(evalue: str, waiting: Any, watch: str, watched: str | None, t0: float) -> dict:
    """The answer for an export stopped while shrinking or pickling. `transient`: stopped for the user's cell or
    by its kernel-time cap (a passing cause: the daemon may try again), not for what the values are."""
    transient = evalue in (_QUEUED, _OVER_TIME)
    if evalue == _OVER_TIME and waiting is None:
        evalue = f"{evalue} (nothing else could stop it for the user's cell: {watch})"
    return {"ok": False, "reason": f"the cell's inputs were not copied: {evalue}", "watch": watched,
            "transient": transient, "export_ms": round((_perf() - t0) * 1000.0, 3)}


def _culprit(cp: Any, objs: dict, ename: str, evalue: str, d: str, waiting: Any = None) -> str:
    """The first name whose value alone fails the same way (counted, not written, under the same controls)."""
    if ename == "_Refused":
        lead = "cannot be copied without running the notebook's code in the kernel"
    else:
        lead = "cannot be copied into a separate process"
    for name, obj in objs.items():
        if name.startswith("\x00"):
            continue
        ctl = _Control(d, 5.0, 0, waiting)
        res = _dump_thread(cp, {name: obj}, None, "", ctl, _Proof())
        if ctl.stop == _QUEUED:
            break  # the user's cell comes first: the search for the culprit ends here
        if not res["ok"]:
            e, v = res["error"] or (ename, evalue)
            what = v if e in ("_Refused", "_Stopped") else f"{e}: {v}"
            return f"`{name}` ({_type_name(obj)}) {lead if e == ename else 'cannot be copied'}: {what}"
    return f"the cell's inputs {lead}: {evalue if ename in ('_Refused', '_Stopped') else f'{ename}: {evalue}'}"
