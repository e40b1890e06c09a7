"""An OS transplant session's `load`: code a session command set on a library class runs in it as the command
ran, under the audit hook (issue 42, h5; review r1 M3's gap on the OS path). Part of the worker's `_crane_sandbox`.

A session's `load` unpickles more of the kernel's state with the audit hook bypassed (the unpickling is the
libraries' code, not the session's). The methods carried from the kernel are lifted off their classes for it
(worker/main._lift_patched), and the portable session unpickles under the call guard (worker/portable.guarded);
on the OS path a method a session command set itself (`pd.DataFrame.__setstate__ = own`, a library function
rebound: `pandas._libs.internals._unpickle_block = own`) ran in the next load with the audit hook off: a write it
tried outside the scratch directory met Landlock alone, its refusal swallowed and never recorded.

Every class and callable a pickle names passes through the unpickler's `find_class` before an object of it is
built or it is called. `audited_load`'s unpickler vets what it hands out: a class with code of the session's in
its MRO or its metaclass's (a function whose code is no library's nor CRANE's, a static or class method or a
property over one, an object whose heap class has such code: a descriptor's `__get__`), such a function, a module
that is not a module or has a `__getattr__` of the session's, a dotted name's owner class with such code. From
the first one on, the rest of the unpickling runs with the audit hook on, as a command runs; a denial recorded
meanwhile fails the load (the session's next run is unavailable, its reason the denial), even where the method
swallowed the refusal. Library code it reaches before (imports, the libraries' reducers) stays bypassed.

Not covered: a library function set in a library class's place by a command (`pd.DataFrame.__setstate__ =
shutil.rmtree`) is library code; the OS layer (Landlock, seccomp) holds it, as it holds a command's frame walk to
CRANE's locals (`ctx`, `audit`), which only the portable session's guard refuses.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from collections.abc import Callable
from typing import Any

from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.worker.finalizers import finalizers_tail  # kernel: strip

_LV_HEAP = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a static (C) type's dict cannot be changed, so holds no session code
_LV_DICT = type.__dict__["__dict__"].__get__
_LV_MRO = type.__dict__["__mro__"].__get__
_LV_FLAGS = type.__dict__["__flags__"].__get__
_LV_WRAPS = (staticmethod, classmethod, types.MethodType)


def _lv_sessions_code(code: types.CodeType) -> bool:
    """Code that is neither a library's (the interpreter's installation) nor CRANE's own (`<crane-kernel/...>`)."""
    name = code.co_filename or ""
    return not (name.startswith("<crane-kernel/") or name.startswith("<frozen ") or is_library(name))


def _lv_value(value: Any, cache: dict, depth: int = 0) -> bool:
    """Does calling or getting `value` (a class attribute, a module's `__getattr__`, what `find_class` returns) run
    code of the session's?"""
    t = type(value)
    if t is types.FunctionType:
        return _lv_sessions_code(value.__code__)
    if t in _LV_WRAPS:
        return depth < 4 and _lv_value(value.__func__, cache, depth + 1)
    if t is property:
        return depth < 4 and any(f is not None and _lv_value(f, cache, depth + 1)
                                 for f in (value.fget, value.fset, value.fdel))
    if t is type or not _LV_FLAGS(t) & _LV_HEAP:
        return False  # (a static type's instance: a builtin, a C descriptor, a number, a str)
    return depth < 1 and _lv_class(t, cache, shallow=True)  # an object of a heap class: its `__get__`, `__call__`


def _lv_class(cls: type, cache: dict, shallow: bool = False) -> bool:
    """Code of the session's in `cls`'s MRO (read by C-level dict reads) or, unless `shallow`, its metaclass's."""
    key = (id(cls), shallow)
    hit = cache.get(key)
    if hit is None:
        cache[key] = False  # (a class reached again while it is vetted)
        hit = any(_lv_value(v, cache, 1 if shallow else 0) for k in _LV_MRO(cls) if _LV_FLAGS(k) & _LV_HEAP
                  for v in list(_LV_DICT(k).values()))
        if not hit and not shallow and type(cls) is not type:
            hit = _lv_class(type(cls), cache)
        cache[key] = hit
    return hit


class _LvUnpickler(pickle.Unpickler):
    """`pickle.loads` whose `find_class` calls `hit(label)` once, before it hands out the first class or callable
    that holds code of the session's (see the module docstring)."""

    def __init__(self, data: bytes, buffers: list, hit: Callable[[str], None]) -> None:
        super().__init__(io.BytesIO(data), buffers=buffers)
        self.lv_hit, self.lv_found = hit, ""
        self.lv_cache: dict = {}

    def find_class(self, module: str, name: str) -> Any:
        if self.lv_found:
            return super().find_class(module, name)
        label = f"{module}.{name}"
        mod = sys.modules.get(module)
        if mod is not None and (type(mod) is not types.ModuleType
                                or _lv_value(mod.__dict__.get("__getattr__"), self.lv_cache)):
            self._found(label)
        elif mod is not None and "." in name and self._lv_owner(mod, name):
            self._found(label)
        obj = super().find_class(module, name)
        if not self.lv_found and (_lv_class(obj, self.lv_cache) if isinstance(obj, type)
                                  else _lv_value(obj, self.lv_cache)):
            self._found(label)
        return obj

    def _lv_owner(self, mod: types.ModuleType, name: str) -> bool:
        """A dotted name (`DataFrame.from_dict`): each owner on the way, found by dict reads, holds no code of the
        session's (its metaclass's `__getattribute__`, the attribute's `__get__`); True where one does, or where
        the way cannot be read without running code."""
        parts = name.split(".")
        obj: Any = mod.__dict__.get(parts[0])
        for part in parts[1:]:
            if type(obj) is types.ModuleType:
                if _lv_value(obj.__dict__.get("__getattr__"), self.lv_cache):
                    return True
                obj = obj.__dict__.get(part)
                continue
            if not isinstance(obj, type):
                return _lv_class(type(obj), self.lv_cache)  # (its class's `__getattribute__`; the way ends here)
            if _lv_class(obj, self.lv_cache):
                return True
            for k in _LV_MRO(obj):
                d = _LV_DICT(k)
                if part in d:
                    obj = d[part]
                    break
            else:
                return True
        return False

    def _found(self, label: str) -> None:
        self.lv_found = label
        self.lv_hit(label)


def audited_load(data: bytes, buffers: list, audit: dict, denied: list, tail: list | None = None) -> Any:
    """`pickle.loads(data, buffers=buffers)` for a session's `load` on the OS path, the audit hook bypassed
    (`audit["bypass"]`, set by the caller) until the unpickler meets code of the session's, on from there to the
    unpickling's end (bypassed again after). Raises PermissionError when the audit hook refused something meanwhile
    (the code's own `except` may have swallowed it). `tail`: the finalizers' tail after the namespace, loaded by the
    same unpickler (worker/finalizers.finalizers_tail), is appended to it."""
    before = len(denied)

    def hit(label: str) -> None:
        audit["bypass"] = False

    unpickler = _LvUnpickler(data, buffers, hit)
    try:
        loaded = unpickler.load()
        if tail is not None:
            tail.append(finalizers_tail(unpickler))
    finally:
        audit["bypass"] = True
    if unpickler.lv_found and len(denied) > before:
        raise PermissionError(f"code a session command set ({unpickler.lv_found}) ran in the load and was refused: "
                              f"{denied[before]}")
    return loaded
