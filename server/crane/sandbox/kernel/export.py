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

import ast
import os
import re
import sys
import threading
import time
import types
from typing import Any

from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.miniature import (  # kernel: strip
    _REGISTRY,  # kernel: strip
    _SHRINK_CHUNK,  # kernel: strip
    ShrinkStopped,  # kernel: strip
    _kind,  # kernel: strip
    _shrink_check,  # kernel: strip
    shrink_namespace,  # kernel: strip
)  # kernel: strip
from crane.sandbox.kernel.shield import dumps, memory_headroom, private_open  # kernel: strip
from crane.sandbox.kernel.waiting import shell_watch  # kernel: strip

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


def _names(source: str) -> list[str]:
    """Fallback when the daemon sent no names: the names a plain-Python cell reads (no IPython transform)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return [n for n in dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            node = node.target
        elif not (isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Load, ast.Del))):
            continue
        if node.id not in out:
            out.append(node.id)
    return out


_T_DICT = type.__dict__["__dict__"]
_T_MRO = type.__dict__["__mro__"]
_T_MODULE = type.__dict__["__module__"]
_T_QUALNAME = type.__dict__["__qualname__"]
_T_FLAGS = type.__dict__["__flags__"]
_DATA = (str, bytes, int, float, bool, type(None), tuple, frozenset, dict, list, set, type)
_HEAPTYPE = 1 << 9
_O_DICT_GET = object.__getattribute__


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
_C_CALLABLES = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                types.GetSetDescriptorType, types.MemberDescriptorType, types.ClassMethodDescriptorType,
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
    if t is types.FunctionType:
        code = v.__code__
        return type(code.co_filename) is str and is_library(code.co_filename)
    if t is types.MethodType:
        return _library_function(v.__func__)
    if _compiled_callable_type(t):  # nanobind's nb_func/nb_method, pybind11's, ... : made by compiled code only
        return True
    if type.__dict__["__name__"].__get__(t, type) in ("cython_function_or_method", "fused_cython_function"):
        mod = dict.get(sys.modules, v.__module__) if type(v.__module__) is str else None
        path = dict.get(_O_DICT_GET(mod, "__dict__"), "__file__") if type(mod) is types.ModuleType else None
        return type(path) is str and is_library(path)  # compiled into a library's extension module
    return False


_COMPILED_CALLABLES = {("nanobind", "nb_func"), ("nanobind", "nb_method"), ("nanobind", "nb_bound_method"),
                       ("builtins", "pybind11_static_property")}


def _compiled_callable_type(t: type) -> bool:
    """`t` is the function type of a binding generator (nanobind, pybind11): its objects are made by compiled
    code only (a heap type named after a module that does not exist, defining no Python function)."""
    try:
        key = (_T_MODULE.__get__(t, type), _T_QUALNAME.__get__(t, type))
    except Exception:
        return False
    if key not in _COMPILED_CALLABLES or type(t) is not type:
        return False
    return not any(type(x) is types.FunctionType for k in _T_MRO.__get__(t, type) for x in _cls_dict(k).values())


def _imports(code: types.CodeType) -> bool:
    """The code imports a module (an IMPORT_NAME instruction; wordcode: every other byte is an opcode). Without
    the interpreter's `opcode` module loaded, assume it does."""
    op = sys.modules.get("opcode")
    opmap = dict.get(_O_DICT_GET(op, "__dict__"), "opmap") if type(op) is types.ModuleType else None
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
        m = dict.get(sys.modules, mod)
        if m is None or type(m) is not types.ModuleType:
            return self._only_library_code(cls)  # an extension's type named after a private module
        d = _O_DICT_GET(m, "__dict__")
        path = dict.get(d, "__file__")
        if path is None and mod not in sys.builtin_module_names:
            return self._only_library_code(cls)  # a submodule an extension made (no file of its own)
        if not (type(path) is str and is_library(path)) and mod not in sys.builtin_module_names:
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
            if name == "__new__" and t is staticmethod and "_fields" in cd and type(v.__func__) is types.FunctionType \
                    and v.__func__.__code__.co_filename == "<string>":
                continue
            if t is types.FunctionType or t is staticmethod or t is classmethod or t is property:
                if not _library_function(v):
                    return False
            elif not (_library_function(v) or t in _DATA or type.__dict__["__name__"].__get__(t, type)
                      in ("PyCapsule", "getset_descriptor", "member_descriptor", "_tuplegetter")):
                return False
        return True

    def check_type(self, t: type) -> tuple[str, bool]:
        """(why pickling an instance of `t` could run the user's code, or ""; `t` is a library class)."""
        hit = self.types.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1], hit[2]
        why, lib = self._check_type(t)
        self.types[id(t)] = (t, why, lib)
        return why, lib

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
        mro = _T_MRO.__get__(t, type)
        for k in mro:
            if k is object:
                continue
            kd = _cls_dict(k)
            klib = k is t and lib or (k is not t and self.library_class(k))
            for name in _CALLED:
                if name in kd:
                    v = kd[name]
                    if _library_function(v) and (klib or type(v) is types.FunctionType):
                        continue  # the library's own (or library code a notebook class reuses: namedtuple's)
                    if type(v) is types.GetSetDescriptorType and name in ("__dict__",):
                        continue
                    return f"{name} of {_type_name_of(k)} is the notebook's code", lib
            if not klib:  # a notebook class (or one lying about its module) in the MRO
                for builtin_base in (dict, list, set, frozenset):
                    if any(b is builtin_base for b in mro):
                        return f"{_type_name_of(k)} is a notebook subclass of {builtin_base.__name__}", lib
                for name, v in kd.items():
                    if type(v) is property or (hasattr(type(v), "__get__") and hasattr(type(v), "__set__")
                                               and type(v) is not types.MemberDescriptorType
                                               and type(v) is not types.GetSetDescriptorType):
                        if any(self.library_class(b) and b is not object and any(
                                n in _cls_dict(b) and type(_cls_dict(b)[n]) is types.FunctionType for n in _PICKLING)
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
                            if type(d2[attr]) is not types.MemberDescriptorType:
                                return f"`{attr}` of {_type_name_of(k2)} shadows a slot pickle reads", lib
                            break
        if not lib:
            # a notebook class whose library base pickles it with its own Python code: that code may call any
            # method the notebook overrides (a Keras layer's get_config, a subclassed model's save_own_variables)
            for b in mro:
                if b is t or b is object or not self.library_class(b):
                    continue
                bd = _cls_dict(b)
                if any(n in bd and type(bd[n]) is types.FunctionType for n in _PICKLING):
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
        elif any(type(_cls_dict(b).get(n)) is types.FunctionType for b in mro if b is not object for n in _PICKLING):
            notebook = self._reachable(mro, modules=True)[2]  # a library class: may reach what the notebook patched
            if notebook:
                return f"{_type_name_of(t)}'s own pickling reaches {notebook}", lib
        return "", lib

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
                if type(v) is types.FunctionType:
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
                m = dict.get(sys.modules, n)
                if type(m) is types.ModuleType:
                    spaces.append(_O_DICT_GET(m, "__dict__"))
            if type(globs) is dict:
                spaces.append(globs)
                for n in co_names:
                    g: Any = dict.get(globs, n)
                    if type(g) is types.ModuleType:
                        bounded = False
                    elif any(k is type for k in _T_MRO.__get__(type(g), type)) and self.library_class(g):
                        for k in _T_MRO.__get__(g, type):
                            if k is not object:
                                spaces.append(_cls_dict(k))
                                co_names += tuple(i for i in ("__init__", "__new__", "__call__") if i in _cls_dict(k))
            for k in code.co_consts:
                if type(k) is types.CodeType:
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
                    if tv is types.ModuleType and modules and len(spaces) < 64:
                        md = _O_DICT_GET(val, "__dict__")
                        if type(md) is dict and not any(md is x for x in spaces):
                            spaces.append(md)
                        continue
                    if tv is staticmethod or tv is classmethod:
                        val, tv = val.__func__, type(val.__func__)
                    found.extend((val.fget, val.fset, val.fdel) if tv is property else (val,))
            for f in found:
                if type(f) is not types.FunctionType:
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
        if t is types.FunctionType or t is types.ModuleType or issubclass(t, type):
            return  # a class (its metaclass was checked), a function or a module: no instance hooks pickle reads
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
            if o is not obj and t is not type and t is not types.FunctionType and not self.library_class(t):
                raise _Refused(f"{_type_name(obj)} holds a {_type_name(o)} of the notebook's, which its library's "
                               "own pickling would call")
            if t is types.ModuleType:
                continue
            if t is types.FunctionType and not _library_function(o) and o is not obj:
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
                        if type(x) is types.FunctionType:
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
        try:
            d = _O_DICT_GET(obj, "__dict__")
        except Exception:
            return None
        if type(d) is not dict:
            return None
        traced = any(d.get(f) is not None for f in ("train_function", "test_function", "predict_function"))
        opt = d.get("_optimizer") or d.get("optimizer")
        built = True
        if opt is not None:
            try:
                od = _O_DICT_GET(opt, "__dict__") if type(opt) is not type else {}
            except Exception:
                od = {}
            built = od.get("built", True) if type(od) is dict else True
        if traced and opt is not None and built is False:
            return ("has a traced training step whose optimizer was never built (a failed fit): a copy rebuilt "
                    "from its configuration and weights would not fail the way the kernel's model does")
    return None


class _Control:
    """What stops an export: a request waiting for the kernel, the deadline, the daemon's cancel file, the copy
    cap, the memory floor."""

    def __init__(self, d: str, max_s: float, cap: int, waiting: Any = None) -> None:
        self.cancel_path = os.path.join(d, "cancel")
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
        self.cpu_deadline = time.process_time() + seconds
        self.deadline = time.monotonic() + max(5.0, 5 * seconds)

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
        if time.process_time() > self.cpu_deadline:  # at every frame (64 KiB): what the user's cell waits on
            self.stop = _OVER_TIME
        if self.written >= self.next_check:
            self.next_check = self.written + _CHECK_EVERY
            self.poll()
        if self.stop:
            raise _Stopped(self.stop)

    def poll(self) -> None:
        if self.stop:
            return
        if time.monotonic() > self.deadline or time.process_time() > self.cpu_deadline:
            self.stop = _OVER_TIME
        elif os.path.exists(self.cancel_path):
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
    torch: Any = sys.modules.get("torch")  # when None, `tensor` is None too and no torch branch runs
    copyreg = sys.modules.get("copyreg")  # its reducers: the notebook's may be registered there (copyreg.pickle)
    table = dict.get(_O_DICT_GET(copyreg, "__dict__"), "dispatch_table") if copyreg is not None else None
    registered = table if type(table) is dict else {}
    io_base = sys.modules["_io"].__dict__["_IOBase"]
    tensor = getattr(torch, "Tensor", None) if torch is not None else None

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
            if any(k is io_base for k in mro) and t.__name__ not in ("BytesIO", "StringIO"):
                raise TypeError(f"cannot copy an open file or stream ({t.__name__})")
            mod = _T_MODULE.__get__(t, type)
            if type(mod) is str and mod.partition(".")[0] in _OWN_REDUCER_MODULES and id(obj) not in proof.walked:
                proof.prewalk(obj)
            if tensor is not None and any(k is tensor for k in mro):
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


def _dump_thread(cp: Any, objs: dict, d: str | None, tag: str, ctl: _Control, proof: _Proof) -> dict:
    """Pickle `objs` into `d` (None: count only) in a thread with a known stack and CRANE's recursion limit;
    the calling thread waits, polling the controls. {"ok", "buffers": [sizes], "bytes", "error"}."""
    out: dict = {"ok": False, "buffers": [], "bytes": 0, "error": None}
    sink = _Sink(os.path.join(d, f"state{tag}.pkl") if d else None, ctl)

    def keep(pb: Any) -> bool:  # a pickle.PickleBuffer
        try:
            raw = pb.raw()
        except BufferError:
            return True  # not contiguous: in band
        i = len(out["buffers"])
        ctl.add(raw.nbytes)
        if d:
            with private_open(os.path.join(d, f"buf{tag}-{i}"), "wb", buffering=0) as f:
                step = 1 << 24
                for off in range(0, raw.nbytes, step):
                    f.write(raw[off:off + step])
                    if off:
                        ctl.add(0)
        out["buffers"].append(raw.nbytes)
        return False

    def work() -> None:
        sys.setprofile(None)
        sys.settrace(None)
        try:
            _pickler_class(cp, proof, ctl)(sink, protocol=5, buffer_callback=keep).dump(objs)
            out["ok"] = True
        except RecursionError:
            out["error"] = ("RecursionError", "it is nested deeper than a copy may go")
        except BaseException as exc:  # noqa: BLE001 - reported, the kernel carries on
            out["error"] = (type(exc).__name__, str(exc)[:500])
        finally:
            sink.close()

    old_limit = sys.getrecursionlimit()
    old_stack = threading.stack_size()
    sys.setrecursionlimit(max(_DEPTH, 200))
    try:
        threading.stack_size(_STACK)
        try:
            th = threading.Thread(target=work, name="crane-export", daemon=True)
            th.start()
        finally:
            threading.stack_size(old_stack)
        while th.is_alive():
            ctl.watch()  # here only: the main thread's own queue
            th.join(0.05)
            ctl.poll()  # the pickler sees `stop` at its next object or write
    finally:
        sys.setrecursionlimit(old_limit)
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
            return v if type(v) is types.FunctionType and _library_function(v) else None
    return None


def _sample_inband(v: Any, depth: int = 0) -> int:
    """The in-band pickled size of strings, bytes and plain containers of them (sampled: up to 64 items per
    container, scaled to its length). Exact types only: nothing of the user's is called."""
    t = type(v)
    if t is str or t is bytes or t is bytearray:
        return len(v) + 8
    if depth > 3:
        return 16
    if t is list or t is tuple or t is set or t is frozenset or t is dict:
        n = len(v)
        if not n:
            return 8
        items = list(dict.values(v))[:64] if t is dict else list(v)[:64] if t is not set else list(set.__iter__(v))[:64]
        keys = list(dict.keys(v))[:64] if t is dict else []
        per = sum(_sample_inband(x, depth + 1) for x in items + keys) / len(items)
        return int(per * n) + 8
    return 16


def _raw_bytes(obj: Any) -> int:
    """What copying a value whole costs: array data (numpy `nbytes`, pandas' own `memory_usage` without deep
    sizes, torch) and in-band strings/bytes, one level into plain dicts, lists and tuples. Only the libraries'
    own functions are called (an accessor or patch of the notebook's that shadows them is not)."""
    def one(v: Any) -> int:
        t = type(v)
        mod = _T_MODULE.__get__(t, type)
        mod = mod if type(mod) is str else ""
        try:
            if mod.startswith("numpy") and "nbytes" in _cls_dict(t):
                return int(v.nbytes)
            if mod.startswith("pandas"):
                fn = _lib_method(t, "memory_usage")
                if fn is not None:
                    used = fn(v, index=True, deep=False)
                    return int(used.sum() if type(used).__name__ == "Series" else used)
                return 0
            torch = sys.modules.get("torch")
            if torch is not None and (t is torch.Tensor or t is torch.nn.Parameter):
                return int(v.element_size() * v.numel())
        except Exception:
            return 0
        return _sample_inband(v)
    total = one(obj)
    t = type(obj)
    if t in (dict, list, tuple) and len(obj) <= 32:
        total = max(total, sum(one(x) for x in (dict.values(obj) if t is dict else obj)))
    return total


def _settings(recursion_limit: int) -> dict:
    """Interpreter and library settings a fresh interpreter would not have (builtins only)."""
    simple = (bool, int, float, str, type(None))
    out: dict = {"recursionlimit": recursion_limit}
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            out["seterr"] = {k: v for k, v in np.geterr().items() if type(v) is str}
            out["printoptions"] = {k: v for k, v in np.get_printoptions().items() if type(v) in simple}
        except Exception:
            pass
    cfg = sys.modules.get("pandas._config.config")
    if cfg is not None:
        try:
            opts = {}
            for key, reg in list(cfg._registered_options.items()):
                if key in cfg._deprecated_options:
                    continue
                root, last = cfg._get_root(key)  # read without get_option (which may warn: the user's hook)
                val = root.get(last, reg.defval)
                if type(val) in simple and val != reg.defval:
                    opts[key] = val
            out["pandas"] = opts
        except Exception:
            pass
    jcfg = sys.modules.get("jax._src.config")
    if jcfg is not None:
        try:
            holders = jcfg.config._value_holders
            out["jax"] = {k: h.get_global() if hasattr(h, "get_global") else h.value for k, h in list(holders.items())
                          if type(h.get_global() if hasattr(h, "get_global") else h.value) in simple}
        except Exception:
            pass
    torch_settings = _torch_settings()
    if torch_settings is not None:
        out["torch"] = torch_settings
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        try:
            out["tf"] = {"run_functions_eagerly": bool(tf.config.functions_run_eagerly())}
        except Exception:
            pass
    keras_cfg = sys.modules.get("keras.config") or getattr(sys.modules.get("keras"), "config", None)
    if keras_cfg is not None:
        try:
            out["keras"] = {"floatx": keras_cfg.floatx(), "image_data_format": keras_cfg.image_data_format(),
                            "epsilon": keras_cfg.epsilon()}
            policy = getattr(keras_cfg, "dtype_policy", None)
            if policy is not None:
                out["keras"]["dtype_policy"] = str(policy().name)
        except Exception:
            pass
    return out


def _torch_settings() -> dict | None:
    """torch's process-wide state a fresh interpreter would not have: the default dtype and device, grad mode (the
    main thread's: cells run there), deterministic algorithms, anomaly detection, matmul precision, the CPU random
    generator's state. Only torch's own functions are called (one the notebook replaced is not: then None, and a
    crash in torch stays "likely")."""
    torch = sys.modules.get("torch")
    if type(torch) is not types.ModuleType:
        return None
    td = _O_DICT_GET(torch, "__dict__")

    def call(name: str, owner: dict = td) -> Any:
        fn: Any = dict.get(owner, name)
        t = type(fn)  # a module's C function or a library's Python function: never a bound method of an object
        owner_t = type(fn.__self__) if t is types.BuiltinFunctionType else None
        if not (t is types.BuiltinFunctionType and (owner_t is types.ModuleType or owner_t is type(None))
                or t is types.FunctionType and _library_function(fn)):
            raise _Refused(name)
        return fn()

    try:
        rnd = dict.get(td, "random")
        rng = call("get_rng_state", _O_DICT_GET(rnd, "__dict__")) if type(rnd) is types.ModuleType else None
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
    """Pandas accessors the notebook registered: (class name, accessor name, accessor class), copied by value."""
    pd = sys.modules.get("pandas")
    out: list = []
    if pd is None:
        return out
    for target in ("DataFrame", "Series", "Index"):
        cls = pd.__dict__.get(target)
        if type(cls) is not type:
            continue
        names = _cls_dict(cls).get("_accessors")
        found: list = list(names) if type(names) in (set, frozenset) else []  # type: ignore[arg-type]
        for name in sorted(n for n in found if type(n) is str):
            acc = _cls_dict(cls).get(name)
            inner = None
            try:
                inner = _O_DICT_GET(acc, "__dict__").get("_accessor")
            except Exception:
                pass
            if isinstance(inner, type) and not proof.library_class(inner) and type(inner) is type:
                out.append((target, name, inner))
    return out


def _modules() -> list[str]:
    std = getattr(sys, "stdlib_module_names", ())
    out: list[str] = []
    for name in list(sys.modules):
        top = name.partition(".")[0]
        if top in out or top in std or top.startswith(("_", "pydev")) or top in _KERNEL_MODS:
            continue
        mod = sys.modules.get(top)
        if mod is not None and getattr(mod, "__file__", None):
            out.append(top)
    return out


def _torch_facts() -> dict:
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        if not torch.cuda.is_initialized():
            return {"cuda": False}
        n = torch.cuda.device_count()
        return {"cuda": True, "count": n, "names": [torch.cuda.get_device_name(i) for i in range(n)]}
    except Exception:
        return {"cuda": False}


def _in_kernel_ok(obj: Any) -> bool:
    """Shrinking runs library code in the kernel: only for values whose subsets touch no file (a Hugging Face
    dataset's `select` may write an indices cache: those are copied whole)."""
    vals = obj.values() if type(obj) is dict else obj if type(obj) in (list, tuple) else ()
    return all((_kind(v) or ("",))[0] != "HFDataset" for v in [obj, *list(vals)[:32]])


def _known(kind: str, orig: Any, check: Any = None) -> dict | None:
    """What the worker needs to tell a label the subset dropped from one the data never had (kernel/miniature's
    `artefact`): the original index (RangeIndex, or up to 1M labels; else unknown) and, for each label-like
    column, its dtype and the sorted stable hashes (pandas' `hash_array`) of its distinct values (up to 1M;
    else unknown). A hash collision can only make a crash inconclusive, never a false one. `check` is called
    between columns and chunks (kernel/miniature's `ShrinkStopped` stops it)."""
    if kind not in ("DataFrame", "Series"):
        return None
    pd = sys.modules.get("pandas")
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


def _shrink(objs: dict, spec: dict, check: Any = None) -> tuple[list, list]:
    """Replace the large values in `objs` (a copy of the cell's names, never the user's namespace) by consistent
    row subsets (kernel/miniature's rules): (kept, what the worker needs about each original). `check` is called
    between objects, columns and chunks: kernel/miniature's `ShrinkStopped` stops it (`objs` left whole)."""
    names = [n for n, o in objs.items() if _in_kernel_ok(o)]
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
    out: dict = {"kernel_pid": os.getpid(), "kernel_start": 0, "kernel_pidns": None}
    try:
        with private_open("/proc/self/stat", "rb") as f:
            data = f.read()
        out["kernel_start"] = int(data[data.rindex(b")") + 2:].split()[19])
        out["kernel_pidns"] = os.stat("/proc/self/ns/pid").st_ino
    except (OSError, ValueError, IndexError):
        pass
    return out


def _history_value(ns: dict, name: str) -> Any:
    """`In`/`_ih` as a plain list of strings and `Out`/`_oh` as a plain dict (copies: never the user's)."""
    v = ns[name]
    if name in ("In", "_ih") and type(v) is list:
        return [x if type(x) is str else "" for x in list.__iter__(v)]
    if name in ("Out", "_oh") and type(v) is dict:
        return dict(dict.items(v))
    return v


def export(args: Any) -> dict:
    """Write the state the cell reads into the run's private directory (see the module docstring). The user's
    profile/trace hooks are off meanwhile (inline: kernel/shield.py)."""
    saved = (sys.getprofile(), sys.gettrace(), threading.__dict__.get("_profile_hook"),
             threading.__dict__.get("_trace_hook"))
    sys.setprofile(None)
    sys.settrace(None)
    threading.__dict__["_profile_hook"] = threading.__dict__["_trace_hook"] = None
    try:
        return _export(args)
    finally:
        threading.__dict__["_profile_hook"], threading.__dict__["_trace_hook"] = saved[2], saved[3]
        sys.settrace(saved[1])
        sys.setprofile(saved[0])


def _connection_file() -> str | None:
    """The kernel's connection file (`-f PATH` / `--f=PATH` on its command line, read from `sys.argv` by exact
    type), so the portable worker can hide it (it holds the key that signs requests to this kernel)."""
    argv = sys.argv
    if type(argv) is not list:
        return None
    for i, a in enumerate(argv):
        if type(a) is not str:
            continue
        if a in ("-f", "--f") and i + 1 < len(argv) and type(argv[i + 1]) is str:
            return os.path.abspath(argv[i + 1])
        for p in ("-f=", "--f="):
            if a.startswith(p):
                return os.path.abspath(a[len(p):])
    return None


def _export(args: Any) -> dict:
    t0 = time.perf_counter()
    if type(args) is not dict:
        return {"ok": False, "reason": "bad export request"}
    d = str(args["dir"])
    try:
        with private_open(os.path.join(d, "token"), "r") as f:
            if f.read() != args["token"]:
                raise OSError("token mismatch")
    except OSError:
        return {"ok": False, "reason": "the kernel does not see the daemon's files (another machine or container)"}
    cp = sys.modules.get("_crane_cloudpickle")
    if cp is None:
        return {"ok": False, "reason": "CRANE's private cloudpickle is not installed in the kernel"}
    shell = None
    ipy = sys.modules.get("IPython")
    try:
        shell = ipy.get_ipython() if ipy is not None else None
    except Exception:
        shell = None
    if shell is None:
        return {"ok": False, "reason": "not an IPython kernel"}
    waiting, watch = shell_watch(shell)  # on the main thread, which owns what it watches
    ns = shell.user_ns
    if type(ns) is not dict:
        return {"ok": False, "reason": "the kernel's namespace is not a plain dict"}
    room = memory_headroom()
    if room is not None and room < _FLOOR:
        return {"ok": False, "reason": f"the kernel's memory is short ({room >> 20} MiB left before its limit): "
                                       "copying its state could push it out of memory"}
    proof = _Proof()
    objs: dict = {}
    skip = set(args.get("skip") or ())  # a session's names already copied
    names = args.get("names")
    names = [n for n in names if type(n) is str] if type(names) is list else _names(str(args.get("source") or ""))
    for name in names:
        if name in _SKIP or name in skip or name not in ns:
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
        raw = sum(_raw_bytes(o) for o in objs.values())
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
            kept, known = _shrink(objs, spec, ctl.check)
        except ShrinkStopped:
            return _stopped(ctl.stop or _OVER_TIME, waiting, watch, watched, t0)
        except Exception as exc:  # copied whole, as if nothing were large
            shrink_error = f"{type(exc).__name__}: {exc}"
        if kept:
            objs["\x00crane-shrunk"] = known
    if cap and raw > cap and not kept:
        return {"ok": False, "reason": f"the values it reads hold {raw >> 20} MiB, more than a transplant copies "
                                       f"({cap >> 20} MiB), and cannot be shrunk to row subsets"}
    settings = _settings(int(args.get("recursionlimit") or sys.getrecursionlimit()))
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
    env = {k: v for k, v in os.environ.items() if type(k) is str and type(v) is str}
    facts: dict = {"executable": sys.executable, "cwd": os.getcwd(), "env": env,
                   "path": [p for p in sys.path if type(p) is str], "modules": _modules(), "torch": _torch_facts(),
                   "buffers": len(sizes), "settings": settings,
                   "names": [k for k in ns if type(k) is str and not k.startswith("_")][:100000],
                   "interactivity": str(getattr(shell, "ast_node_interactivity", "last_expr")),
                   "connection_file": _connection_file()}
    with private_open(os.path.join(d, "env.json"), "w") as f:
        f.write(dumps(facts))
    objs.pop("\x00crane-shrunk", None)
    return {"ok": True, "copied": [[n, _type_name(o)] for n, o in objs.items()], "bytes": total,
            "kept": kept, "shrunk": why if kept else None, "raw_bytes": raw, "shrink_error": shrink_error,
            "executable": sys.executable, "modules": facts["modules"], "cuda": bool(facts["torch"].get("cuda")),
            "carried": ["torch"] if settings.get("torch") and settings["torch"]["default_device"] == "cpu"
            and settings["torch"]["rng"] and not facts["torch"].get("cuda") and not proof.uncarried else [],
            **_process(), "export_ms": round((time.perf_counter() - t0) * 1000.0, 3), "watch": watched}


def _phase(d: str, what: str) -> None:
    """Say in the run's private directory what the export is doing (`phase`: "shrinking", then "copying"): the
    daemon names it when the export outlasts its request."""
    try:
        with private_open(os.path.join(d, "phase"), "w") as f:
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
            "transient": transient, "export_ms": round((time.perf_counter() - t0) * 1000.0, 3)}


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
