"""Transplant export, kernel side: what runs when a copied object is freed — the notebook's `weakref.finalize`
registrations, weak references with callbacks, classes with `__del__` — carried with the copy (issues 41/42, h2).

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py calls it through kernel/pickling.dump_state,
right after the namespace's pickle, in the pickler's thread). In the kernel, `del o` (or rebinding the last name of
`o`) runs `o`'s finalizers at once: `weakref.finalize(o, os._exit, 0)` ends the kernel, a raising one prints
"Exception ignored". A copy without them said `no-crash`, certain. `finalizer_tail(pickler, trial, top)` reads the
pickle's memo (every object copied, by its index in the pickle), and for each copied object that is weakly referenced
with a callback, or whose class has a `__del__`:
- a live `weakref.finalize` registration (its `_registry` info: func, args, kwargs, atexit) or another callback is
  carried when it pickles on its own (`trial`: a dry run, counted, nothing written), as `(memo index, kind, payload)`:
  the worker (worker/finalizers.py) registers it again on the copy of that very object;
- a callback that does not pickle, or a weak proxy (its callback cannot be read), makes that object "missed": the
  worker watches it, and a clean run in which the cell freed it is only likely;
- the callbacks of the standard library's weak containers (`WeakValueDictionary`, `WeakKeyDictionary`, `WeakSet`,
  the ABC caches) only take a dead entry out of their container: left alone. Classes and modules are never counted
  (a cell does not free them).
With any of these, the tail also holds every copied object's reference count in the kernel, less the export's own
references (the memo, the export's name table): the worker holds each object the kernel holds more often than the
copy does (an `Out` entry, a name not copied, a library's cache), so a `del` frees an object in the worker only where
it would free it in the kernel. Nothing of the notebook's runs: the registry, each info's slots and each weak
reference's callback are read by C-level descriptors and C functions after exact type checks (`weakref` is proven the
standard library's own by kernel/stdlib_own.py before the export), counts by `sys.getrefcount`.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _MODULE_TYPE,
    _BuiltinFunctionType,
    _cls_dict,
    _FunctionType,
    _mdict,
    _MemberDescriptorType,
    _module,
    _mro,
)
from crane.sandbox.kernel.shield import own_c  # kernel: strip

FINALIZERS_TAG = "crane-finalizers-1"  # the tail's first item (worker/finalizers.py checks it)
_FZ_GETWEAKREFS, _FZ_WEAKCOUNT = own_c("_weakref", "getweakrefs"), own_c("_weakref", "getweakrefcount")
_FZ_REFCOUNT = own_c("sys", "getrefcount")
_FZ_REF = _mdict(_module("_weakref")).get("ref")
_FZ_CALLBACK = _cls_dict(_FZ_REF).get("__callback__") if type(_FZ_REF) is type else None
_FZ_HELD = 3  # references the export holds to each memo object while counting: the pickler's memo, the list, `map`


def _fz_info(fin: Any, cls: Any) -> tuple | None:
    """A live `weakref.finalize`'s (func, args, kwargs, atexit), read from the class's `_registry` by its slots'
    member descriptors; None when it is not registered (called, detached or dead) or the registry is not plain."""
    reg = _cls_dict(cls).get("_registry")
    info_cls = _cls_dict(cls).get("_Info")
    if type(reg) is not dict or type(info_cls) is not type:
        return None
    info = dict.get(reg, fin)  # (an exact `finalize`: object's own hash and equality)
    if type(info) is not info_cls:
        return None
    slots = _cls_dict(info_cls)
    out = []
    for name in ("func", "args", "kwargs", "atexit"):
        d = slots.get(name)
        if type(d) is not _MemberDescriptorType:
            return None
        try:
            out.append(d.__get__(info, info_cls))
        except AttributeError:
            return None
    func, args, kwargs, atexit = out
    if type(args) is not tuple or not (kwargs is None or type(kwargs) is dict):
        return None
    return func, args, kwargs or {}, bool(atexit is True)


def _fz_harmless(cb: Any, files: tuple) -> bool:
    """A weak container's own callback (the standard library's `weakref`/`_weakrefset` code, `_abc`'s `_destroy`): it
    only takes a dead entry out of its container. WeakMethod's `_cb`, which calls the notebook's callback, is not."""
    t = type(cb)
    if t is _FunctionType:
        code = cb.__code__
        return code.co_filename in files and code.co_name != "_cb"
    if t is _BuiltinFunctionType:
        return cb.__name__ == "_destroy" and type(cb.__self__) is _FZ_REF
    return False


def _fz_kind(t: Any, cache: dict) -> int:
    """0: a class or a module (no cell frees one), 2: a class of `t`'s MRO (object's aside) defines `__del__` (read
    from each class's own dict), 1: neither. Cached by the type's id (a class is never hashed)."""
    hit = cache.get(id(t))
    if hit is None:
        mro = _mro(t)
        if t is _MODULE_TYPE or any(k is type for k in mro):
            hit = 0
        else:
            hit = 2 if any(k is not object and "__del__" in _cls_dict(k) for k in mro) else 1
        cache[id(t)] = hit
    return hit


def finalizer_tail(pickler: Any, trial: Any, top: dict) -> tuple | None:
    """The tail pickled after the namespace with the same pickler (identity through its memo), or None when no copied
    object has anything that runs when it is freed. `trial(value)`: the value pickles on its own (a dry run).
    `top`: the export's name table (its references are the export's, not the kernel's).
    (FINALIZERS_TAG, counts, entries, watched): `counts[i]`, the kernel's references to memo object i;
    `entries`, (i, "finalize", (func, args, kwargs, atexit)) and (i, "callback", callback); `watched`, the indices of
    every object with something that runs when it is freed, and whether it was missed."""
    if _FZ_CALLBACK is None:
        return None
    memo = pickler.memo.copy()  # {id: (index, object)}
    n = len(memo)
    objs: list = [None] * n
    for idx, obj in dict.values(memo):
        if type(idx) is int and 0 <= idx < n:
            objs[idx] = obj
    obj = None
    del memo
    cache: dict = {}
    kinds = [_fz_kind(t, cache) for t in map(type, objs)]
    weakly = list(map(_FZ_WEAKCOUNT, objs))
    candidates = [i for i in range(n) if kinds[i] and (weakly[i] or kinds[i] == 2)]
    if not candidates:
        return None
    # the kernel's references to each copied object, before anything below holds one more
    counts = list(map(_FZ_REFCOUNT, objs))
    at = {id(objs[i]): i for i in range(n)}
    for v in dict.values(top):
        i = at.get(id(v))
        if i is not None:
            counts[i] -= 1
    at.clear()
    counts = [c - _FZ_HELD for c in counts]
    weak = _mdict(_module("weakref"))
    fin_cls = weak.get("finalize")
    files = tuple(f for f in (weak.get("__file__"), _mdict(_module("_weakrefset")).get("__file__")) if type(f) is str)
    entries: list = []
    watched: list = []
    for i in candidates:
        missed = found = False
        if weakly[i]:
            for r in _FZ_GETWEAKREFS(objs[i]):
                if not any(k is _FZ_REF for k in _mro(type(r))):
                    missed = found = True  # a weak proxy: its callback cannot be read
                    continue
                cb = _FZ_CALLBACK.__get__(r, _FZ_REF)
                if cb is None or _fz_harmless(cb, files):
                    continue
                found = True
                if fin_cls is not None and type(cb) is fin_cls:
                    info = _fz_info(cb, fin_cls)
                    if info is None:
                        continue  # (no longer registered: calling it does nothing)
                    if trial(info[:3]):
                        entries.append((i, "finalize", info))
                    else:
                        missed = True
                elif trial(cb):
                    entries.append((i, "callback", cb))
                else:
                    missed = True
        if found or kinds[i] == 2:
            watched.append((i, missed))
    if not watched:
        return None
    return (FINALIZERS_TAG, counts, entries, watched)
