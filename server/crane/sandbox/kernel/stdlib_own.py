"""Transplant export, kernel side: the standard library's classes the export reaches are the interpreter's own.

Runs in the user's kernel (part of `_crane_transplant`, after kernel/bound.py; kernel/export.py asks
`patched_stdlib()` before any other step). CRANE binds C functions at install and gives its cloudpickle private
copies of the modules it names (kernel/bound.py), but the export still runs Python methods of standard-library
classes it cannot copy: cloudpickle's class tracker (`weakref.WeakKeyDictionary`, `WeakValueDictionary`, `KeyedRef`,
`uuid.UUID`) and dispatch table (`collections.ChainMap`), `dis`'s instructions, the codec of a text file
(`codecs`, `encodings.utf_8`), pyzmq's socket options (`enum`), the miniature's `random.Random`, `isinstance`
against an ABC (`abc`, `_collections_abc`); C code of numpy reads `pickle.PickleBuffer` at each call. Those methods
read their module's globals and the builtins when they run, so the notebook replacing a class there
(`weakref.ref = MyRef`) or patching a method (`weakref.WeakKeyDictionary.get = ...`) would have the export call it.

So before anything is read, every class in the namespaces of `_SO_MODULES` (and every name that held a class at
install), and every member of their Python classes, bases and metaclasses, must be the installation's own: a
function whose code is a file of the interpreter's installation (the standard library's, or a library's that
patched it at import: typing_extensions), of a frozen module, or `namedtuple`'s generated code; a C function,
descriptor or type; a property/classmethod/staticmethod over such; an instance of such a class, or another callable,
only as the very object it was at install. Else the export is refused, naming it. The modules' functions are asked
about at the install only (CRANE binds them as they are then): after it, CRANE's code calls none of them, and
test_export_stdlib_classes shows the stdlib methods the export runs calling none either. A patch made before the
install is found the same way, at the install: `_crane_transplant` then refuses to install, naming it
(transplant.py installs it before CRANE's cloudpickle, whose module body makes a `WeakKeyDictionary`; only
shield.py, library.py (`sysconfig.get_paths()`) and bound.py run before this check). Not checked: a stdlib class
under another stdlib name (`io.BytesIO = io.StringIO`: no notebook code runs, a different behaviour), plain data.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _HEAPTYPE,
    _MODULES,
    _STDLIB_NAMES,
    _T_FLAGS,
    _BuiltinFunctionType,
    _ClassMethodDescriptorType,
    _cls_dict,
    _FunctionType,
    _GetSetDescriptorType,
    _mdict,
    _MemberDescriptorType,
    _MethodDescriptorType,
    _MethodType,
    _module,
    _ModuleType,
    _mro,
    _type_name_of,
    _WrapperDescriptorType,
)
from crane.sandbox.kernel.library import is_library  # kernel: strip

# the modules whose Python classes the export's steps (and the library C code they call) reach
_SO_MODULES = ("abc", "_collections_abc", "collections", "weakref", "_weakrefset", "uuid", "dis", "opcode", "pickle",
               "copyreg", "enum", "random", "codecs", "encodings", "encodings.utf_8", "io", "types", "typing",
               "dataclasses", "functools", "operator", "copy", "builtins")
_SO_C = (_BuiltinFunctionType, _MethodDescriptorType, _WrapperDescriptorType, _ClassMethodDescriptorType,
         _GetSetDescriptorType, _MemberDescriptorType)
_SO_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE
_SO_NAMEDTUPLE_GLOBALS = frozenset(("_tuple_new", "__builtins__", "__name__"))
_SO_CALLABLE = callable
_SO_CLASS_NAMES: set = set()  # (id of a module's namespace, name) that held a class at install
_SO_AT_INSTALL: dict = {}
_SO_SEEN: dict = {}  # id -> each namespace and class `_so_install` took (held: ids stay theirs)  # (id of a namespace, name) -> the callable it held at install


def _so_stdlib_namespaces() -> dict:
    """id of a namespace -> the `<frozen NAME>` file names it may hold code of: each name the interpreter's table
    has it under (3.13's `_collections_abc` is also `collections.abc`, and says so in its `__name__`)."""
    out: dict = {}
    for name, m in list(dict.items(_MODULES)):
        if type(name) is str and type(m) is _ModuleType and name.partition(".")[0] in _STDLIB_NAMES:
            out.setdefault(id(_mdict(m)), set()).add(f"<frozen {name}>")
    return out


def _so_function(f: Any, memo: dict) -> bool:
    """A Python function of the installation: its code a library's file (the standard library's, or a library's
    that patched it at import: typing_extensions replaces `typing._collect_parameters`), a frozen module's living in
    that module's namespace, or `namedtuple`'s generated `__new__`."""
    g = f.__globals__
    fn = f.__code__.co_filename
    if type(fn) is not str:
        return False
    if fn.startswith("<frozen "):
        spaces = memo.get("\x00ns")
        if spaces is None:
            spaces = memo["\x00ns"] = _so_stdlib_namespaces()
        return fn in spaces.get(id(g), ())
    if fn == "<string>":
        gname = dict.get(g, "__name__")
        return type(gname) is str and gname.startswith("namedtuple_") and frozenset(g) <= _SO_NAMEDTUPLE_GLOBALS
    return is_library(fn)


def _so_is_class(v: Any) -> bool:
    return any(k is type for k in _mro(type(v)))


def _so_c_type(t: Any) -> bool:
    flags = _T_FLAGS.__get__(t, type)
    return not flags & _HEAPTYPE or bool(flags & _SO_IMMUTABLE)


def _so_kept(v: Any) -> bool:
    """A value that passes only as what it was at install: a C callable other than a function or descriptor
    (`functools.partial`, an lru_cache wrapper), or an instance of a Python class (an enum member, a
    `cached_property`)."""
    t = type(v)
    return not _so_c_type(t) or _SO_CALLABLE(v)


def _so_value(v: Any, owner: Any, name: str, memo: dict) -> bool:
    """The member `name` of `owner` (a class, or a module's namespace) holding `v` is the interpreter's own."""
    t = type(v)
    if t is _FunctionType:
        return _so_function(v, memo)
    if t in _SO_C:
        return True
    if t is staticmethod or t is classmethod or t is _MethodType:
        return _so_value(v.__func__, owner, name, memo)
    if t is property:
        return all(f is None or _so_value(f, owner, name, memo) for f in (v.fget, v.fset, v.fdel))
    if _so_is_class(v):
        return _so_class(v, memo) is None
    if _so_class(t, memo) is not None:
        return False  # an object of a class that is not the standard library's (a descriptor, a callable)
    return not _so_kept(v) or dict.get(_SO_AT_INSTALL, (id(owner), name)) is v


def _so_members(k: Any, memo: dict) -> str | None:
    """`module.Class.member` of the first member of the class `k`'s own namespace that is not the interpreter's."""
    for n, v in list(_cls_dict(k).items()):
        if not _so_value(v, k, n, memo):
            return f"{_type_name_of(k)}.{n}"
    return None


def _so_class(cls: Any, memo: dict) -> str | None:
    """None when every Python class of `cls`'s MRO and of its metaclass's holds only the interpreter's own members;
    else `module.Class.member` of the first that does not."""
    key = id(cls)
    if key in memo:
        return memo[key]
    memo[key] = None  # (a class reached again while it is checked)
    bad = None
    for k in (*_mro(cls), *_mro(type(cls))):
        if _so_c_type(k):
            continue
        if id(k) not in memo or k is cls:
            memo[id(k)] = None
            memo[id(k)] = bad = _so_members(k, memo)
        else:
            bad = memo[id(k)]
        if bad:
            break
    memo[key] = bad
    return bad


def _so_namespaces() -> list:
    return [(m, _mdict(_module(m))) for m in _SO_MODULES]


def patched_stdlib(functions: bool = False) -> str | None:
    """The first class of `_SO_MODULES` (a name holding a class now or at install) that is not the installation's
    own, or has a member that is not, named for the refusal; else None. `functions`: the modules' other callables
    too (at install: CRANE binds functions as they are then). At an export they are not asked about: CRANE's own
    code calls none of them (bound at install, private copies for its cloudpickle), and the function sweep of
    test_export_by_construction shows the stdlib classes' methods the export runs calling none either."""
    memo: dict = {}
    spaces = _so_namespaces()
    _so_install([md for _, md in spaces if md and id(md) not in _SO_SEEN])
    for mname, md in spaces:
        for n, v in list(dict.items(md)):
            if _so_is_class(v):
                bad = _so_class(v, memo)
                if bad:
                    return f"`{mname}.{n}` (`{bad}` is not the standard library's code)"
            elif (functions or (id(md), n) in _SO_CLASS_NAMES) and mname != "builtins" and _SO_CALLABLE(v) \
                    and not _so_value(v, md, n, memo):
                # (a module's plain values and instances are not checked: `random._inst` replaced calls nothing)
                return f"`{mname}.{n}` (not the standard library's code)"
    return None


def _so_install(namespaces: list) -> None:
    """What passes only as it was at install (`_so_kept`), by its owner (a class, a module's namespace) and name; a
    module of `_SO_MODULES` imported since (by CRANE's cloudpickle, or the notebook) is taken when first checked."""
    todo: list = list(namespaces)
    while todo:
        owner = todo.pop()
        if id(owner) in _SO_SEEN:
            continue
        _SO_SEEN[id(owner)] = owner
        items = dict.items(owner) if type(owner) is dict else _cls_dict(owner).items()
        for n, v in list(items):
            if _so_is_class(v):
                if type(owner) is dict:
                    _SO_CLASS_NAMES.add((id(owner), n))
                todo.extend(k for k in (*_mro(v), *_mro(type(v))) if not _so_c_type(k))
            elif type(v) not in _SO_C and type(v) is not _FunctionType and _so_kept(v):
                _SO_AT_INSTALL[(id(owner), n)] = v


_so_install([md for _, md in _so_namespaces()])
_SO_BEFORE = patched_stdlib(functions=True)
if _SO_BEFORE:  # patched before CRANE's first export: installing the export's other parts would call it
    raise ImportError(f"the notebook replaced {_SO_BEFORE} before CRANE's first export: CRANE's export is not "
                      "installed in this kernel (it would call that code)")
