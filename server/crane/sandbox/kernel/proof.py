"""Transplant export, kernel side: the proof that pickling an object runs none of the notebook's code.

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py is the entry). Only what is proven safe is
pickled (`_Proof`): each object's exact type is importable to the same object from a library module, or a notebook
class copied by value; no user-defined metaclass; no pickling or attribute hook (`__reduce_ex__`, `__getstate__`,
`__getattr__`, `__class__`, ...) of the user's own, on the class or the instance; no property over a slot; no
notebook dict/list subclass; no library pickling function the notebook replaced; no library object whose own
reducer would meet a notebook object (a Keras model with notebook layers). Every check reads through C-level
descriptors (`type.__dict__[...]`, kernel/bound.py), never `getattr` on the user's objects, never `isinstance`
(which reads `__class__`). The same proof decides what else may touch an object in the kernel: library code
called on it (`_Proof.pristine`: shrinking, sizing, settings), a library function called by name
(`_callable_ok`), a library whose loaded modules hold only its own code (`_untouched`), and the builtins and
`copyreg` functions the C pickler looks up at call time (`_patched_builtins`, `_patched_copyreg`).
"""

from __future__ import annotations

import types
from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _BUILTIN_NAMES,
    _DATA,
    _HEAPTYPE,
    _IS_FROZEN,
    _LRU_WRAPPER,
    _MODULE_TYPE,
    _MODULES,
    _O_DICT_GET,
    _T_FLAGS,
    _T_MODULE,
    _T_NAME,
    _T_QUALNAME,
    _BuiltinFunctionType,
    _ClassMethodDescriptorType,
    _cls_dict,
    _CodeType,
    _FunctionType,
    _GetSetDescriptorType,
    _lru_wrapped,
    _mdict,
    _MemberDescriptorType,
    _MethodDescriptorType,
    _MethodType,
    _module,
    _ModuleType,
    _mro,
    _type_name,
    _type_name_of,
    _WrapperDescriptorType,
)
from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.lookups import _LK_IS, _LK_REPEAT  # kernel: strip
from crane.sandbox.kernel.pristine import _PR_C_IMPORT  # kernel: strip
from crane.sandbox.kernel.shield import BUILTINS  # kernel: strip
from crane.sandbox.kernel.waiting import own_dict  # kernel: strip
from crane.sandbox.kernel.witness import _keep_reached, _reached, _Witness  # kernel: strip

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
    "__annotate__", "__annotate_func__", "__annotations_cache__", "__setstate__",
    "__new_member__"))  # (enum's: the class's own `__new__`, which only EnumType calls, making a member)
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
    if t is _LRU_WRAPPER:  # `functools.cache` over a library's function (matplotlib's module `__getattr__`s)
        f = _lru_wrapped(v)
        return f is not None and _library_function(f)
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
        type(x) is _FunctionType for k in _mro(t) for x in _cls_dict(k).values())


def _compiled_callable_type(t: type) -> bool:
    """`t` is the function type of a binding generator (nanobind, pybind11): its objects are made by compiled
    code only (a heap type named after a module that does not exist, defining no Python function)."""
    try:
        key = (_T_MODULE.__get__(t, type), _T_QUALNAME.__get__(t, type))
    except Exception:
        return False
    if key not in _COMPILED_CALLABLES or type(t) is not type:
        return False
    return not any(type(x) is _FunctionType for k in _mro(t) for x in _cls_dict(k).values())


def _imports(code: types.CodeType, w: _Witness) -> bool:
    """The code imports a module (an IMPORT_NAME instruction; wordcode: every other byte is an opcode). Without
    the interpreter's `opcode` module loaded, assume it does. What it read is recorded in `w`."""
    op = w.get(_MODULES, "opcode")
    od = _O_DICT_GET(op, "__dict__") if type(op) is _ModuleType else None
    opmap = w.get(od, "opmap") if type(od) is dict else None
    num = w.get(opmap, "IMPORT_NAME") if type(opmap) is dict else None
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
    return any(name in _cls_dict(k) for k in _mro(t))


def _plain_class(cls: Any) -> bool:
    """Every class of `cls`'s MRO holds only exact `str` keys in its dict (counted by type: nothing of a key's runs).
    A class made by `type(name, bases, namespace)` keeps a namespace key of any type (a library's class dict can be
    given one through `gc.get_referents`): a name looked up there (`'__reduce_ex__' in kd`) would run a planted key's
    `__eq__` when it shares the name's hash (issue 42, h6). The proof looks names up in a class's dict only once
    this holds (`_Proof._check_type`, `_Proof.library_class`, `_Proof.check` of a class)."""
    for k in _mro(cls):
        kd = _cls_dict(k)
        if sum(map(_LK_IS, map(type, kd), _LK_REPEAT(str))) != len(kd):
            return False
    return True


def _is_class(v: Any) -> bool:
    return any(k is type for k in _mro(type(v)))


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
        # id -> a Keras layer class of the notebook's that the export's reducer rebuilds in the worker from what Keras
        # recorded (shared/keras_layers.py): neither pickle nor its library's pickling is ever called on its objects
        self.rebuilt: dict = {}
        # tf.data pipelines rebuilt stage by stage (shared/tf_data.py): id -> a dataset made again by the same calls,
        # and the stages made again only approximately (a shuffle without any seed: random in both)
        self.tf_data: dict = {}
        self.tf_data_approximate: list = []

    def release(self) -> None:
        """Let go of every object the caches hold, at the export's end (issue 42, fixD). The export's pickler classes
        (kernel/pickling._pickler_class: a class is always in reference cycles of its own) hold this proof through
        their closures, so it outlives the export until the kernel's collector next runs: its caches kept the
        notebook's classes (and pre-walked objects) referenced, a later export counted those references as the
        kernel's (kernel/finalizers.FinalizerWatch.tail) and pinned the copy (`K = 1; gc.collect()` with a finalizer
        on K: no-crash, certain, where the kernel dies), and the kernel's own `del` freed them only at its next
        collection."""
        for cache in (self.types, self.walked, self.libs, self.refs, self.rebuilt, self.tf_data):
            dict.clear(cache)
        list.clear(self.uncarried)
        list.clear(self.tf_data_approximate)

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
        if not _plain_class(cls):
            return False  # (a key that is not a plain string: nothing is looked up in its dicts; never the library's)
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
            if obj is not m and not _plain_class(obj):
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
            for k in _mro(cls):
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
        if not _plain_class(t) or not _plain_class(meta):  # (first: everything below looks names up in them)
            return "a class of its holds a key that is not a plain string (looking a name up there runs its code)", \
                False
        if meta is not type:
            mwhy, mlib = self.check_type(meta)
            if not mlib:
                return f"its metaclass {_type_name_of(meta)} is the notebook's", False
            for k in _mro(meta):  # a library metaclass the notebook patched
                if k is not type and any(n in _cls_dict(k) and not _library_function(_cls_dict(k)[n])
                                         for n in ("__getattribute__", "__getattr__", "__hash__", "__eq__")):
                    return f"its metaclass {_type_name_of(meta)} has a hook of the notebook's", False
        lib = self.library_class(t)
        hook = self.module_hook(_T_MODULE.__get__(t, type))
        if hook:
            return f"its class's module: {hook}", lib
        mro = _mro(t)
        rebuilt = not lib and self.rebuilt.get(id(t)) is t
        reused: list = []  # (class, name, function): a library's Python hook a notebook class holds
        for k in mro:
            if k is object:
                continue
            kd = _cls_dict(k)
            klib = k is t and lib or (k is not t and self.library_class(k))
            for name in _CALLED:
                if name in kd:
                    v = kd[name]
                    if _library_function(v) and (klib or type(v) is _FunctionType):
                        if not klib:  # library code a notebook class reuses (namedtuple's): proven below
                            reused.append((k, name, v))
                        continue
                    if type(v) is _GetSetDescriptorType and name in ("__dict__",):
                        continue
                    return f"{name} of {_type_name_of(k)} is the notebook's code", lib
            if not klib:  # a notebook class (or one lying about its module) in the MRO
                for builtin_base in (dict, list, set, frozenset):
                    if any(b is builtin_base for b in mro):
                        return f"{_type_name_of(k)} is a notebook subclass of {builtin_base.__name__}", lib
                for name, v in kd.items() if not rebuilt else ():  # (a rebuilt one's properties are never read)
                    if type(v) is property or (_in_mro(type(v), "__get__") and _in_mro(type(v), "__set__")
                                               and type(v) is not _MemberDescriptorType
                                               and type(v) is not _GetSetDescriptorType):
                        if any(self.library_class(b) and b is not object and any(
                                n in _cls_dict(b) and type(_cls_dict(b)[n]) is _FunctionType for n in _PICKLING)
                               for b in mro):
                            return (f"the property `{name}` of {_type_name_of(k)} may be read by its library "
                                    "pickling code"), lib
        why = "" if _reduce_overridden(mro) else _slot_names_read(t, mro)
        if why:
            return why, lib
        if rebuilt:
            return "", lib  # its reducer reads only instance dicts; Keras's own pickling is never reached
        if reused:
            why = self._reused_hooks(mro, reused)
            if why:
                return why, lib
        why = self._registered_reducer(t, lib)
        if why:
            return why, lib
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
                                       and not self._the_librarys_own(mro, n, v)
                                       for k in mro if k is not object and not self.library_class(k)
                                       for n, v in _cls_dict(k).items() if type(n) is str):
                        bounded = False  # `str(self)`, `self == x`, `len(self)` in the hook call these unnamed
                    if not bounded:  # the library's pickling code may call any name its classes define
                        for x in mro:
                            if x is not object and self.library_class(x):
                                lib_names.update(n for n in _cls_dict(x) if type(n) is str and not n.startswith("__"))
                    overridden = [n for k in mro if k is not object and not self.library_class(k)
                                  for n, v in _cls_dict(k).items() if type(n) is str and n in lib_names
                                  and not _inert(v) and not self._the_librarys_own(mro, n, v)]
                    if overridden:
                        return (f"{_type_name_of(t)} overrides `{overridden[0]}` of {_type_name_of(b)}, whose own "
                                "pickling would call it"), lib
                    break
        elif any(type(_cls_dict(b).get(n)) is _FunctionType for b in mro if b is not object for n in _PICKLING):
            notebook = self._reachable(mro, modules=True)[2]  # a library class: may reach what the notebook patched
            if notebook:
                return f"{_type_name_of(t)}'s own pickling reaches {notebook}", lib
        return "", lib

    def _the_librarys_own(self, mro: tuple, name: str, v: Any) -> bool:
        """`v`, which a notebook class of `mro` holds under `name`, is C code or the very object a library class of
        the MRO holds under that name: what inheriting the name would run (enum's `EnumType` copies `Enum.__new__`,
        `_generate_next_value_` and Flag's operators into every enum class it makes; an `IntEnum`'s `__format__` is
        `int.__format__`). Compared by identity (staticmethod and classmethod unwrapped), never by `==`."""
        t = type(v)
        if any(t is c for c in _C_CALLABLES):
            return True
        f = v.__func__ if t is staticmethod or t is classmethod else v
        if type(f) is not _FunctionType:
            return False
        for k in mro:
            if k is object or not self.library_class(k):
                continue
            kd = _cls_dict(k)
            if name in kd:
                own = kd[name]
                to = type(own)
                if (own.__func__ if to is staticmethod or to is classmethod else own) is f:
                    return _library_function(f)
        return False

    def _reused_hooks(self, mro: tuple, reused: list) -> str:
        """Why the library functions a notebook class took as its pickling or attribute hooks (`reused`: (class,
        name, function); namedtuple's `__getnewargs__`, a frozen slotted dataclass's `__getstate__`, or
        `__reduce__ = copy.copy`) could run the notebook's code on its instance, else "". That library code reads
        the instance as it reads any object: each name its code names (followed as `_reachable` follows a library
        base's hooks), any dunder an operation on `self` calls (`tuple(self)` calls `__iter__`), any attribute when
        it looks names up by value (`getattr`). So what a notebook class of the MRO defines there must be inert:
        plain data, library code, C slots; a property, a descriptor or an object of the notebook's is refused where
        the hook may read it, a function of the notebook's where the hook may call it (by name, or by operation)."""
        libs = tuple(x for x in mro if x is not object and self.library_class(x))
        names, bounded, notebook = self._walk(libs, False, _Witness(), tuple(f for _, _, f in reused))
        k0, n0, f0 = reused[0]
        hook = f"`{n0}` of {_type_name_of(k0)} (the library's `{f0.__code__.co_name}`)"
        if notebook:
            return f"{hook} reaches {notebook}"
        reads = _field_reads(reused, self.pristine)
        if reads is not None:  # a field getter (attrs' or dataclasses'): it reads these names off the instance only
            for n in reads:
                v = next((_cls_dict(k)[n] for k in mro if n in _cls_dict(k)), None)
                if not (type(v) is _MemberDescriptorType or n == "__dataclass_fields__" and type(v) is dict
                        and self._passive(v)):
                    return f"`{n}`, which its pickling hook {hook} reads, is not a plain slot of {_type_name_of(mro[0])}"
            return ""
        for k in mro:
            if k is object or self.library_class(k):
                continue
            for n, v in _cls_dict(k).items():
                if type(n) is not str or self._passive(v):
                    continue
                tv = type(v)
                code = tv is _FunctionType or tv is staticmethod or tv is classmethod or _is_class(v)
                if n in names or (n.startswith("__") and n not in _NOT_CALLED_BY_OPERATIONS) or not (code or bounded):
                    return f"{_type_name_of(k)} defines `{n}`, which its pickling hook {hook} may call"
        return ""

    def _passive(self, v: Any, depth: int = 0) -> bool:
        """A class attribute reading or calling which runs nothing of the notebook's: plain data, library code
        (generated by a library: namedtuple's `__new__`), a C slot or field descriptor, a library class, or an object
        of a library class that is no descriptor, holding only such (a dataclass's `Field`s: the hook reads them)."""
        t = type(v)
        if _inert(v) or _library_function(v) or _generated_by_library_value(v) or t is _MemberDescriptorType \
                or t is _GetSetDescriptorType:
            return True
        if depth > 2:
            return False
        if t is dict or t is tuple:  # (annotations, a dataclass's fields, `__orig_bases__`)
            return len(v) <= 1000 and (t is tuple or all(type(k) is str for k in dict.__iter__(v))) and all(
                self._passive(x, depth + 1) for x in (dict.values(v) if t is dict else tuple.__iter__(v)))
        if _is_class(v):
            return self.library_class(v)
        if _T_NAME.__get__(t, type) == "_tuplegetter" and not _T_FLAGS.__get__(t, type) & _HEAPTYPE:
            return True
        if not self.library_class(t) or self.check_type(t)[0] or _in_mro(t, "__get__"):
            return False
        held = list(dict.values(own_dict(v) or {}))  # its state: instance dict and slots (C descriptors: no call)
        for k in _mro(t):
            for d in _cls_dict(k).values():
                if type(d) is _MemberDescriptorType:
                    try:
                        held.append(d.__get__(v, t))
                    except AttributeError:
                        continue
        return len(held) <= 1000 and all(self._passive(x, depth + 1) for x in held)

    def _registered_reducer(self, t: type, lib: bool) -> str:
        """Why the reducer `copyreg.pickle` registered for `t` (looked up by the C pickler and CRANE's) could run
        the notebook's code, else "": one of the notebook's, or any reducer registered for a notebook class (a
        library function, `copy.copy`, runs on its instance and calls what it defines). (`t` is hashed here: its
        metaclass was proven first.)"""
        cr = dict.get(_MODULES, "copyreg")
        table = dict.get(_O_DICT_GET(cr, "__dict__"), "dispatch_table") if type(cr) is _ModuleType else None
        red = dict.get(table, t) if type(table) is dict else None
        if red is None:
            return ""
        if not _library_function(red):
            return "its pickling was registered with copyreg by the notebook"
        if not lib:
            return f"a library function (`{_type_name_of(type(red))}`) was registered with copyreg as its pickling"
        return ""

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
        libs = tuple(x for x in mro if x is not object and self.library_class(x))
        kept = _reached(modules, libs, self._judge_function, self.library_class)  # proven before, nothing changed
        if kept is not None:
            return set(kept[0]), kept[1], kept[2]
        witness = _Witness()
        names, bounded, notebook = self._walk(libs, modules, witness)
        # (an answer naming the notebook's function is not kept: nothing of the notebook's is held)
        _keep_reached(modules, libs, None if notebook else (frozenset(names), bounded, notebook), witness)
        return names, bounded, notebook

    @staticmethod
    def _judge_function(f: Any) -> tuple[bool, bool]:
        """(library code, generated by a library): what the walk asks of a function it meets."""
        return _library_function(f), _generated_by_library(f)

    def _walk(self, libs: tuple, modules: bool, w: _Witness, start: tuple = ()) -> tuple[set, bool, str]:
        """`_reachable`'s walk over the library classes `libs`. Every name it looks up (in a class's own dict, a
        module's, a function's globals), every function it meets and every MRO it reads go through `w`, which
        records them (the witness of its answer). `start`: library functions to walk from as well (the hooks a
        notebook class took from a library: `_reused_hooks`)."""
        todo: list = []
        for x in libs:
            for n in _PICKLING:
                v = w.get(x, n)
                if type(v) is _FunctionType:
                    w.fn(v, self._judge_function(v))
                    todo.append((v.__code__, v.__globals__, v))
        for v in start:
            w.fn(v, self._judge_function(v))
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
            if bounded and (any(n in _DYNAMIC for n in co_names) or _imports(code, w)):
                bounded = False  # a computed lookup, or a module it imports (whose code calls what?)
            spaces: list = list(libs)  # classes (their own dicts) and module dicts, looked up through `w`
            for n in co_names if modules else ():  # modules it may import by name (`from torch import _utils`)
                m = w.get(_MODULES, n)
                if type(m) is _ModuleType:
                    spaces.append(_O_DICT_GET(m, "__dict__"))
            if type(globs) is dict:
                spaces.append(globs)
                for n in co_names:
                    g: Any = w.get(globs, n)
                    if type(g) is _ModuleType:
                        bounded = False
                    elif any(k is type for k in _mro(type(g))) and w.lib(g, self.library_class(g)):
                        for k in w.mro(g):
                            if k is not object:
                                spaces.append(k)
                                co_names += tuple(i for i in ("__init__", "__new__", "__call__") if w.has(k, i))
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
                    val: Any = w.get(space, n)
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
                library, generated = self._judge_function(f)
                w.fn(f, (library, generated))
                if not library:
                    if generated:
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
            if t is not _FunctionType and t is not _BuiltinFunctionType and not _plain_class(obj):
                raise _Refused(f"{_type_name(obj)}: a class of its MRO holds a key that is not a plain string "
                               "(looking a name up there runs its code)")
            mod = _T_MODULE.__get__(obj, type) if t is not _FunctionType and t is not _BuiltinFunctionType \
                else obj.__module__  # (a function's and a C function's: a C member of their static type)
            hook = self.module_hook(mod) if mod is not None else self.hooked_modules()
            if hook:  # pickled by reference: its name is looked up in its module (or, unnamed, in every module)
                raise _Refused(f"{_type_name(obj)}: {hook}")
            why = self._enum_reads(obj) if t is not _FunctionType and t is not _BuiltinFunctionType else ""
            if why:
                raise _Refused(f"{_type_name(obj)}: {why}")
            return  # a class (its metaclass was checked) or a function: no instance hooks pickle reads
        if t is _ModuleType:  # pickled by its `__name__` (or by value): cloudpickle reads it, compares it, splits it
            md = _O_DICT_GET(obj, "__dict__")  # (a name it lacks would be asked of the module's `__getattr__`)
            if type(md) is not dict or not all(type(k) is str for k in dict.__iter__(md)) \
                    or type(dict.get(md, "__name__")) is not str:
                raise _Refused(f"the module object {_type_name(obj)} has no plain `__name__` or a key that is not a "
                               "plain string (pickling it would ask the notebook's code)")
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

    def _enum_reads(self, cls: Any) -> str:
        """Why pickling the notebook's enum class `cls` by value could run the notebook's code, else "". cloudpickle
        reads `{e.name: e.value for e in cls}` in the kernel (its `_enum_getnewargs` and `_enum_getstate`): through
        EnumType's `__iter__` (the metaclass, checked) and the members' `name` and `value`, which are enum's own
        `enum.property` over `_name_` and `_value_` unless a notebook class of the MRO defines one of those names
        (a property, any descriptor) or an attribute hook. The members themselves are pickled as `(cls, (value,))`
        (`Enum.__reduce_ex__`), proven as any instance (`_check_type`); a notebook enum's `__new__`, `__init__` and
        `_missing_` run only where the class is made again and looked up: in the worker."""
        mro = _mro(cls)
        if not any(type(_T_MODULE.__get__(k, type)) is str and _T_MODULE.__get__(k, type) == "enum"
                   and type(_T_QUALNAME.__get__(k, type)) is str and _T_QUALNAME.__get__(k, type) == "Enum"
                   and self.library_class(k) for k in mro if k is not object) or self.library_class(cls):
            return ""
        for k in mro:
            if k is object or self.library_class(k):
                continue
            kd = _cls_dict(k)
            for n in ("name", "value", "_name_", "_value_", "__getattribute__", "__getattr__"):
                if n in kd and not _inert(kd[n]) and not self._the_librarys_own(mro, n, kd[n]):
                    return (f"{_type_name_of(k)} defines `{n}`, which pickling the enum class reads of each of its "
                            "members")
        return ""

    def hooked_modules(self) -> str:
        """A module whose name lookups could run the notebook's code, if any (pickle searches every module for an
        object that names none)."""
        hit = self.libs.get("hooked")
        if hit is None:
            hit = next((h for h in (self.module_hook(n) for n in list(dict.keys(_MODULES))) if h), "")
            self.libs["hooked"] = hit
        return str(hit)

    def _keras_nodes(self, links: Any) -> bool:
        """`links` is a list (Keras's tracked list included) of Keras's own `Node` objects only (exact class, the
        library's): nothing else planted there is skipped by the pre-walk."""
        t = type(links)
        if not (t is list or issubclass(t, list) and self.library_class(t)) or len(links) > 100_000:
            return False
        for node in list.__iter__(links):
            nt = type(node)
            if _T_NAME.__get__(nt, type) != "Node" or _T_MODULE.__get__(nt, type) != "keras.src.ops.node" \
                    or not self.library_class(nt):
                return False
        return True

    def prewalk(self, obj: Any, limit: int = 200_000) -> None:
        """A library object its library pickles with its own code (which pickle does not see into, Keras's
        model saving): every object reachable through instance dicts, lists, tuples and dicts must be proven
        safe first, and no notebook class may be among them. A walk that refuses leaves nothing in `walked` (which
        then names only objects proven: a later look, as `_culprit`'s, walks them again)."""
        before = len(self.walked)
        try:
            self._prewalk(obj, limit)
        except BaseException:
            for key in list(self.walked)[before:]:  # (insertion order: what this walk added)
                del self.walked[key]
            raise

    def _prewalk(self, obj: Any, limit: int) -> None:
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
                        if k in _GRAPH_LINKS and self._keras_nodes(x):
                            continue  # where a Keras layer was called: its saving never reads them (pickle does)
                        if type(x) is _FunctionType:
                            self.refs.setdefault(id(x), []).append(k)
                        stack.append(x)



def _field_reads(reused: list, pristine: Any) -> list | None:
    """The names a notebook class's reused `__getstate__` reads off the instance when it is a field getter only,
    else None: attrs' slotted-class `slots_getstate` (`{name: getattr(self, name) for name in names}`, the names
    in its closure) and dataclasses' `_dataclass_getstate` (`getattr(self, f.name)` for each field of the
    `__dataclass_fields__` it reads off the instance: its `Field`s, exact, with exact `str` names). Their globals
    are their modules' own (a function made from their code with globals of the notebook's is not one), `Field`
    a class `pristine` proves the library's, untouched."""
    out: list = []
    for _k, name, f in reused:
        if name != "__getstate__":
            return None
        g = f.__globals__
        mod = dict.get(g, "__name__") if type(g) is dict else None
        if mod == "dataclasses" and g is _mdict(_module("dataclasses")) and dict.get(g, "_dataclass_getstate") is f:
            fields = next((_cls_dict(k)["__dataclass_fields__"] for k in _mro(_k)
                           if "__dataclass_fields__" in _cls_dict(k)), None)
            field_cls = dict.get(g, "Field")
            if type(fields) is not dict or not pristine(field_cls):
                return None
            out.append("__dataclass_fields__")
            for fld in dict.values(fields):
                fname = _cls_dict(field_cls).get("name") if _is_class(field_cls) else None
                n = fname.__get__(fld, field_cls) if type(fld) is field_cls and type(fname) is _MemberDescriptorType \
                    else None
                if type(n) is not str:
                    return None
                out.append(n)
        elif mod == "attr._make" and g is _mdict(_module("attr._make")) and f.__code__.co_name == "slots_getstate" \
                and f.__closure__ is not None and len(f.__closure__) == 1:
            names = f.__closure__[0].cell_contents
            if type(names) is not tuple or not all(type(n) is str for n in names):
                return None
            out.extend(names)
        else:
            return None
    return out


def _reduce_overridden(mro: tuple) -> bool:
    """Whether pickle calls the class's own `__reduce__` and so never reads its slots itself: `__reduce_ex__` is
    object's (C's `object.__reduce_ex__` calls an overridden `__reduce__` instead of copyreg's slot-reading default)
    and `__reduce__` is found before object (its being a library's or the notebook's is judged by `_check_type`'s
    loop over `_CALLED`). Python 3.13's `pathlib.PurePath`: a `_raw_path` property over its base's slot of that name,
    never read by pickle, as its own `__reduce__` returns the class and its parts."""
    for name in ("__reduce_ex__", "__reduce__"):
        owner = next((k for k in mro if name in _cls_dict(k)), None)
        if owner is None or (owner is object) != (name == "__reduce_ex__"):
            return False
    own = _cls_dict(next(k for k in mro if "__reduce__" in _cls_dict(k)))["__reduce__"]
    return own is not _cls_dict(object)["__reduce__"]  # (object's own, set on a class, reads the slots)


def _slot_names_read(t: type, mro: tuple) -> str:
    """Why reading the slots of an instance of `t` as pickle does could run the notebook's code, else "". Pickle
    (`object.__getstate__`, C) takes the names from `t.__slotnames__` in the class's own dict (a list, kept there by
    `copyreg._slotnames` once computed), else from `copyreg._slotnames`, which iterates each class's `__slots__` as
    stored (a str, or any iterable: a dict, a set, an object of the notebook's) and compares and slices each name;
    then it reads each name off the instance. So the names must be plain: `__slotnames__` an exact list of exact
    `str`, `__slots__` an exact str or an exact tuple, list, dict, set or frozenset of exact `str`; and each name
    found first, along the MRO, as a slot's own C descriptor (a property or any other descriptor there would be
    called)."""
    own = _cls_dict(t).get("__slotnames__")
    if own is not None:
        if not (type(own) is list and all(type(s) is str for s in list.__iter__(own))):
            return f"its `__slotnames__` ({_type_name_of(type(own))}) is not a plain list of names"
        read = [(t, s, s) for s in list.__iter__(own)]
    else:
        read = []
        for k in mro:
            slots = _cls_dict(k).get("__slots__")
            if slots is None:
                continue
            ts = type(slots)
            if ts is str:
                items: list = [slots]
            elif ts is tuple or ts is list or ts is set or ts is frozenset:
                items = list(slots)
            elif ts is dict:
                items = list(dict.keys(slots))
            else:
                return f"`__slots__` of {_type_name_of(k)} is a {_type_name_of(ts)}, which pickle would iterate"
            for s in items:
                if type(s) is not str:
                    return f"`__slots__` of {_type_name_of(k)} holds a {_type_name_of(type(s))}, not a plain name"
                if s in ("__dict__", "__weakref__"):
                    continue
                attr = f"_{_T_QUALNAME.__get__(k, type).rsplit('.', 1)[-1].lstrip('_')}{s}" \
                    if s.startswith("__") and not s.endswith("__") else s
                read.append((k, s, attr))
    for _k, _s, attr in read:
        for k2 in mro:
            d2 = _cls_dict(k2)
            if attr in d2:
                if type(d2[attr]) is not _MemberDescriptorType:
                    return f"`{attr}` of {_type_name_of(k2)} shadows a slot pickle reads"
                break
    return ""


# a Keras layer's links to the nodes it was called at: Keras's saving code never follows them (a model's layers are
# reached through `_layers`/`_operations`); shared/keras_graph.py carries them in pickle state, which pickle walks
# (skipped by the pre-walk only when they hold Keras's own nodes alone: `_Proof._keras_nodes`)
_GRAPH_LINKS = frozenset(("_inbound_nodes", "_outbound_nodes"))
_OWN_REDUCER_MODULES = ("keras", "tf_keras", "tensorflow")  # libraries whose pickling walks state pickle cannot see


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
            getter = next((_cls_dict(k)["__getattribute__"] for k in _mro(t)
                           if "__getattribute__" in _cls_dict(k)), None)
            own = getter(fn, "__name__") if type(getter) is _WrapperDescriptorType else None
    if type(own) is not str or own != name:
        return False
    if t is _BuiltinFunctionType:
        owner = type(_O_DICT_GET(fn, "__self__"))
        return owner is _MODULE_TYPE or owner is type(None)
    return _library_function(fn)



def _call(owner: dict, name: str, *args: Any) -> Any:
    """`owner[name](*args)` when it is the library's own function of that name (else refused)."""
    fn: Any = dict.get(owner, name)
    if not _callable_ok(fn, name):
        raise _Refused(name)
    return fn(*args)



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
        # (CRANE's own `__import__` is kernel/pristine.py's: the interpreter's, proven at install, is behind it)
        now, then = dict.get(_BUILTINS_DICT, name), _PR_C_IMPORT if name == "__import__" else dict.get(BUILTINS, name)
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
