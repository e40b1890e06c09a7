"""Transplant export, kernel side: what the notebook put on library modules and classes that the cell reads (red
team round 18, G2 and G19).

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py calls `library_attrs` once the cell's values
are chosen). A fresh worker imports each library again, so what an earlier cell set on one is not there:
`np.float = float` (a compatibility shim), `np.random.default_rng = functools.partial(...)`, `tqdm.pandas()` putting
`progress_apply` on pandas' classes: the copy then raised a certain false AttributeError. For the attribute names
the cell reads (the daemon's `attrs`, and those the notebook functions it reaches read: kernel/dynamic_reads
`reach`), this looks in the library modules the cell's values are (`np`, and a submodule one step down:
`np.random`) and in the library classes of its values, their bases, and the classes their packages' top modules
hold (`pandas.Series` for `df.b.progress_apply`):
- `carry`: [(module or class, name, value, replace)] (`_la_mode`): on a module, a value from another package than
  the module's (the builtins' `float`, a `functools.partial` of a library's function, a plain value) replaces the
  worker's, one of its own package goes where the worker's lacks the name; on a class, another library's function
  goes where the worker's lacks it (tqdm's); the notebook's own function only where the worker's module lacks the
  name (`np.sigmoid = ...`; never on a standard library module), never its classes
  (its methods on library classes travel as kernel/environment._patched_methods); never on a library CRANE's worker
  runs (kernel/library.carriable_module); a standard library module only takes a name it lacks there
  (`collections.Callable`). The export keeps those
  that are copyable; the worker sets them (worker/main `_set_library_attrs`);
- `held`: `owner:name` for every name found whose value is not of the owner's own package (`numpy:float`,
  `Series:progress_apply`): an AttributeError naming one in the copy is only likely (transplant.copy_crash_doubt):
  the kernel has it.
Module and class dicts are read by C descriptors once their keys are proven exact `str`; a function's home by its
C `__module__`; nothing of the notebook's runs; bounded work (`_LA_CLASSES` classes, `_LA_WORDS` names).
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _T_MODULE,
    _T_NAME,
    _BuiltinFunctionType,
    _cls_dict,
    _FunctionType,
    _mdict,
    _MemberDescriptorType,
    _module,
    _ModuleType,
    _mro,
)
from crane.sandbox.kernel.library import _LB_STDLIB, carriable_module  # kernel: strip
from crane.sandbox.kernel.lookups import _str_keys  # kernel: strip
from crane.sandbox.kernel.proof import _is_class, _library_function, _Proof  # kernel: strip

_LA_WORDS = 300  # attribute names looked for, at most
_LA_CLASSES = 400  # classes looked in, at most
_LA_HELD = 500  # `held` entries, at most
_LA_SIMPLE = (bool, int, float, complex, str, bytes, type(None))
_LA_FN_MODULE = _FunctionType.__dict__["__module__"]
_LA_BF_SELF = _BuiltinFunctionType.__dict__["__self__"]


def _la_top(name: Any) -> str:
    return name.partition(".")[0] if type(name) is str else ""


def _la_module_name(m: Any) -> Any:
    d = _mdict(m)
    return dict.get(d, "__name__") if _str_keys(d) else None


def _la_home(v: Any) -> Any:
    """The module a class or function says it is of (a C read), an exact `str`; "" where none can be read."""
    t = type(v)
    home: Any = ""
    try:
        if _is_class(v):
            home = _T_MODULE.__get__(v, type)
        elif t is _FunctionType:
            home = _LA_FN_MODULE.__get__(v, t)
        elif t is _BuiltinFunctionType:
            owner = _LA_BF_SELF.__get__(v, t)
            home = _la_module_name(owner) if type(owner) is _ModuleType else ""
    except Exception:  # (a heap type with no `__module__`: SWIG's)
        return ""
    return home if type(home) is str else ""  # (exact: nothing of a planted value's runs where it is compared)


def _la_partial() -> Any:
    """`functools.partial` where it is the C type (`type` its metaclass, a C `__new__`), else None."""
    fd = _mdict(_module("functools"))
    p = dict.get(fd, "partial") if _str_keys(fd) else None
    if type(p) is not type or _la_home(p) != "functools":  # (`_la_home`: an exact `str` or "")
        return None
    pd = _cls_dict(p)  # (the C type's own `__new__`, and `func` a C member: a Python class has neither so)
    if not _str_keys(pd) or type(pd.get("__new__")) is not _BuiltinFunctionType \
            or type(pd.get("func")) is not _MemberDescriptorType:
        return None
    return p


def _la_mode(owner_mod: str, v: Any, on_module: bool, partial: Any) -> str:
    """How `v`, found on a library module or class of `owner_mod`, travels: "replace" (set on the worker's where
    its own differs: a class or function of another package than the owner's, `np.float = float`; a
    `functools.partial` of a library's function; a plain value on a module), "add" (set only where the worker's
    lacks the name: the owner's own package's class or function under another name,
    `collections.Callable`; the notebook's function, where the name is the notebook's own), or "" (not at all: a
    bound method or an instance, the library's own object; the notebook's classes). `partial`: `_la_partial()`."""
    t = type(v)
    if on_module and any(t is c for c in _LA_SIMPLE):
        return "replace"
    if t is _ModuleType:
        return ""  # (unpickled, a module is imported in the worker: one the notebook put there, too, `pd.np = np`)
    if partial is not None and t is partial:
        func = _cls_dict(t).get("func")  # (the C type's member, its keys proven: nothing of the notebook's runs)
        ok = type(func) is _MemberDescriptorType and _library_function(func.__get__(v, t))
        return "replace" if ok and on_module else ""
    if not (_is_class(v) or t is _FunctionType or t is _BuiltinFunctionType and _la_home(v)):
        return ""
    if t is _FunctionType and not _library_function(v):  # the notebook's function: where the name is the notebook's
        return "add" if on_module else ""  # own (`np.sigmoid = ...`), never over a library's
    home = _la_home(v)
    if not home or home == "__main__":
        return ""
    return "replace" if _la_top(home) != _la_top(owner_mod) and on_module else "add"


def attr_label(owner: Any, name: str) -> str:
    """`owner:name` as `held` says it: a module by its `__name__`, a class by its `__name__`."""
    label = _T_NAME.__get__(owner, type) if _is_class(owner) else _la_module_name(owner)
    return f"{label}:{name}"


def _la_std_add(v: Any) -> bool:
    """A standard library module takes `v` under a name its worker's lacks only where it is a library's own object,
    never the notebook's function (CRANE's worker runs the standard library's code: kernel/stdlib_own's install check
    refuses such a function on a module it relies on anyway)."""
    return type(v) is not _FunctionType or _library_function(v)


def library_attrs(objs: dict, words: list, proof: _Proof) -> tuple[list, list]:
    """(`carry`, `held`) for the copied values `objs` and the attribute names `words` (see the module)."""
    want = {w for w in words[:_LA_WORDS] if type(w) is str and w.isidentifier() and not w.startswith("__")}
    carry: list = []
    held: list = []
    if not want:
        return carry, held
    partial = _la_partial()
    modules: list = []
    classes: list = []
    for key, v in dict.items(objs):
        if type(key) is not str or key.startswith("\x00"):
            continue
        if type(v) is _ModuleType:
            modules.append(v)
        elif _is_class(v):
            classes.append(v)
        else:
            classes.append(type(v))
    for m in list(modules):  # a submodule one step down (`np.random` for `np.random.default_rng`)
        d = _mdict(m)
        if _str_keys(d):
            modules.extend(s for w in want if type(s := dict.get(d, w)) is _ModuleType)
    seen: set = set()
    for m in modules:
        d = _mdict(m)
        if id(m) in seen or not _str_keys(d):
            continue
        seen.add(id(m))
        name = _la_module_name(m)
        if type(name) is not str:
            continue
        for w in sorted(want):
            if w not in d:
                continue
            v = dict.get(d, w)
            if _la_top(_la_home(v)) != _la_top(name):  # (not the module's own package's: what a cell may have put)
                held.append(attr_label(m, w))
            # (a standard library module takes a name it lacks in the worker, never another value for one it has:
            # worker/main `_set_library_attrs`; CRANE's worker runs its code)
            mode = _la_mode(name, v, True, partial)
            if not carriable_module(name):
                mode = "add" if mode and _la_top(name) in _LB_STDLIB and _la_std_add(v) else ""
            if mode:
                carry.append((m, w, v, mode == "replace"))
    tops = {_la_top(_la_home(k)) for k in classes if _is_class(k)}
    for top in sorted(t for t in tops if t and carriable_module(t)):
        d = _mdict(_module(top))  # the package's top module's classes (`pandas.Series`)
        if _str_keys(d):
            classes.extend(v for v in dict.values(d) if _is_class(v))
    for cls in classes[:_LA_CLASSES]:
        if not _is_class(cls) or not proof.library_class(cls):
            continue
        for k in _mro(cls):
            if k is object or id(k) in seen:
                continue
            seen.add(id(k))
            kd = _cls_dict(k)
            mod = _la_home(k) if proof.library_class(k) else ""
            if not mod or not _str_keys(kd):
                continue
            for w in sorted(want):
                if w not in kd:
                    continue
                v = kd[w]
                if _la_top(_la_home(v)) == _la_top(mod):  # (the class's own package's code)
                    continue
                held.append(attr_label(k, w))
                # (a library's function on another library's class: tqdm's `progress_apply` on pandas'; the
                # notebook's own functions there travel as kernel/environment._patched_methods)
                if carriable_module(mod) and type(v) is _FunctionType and proof._pristine_value(v, 0) \
                        and _la_mode(mod, v, False, partial):
                    carry.append((k, w, v, False))
    return carry, held[:_LA_HELD]
