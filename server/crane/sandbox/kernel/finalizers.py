"""Transplant export, kernel side: what runs when a copied object is freed — the notebook's `weakref.finalize`
registrations, weak references with callbacks, classes with `__del__` — carried with the copy (issues 41/42, h2).

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py calls it through kernel/pickling.dump_state,
right after the namespace's pickle, in the pickler's thread). In the kernel, `del o` (or rebinding the last name of
`o`) runs `o`'s finalizers at once: `weakref.finalize(o, os._exit, 0)` ends the kernel, a raising one prints
"Exception ignored". A copy without them said `no-crash`, certain. `FinalizerWatch.see` is called by the export's
pickler (kernel/pickling.py) for every object it pickles but builtin atoms and containers (after its proof), and keeps
those weakly referenced or of a class with `__del__` (modules aside: a cell does not free one; a class only when a
cell defined it, whose `del K; gc.collect()` frees it; exact sets and frozensets, which the pickler never hands it,
are added by the tail from the names copied and, where a `weakref.finalize` is registered on one, from the registry:
issue 42, h6); once the
namespace is pickled, `FinalizerWatch.tail` reads, for each, the weak references to it with a callback:
- a live `weakref.finalize` registration (its `_registry` info: func, args, kwargs, atexit) or another callback is
  carried when it pickles on its own (`trial`: a dry run, counted, nothing written): the worker (worker/finalizers.py)
  registers it again on the copy of that very object (the tail is pickled by the same pickler: a reference to it);
- a callback that does not pickle, or a weak proxy (its callback cannot be read), makes that object "missed": the
  worker watches it, and a clean run in which the cell freed it is only likely;
- the callbacks of the standard library's weak containers (`WeakValueDictionary`, `WeakKeyDictionary`, `WeakSet`,
  the ABC caches) only take a dead entry out of their container: left alone (known by their code object's identity,
  collected at install: never by a file name the notebook can forge).
With each, the kernel's reference count of that object, less the export's own references (the pickler's memo, the
export's name table): the worker holds it once more where the kernel holds it more often than the copy does (an `Out`
entry, a name not copied, a library's cache), so a `del` frees it in the worker only where it would in the kernel.
Nothing of the notebook's runs: the registry, each info's slots and each weak reference's callback are read by C-level
descriptors and C functions after exact type checks (`weakref` is proven the standard library's own by
kernel/stdlib_own.py before the export), counts by `sys.getrefcount`; no value of an unproven type is hashed or
compared: the registry is read by identity once its keys are proven exact `finalize`s, `__del__` looked up only in
class dicts proven to hold exact `str` keys, and anything else makes the object "missed" (review r1 H1-H3).
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _MODULE_TYPE,
    _T_MODULE,
    _BuiltinFunctionType,
    _cls_dict,
    _FunctionType,
    _mdict,
    _MemberDescriptorType,
    _module,
    _mro,
    _WrapperDescriptorType,
)
from crane.sandbox.kernel.lookups import _LK_IS, _LK_REPEAT  # kernel: strip
from crane.sandbox.kernel.proof import _Refused  # kernel: strip
from crane.sandbox.kernel.shield import SH_NOT_OWN, own_c  # kernel: strip
from crane.sandbox.kernel.stops import _unreproducible  # kernel: strip

FINALIZERS_TAG = "crane-finalizers-1"  # the tail's first item (worker/finalizers.py checks it)
_FZ_NOT_OWN = len(SH_NOT_OWN)  # (this part is installed after kernel/stdlib_own.py's check: its own check below)
_FZ_GETWEAKREFS, _FZ_WEAKCOUNT = own_c("_weakref", "getweakrefs"), own_c("_weakref", "getweakrefcount")
_FZ_REFCOUNT = own_c("sys", "getrefcount")
_FZ_REF = _mdict(_module("_weakref")).get("ref")
_FZ_CALLBACK: Any = _cls_dict(_FZ_REF).get("__callback__") if type(_FZ_REF) is type and len(SH_NOT_OWN) == _FZ_NOT_OWN \
    else None  # (None: a function above was replaced before the install: no finalizer is carried, none is called)
_FZ_HELD = 3  # references the export holds to each object it counts: the pickler's memo, `found`, `map`
_FZ_MISSED = "missed"  # (_fz_info: the registry cannot be read without running the notebook's code)


def _fz_container_codes() -> tuple:
    """The code objects of the standard library's weak containers' own callbacks (`WeakValueDictionary`'s and
    `WeakKeyDictionary`'s `remove`, `WeakSet`'s `_remove`: closures, one code object per container class), read at
    install from live containers (weakref and _weakrefset are proven the standard library's own by
    kernel/stdlib_own.py, installed before this part). A callback is a container's own only when its code IS one of
    these (a notebook's function given `co_filename=weakref.__file__` is not); () where they cannot be read."""
    if _FZ_CALLBACK is None:
        return ()
    weak, wset = _mdict(_module("weakref")), _mdict(_module("_weakrefset"))
    def holder() -> None:  # (a fresh function: weakly referable, hashed by identity; no class is made)
        pass

    kept = (weak["WeakValueDictionary"](), weak["WeakKeyDictionary"](), wset["WeakSet"]())
    kept[0][0] = holder
    kept[1][holder] = 0
    kept[2].add(holder)
    codes: list = []
    for r in _FZ_GETWEAKREFS(holder):
        cb = _FZ_CALLBACK.__get__(r, _FZ_REF)
        if type(cb) is _FunctionType and not any(c is cb.__code__ for c in codes):
            codes.append(cb.__code__)
    return tuple(codes) if len(codes) == len(kept) else ()


_FZ_CONTAINER_CODES = _fz_container_codes()


def _fz_registry(cls: Any) -> Any:
    """{id(finalize): its info} of `weakref.finalize._registry` (read by identity: no key is hashed or compared), or
    `_FZ_MISSED` where the registry or its info class is not plain, or a key is not an exact `finalize` (the class is
    the standard library's, proven by kernel/stdlib_own.py: object's hash and equality, so looking a finalizer up
    there by identity finds what `finalize.__call__`'s lookup finds; a key of the notebook's could answer that
    lookup with its own `__eq__`, and is never called here)."""
    reg = _cls_dict(cls).get("_registry")
    if type(reg) is not dict or type(_cls_dict(cls).get("_Info")) is not type:
        return _FZ_MISSED
    if sum(map(_LK_IS, map(type, reg), _LK_REPEAT(cls))) != len(reg):
        return _FZ_MISSED
    return dict(zip(map(id, reg), dict.values(reg), strict=True))


def _fz_info(fin: Any, cls: Any, reg: dict) -> tuple | None:
    """A live `weakref.finalize`'s (func, args, kwargs, atexit), read from the registry (`_fz_registry`) by its
    slots' member descriptors; None when it is not registered (called, detached or dead) or its info is not plain."""
    info_cls = _cls_dict(cls).get("_Info")
    info = dict.get(reg, id(fin))  # (an exact int key: the very object's entry, nothing compared)
    if type(info_cls) is not type or type(info) is not info_cls:
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


def _fz_harmless(cb: Any) -> bool:
    """A weak container's own callback (a standard library's container's, by its code object's identity, or `_abc`'s
    C `_destroy`): it only takes a dead entry out of its container. WeakMethod's `_cb`, which calls the notebook's
    callback, is not; nor is any function whose code is not one of those (no string of the notebook's compared)."""
    t = type(cb)
    if t is _FunctionType:
        code = cb.__code__
        return any(c is code for c in _FZ_CONTAINER_CODES)
    if t is _BuiltinFunctionType:
        return cb.__name__ == "_destroy" and type(cb.__self__) is _FZ_REF  # (a C function's own name: exact)
    return False


def _fz_kind(t: Any) -> int:
    """0: a module (held by `sys.modules` in the kernel and the worker alike: never freed by a cell), 2: a class of
    `t`'s MRO (object's aside) defines `__del__` (read from each class's own dict), 3: a class's dict holds a key
    that is not an exact `str` (looking `__del__` up there would compare it: unproven, the object is "missed"), 1:
    none of these; 4: `t` is a metaclass (its instance a class: `weakref.finalize(SomeClass, ...)` runs when the
    collector frees the class after the cell's `del SomeClass; gc.collect()`; issue 42, h6)."""
    mro = _mro(t)
    if t is _MODULE_TYPE:
        return 0
    if any(k is type for k in mro):
        return 4
    for k in mro:
        if k is object:
            continue
        kd = _cls_dict(k)
        if sum(map(_LK_IS, map(type, kd), _LK_REPEAT(str))) != len(kd):
            return 3
        if "__del__" in kd:
            return 2
    return 1


def _fz_main_class(cls: Any) -> bool:
    """A class a cell defined (`__module__` the exact str `__main__`: pickled by value, so a cell's `del` can free
    its copy as the kernel's) that is weakly referenced: the tail reads its callbacks (library classes, pickled by
    reference, are never freed by a cell)."""
    mod = _T_MODULE.__get__(cls, type)
    return type(mod) is str and mod == "__main__" and _FZ_WEAKCOUNT(cls) > 0


class FinalizerWatch:
    """What the export's pickler met that something runs for when it is freed (`see`, called by the pickler for every
    object it pickles that is not a builtin container or atom, after its proof), and the tail pickled after the
    namespace (`tail`)."""

    def __init__(self, proof: Any = None) -> None:
        self.proof = proof  # (its caches hold the classes it proved: the export's references, not the kernel's)
        self.found: list = []
        self.kinds: dict = {}  # id(type) -> _fz_kind (a class is never hashed)
        # (None: a function above was replaced before the install: the pickler calls nothing here)
        self.see = self._see if _FZ_CALLBACK is not None else None

    def _see(self, obj: Any) -> None:
        kind = self.kinds.get(id(type(obj)))
        if kind is None:
            kind = self.kinds[id(type(obj))] = _fz_kind(type(obj))
        if kind == 2 or kind == 3 or (kind == 1 and _FZ_WEAKCOUNT(obj)) or (kind == 4 and _fz_main_class(obj)):
            self.found.append(obj)

    def release(self) -> None:
        """Hold nothing of the notebook's any more (the export's end: kernel/export._release)."""
        self.found = []
        self.kinds = {}
        self.proof = None

    def _proof_held(self, held: dict) -> None:
        """Add to `held` (id -> the export's references) those the proof's caches hold: (class, ...) tuples by the
        class's id, objects its pre-walk kept (a class a cell defined is cached there while proven: counted as the
        kernel's, its copy was pinned and its finalizer never ran; issue 42, h6)."""
        proof = self.proof
        if proof is None:
            return
        for cache in (proof.libs, proof.types):
            if type(cache) is not dict:
                continue
            for v in list(dict.values(cache)):
                if type(v) is tuple and len(v) and id(v[0]) in held:
                    held[id(v[0])] += 1
        walked = proof.walked
        for v in list(dict.values(walked)) if type(walked) is dict else ():
            if id(v) in held:
                held[id(v)] += 1

    def _registered_sets(self, pickler: Any) -> None:
        """The exact sets and frozensets anywhere in the copy (held inside another container, not by a name) that a
        live `weakref.finalize` is registered on (issue 42, h6): found through the registry (its infos' `weakref`
        slots, exact `weakref.ref`s called: C), kept where the pickler pickled them (its memo, read only when such a
        set exists: a copy of it costs ~170 bytes an entry). A plain weak reference with a callback on a nested set
        is not found (no registry of those: docs/sandbox.md)."""
        fin_cls = _mdict(_module("weakref")).get("finalize")
        if fin_cls is None or _FZ_CALLBACK is None:
            return
        reg = _fz_registry(fin_cls)
        info_cls = _cls_dict(fin_cls).get("_Info")
        slot = _cls_dict(info_cls).get("weakref") if type(info_cls) is type else None
        if reg is _FZ_MISSED or type(slot) is not _MemberDescriptorType:
            return
        sets: list = []
        for info in list(dict.values(reg)):
            if type(info) is not info_cls:
                continue
            try:
                wr = slot.__get__(info, info_cls)
            except AttributeError:
                continue
            target = wr() if type(wr) is _FZ_REF else None
            if type(target) is set or type(target) is frozenset:
                sets.append(target)
        if not sets:
            return
        memo = pickler.memo.copy()  # {id: (index, object)}: what the namespace's pickle holds
        self.found.extend(o for o in sets if id(o) in memo)

    def _top_sets(self, top: dict) -> None:
        """The exact sets and frozensets the export copies by name that are weakly referenced (review r1 L3: the
        pickler pickles builtin containers without calling `see`; one nested in another container is not seen)."""
        for v in dict.values(top):
            if (type(v) is set or type(v) is frozenset) and _FZ_WEAKCOUNT(v):
                self.found.append(v)

    def tail(self, pickler: Any, trial: Any, top: dict) -> tuple | None:
        """The tail pickled after the namespace with the same pickler (each object a reference to the namespace's
        copy: identity through its memo), or None when nothing the pickler met has anything that runs when it is
        freed. `trial(value)`: the value pickles on its own (a dry run). `top`: the export's name table (its
        references are the export's, not the kernel's). (FINALIZERS_TAG, records): per object, (the object, the
        kernel's references to it, its entries — ("finalize", (func, args, kwargs, atexit)), ("callback", callback)
        —, whether something of it was missed)."""
        self._top_sets(top)
        self._registered_sets(pickler)
        found = list(dict(zip(map(id, self.found), self.found, strict=True)).values())  # (each once)
        self.found = []
        if not found or _FZ_CALLBACK is None:
            return None
        # the kernel's references to each, before anything below holds one more
        counts = list(map(_FZ_REFCOUNT, found))
        held = dict.fromkeys(map(id, found), _FZ_HELD)
        for v in dict.values(top):
            if id(v) in held:
                held[id(v)] += 1
        self._proof_held(held)
        counts = [c - held[id(o)] for c, o in zip(counts, found, strict=True)]
        fin_cls = _mdict(_module("weakref")).get("finalize")
        reg: Any = None  # (the registry by identity, read once, when a finalizer is met)
        records: list = []
        for o, count in zip(found, counts, strict=True):
            entries: list = []
            missed = found_one = self.kinds.get(id(type(o))) == 3  # (a class dict not proven: unread)
            for r in _FZ_GETWEAKREFS(o):
                if not any(k is _FZ_REF for k in _mro(type(r))):
                    missed = found_one = True  # a weak proxy: its callback cannot be read
                    continue
                cb = _FZ_CALLBACK.__get__(r, _FZ_REF)
                if cb is None or _fz_harmless(cb):
                    continue
                found_one = True
                if fin_cls is not None and type(cb) is fin_cls:
                    if reg is None:
                        reg = _fz_registry(fin_cls)
                    if reg is _FZ_MISSED:
                        missed = True
                        continue
                    info = _fz_info(cb, fin_cls, reg)
                    if info is None:
                        continue  # (no longer registered: calling it does nothing)
                    if trial(info[:3]):
                        entries.append(("finalize", info))
                    else:
                        missed = True
                elif trial(cb):
                    entries.append(("callback", cb))
                else:
                    missed = True
            if found_one or self.kinds.get(id(type(o))) == 2:
                records.append((o, count, entries, missed))
        found.clear()
        return (FINALIZERS_TAG, records) if records else None


def _fz_called(o: Any) -> bool:
    """A weak reference to `o` has a callback that is not a weak container's own (or is a proxy: unread)."""
    for r in _FZ_GETWEAKREFS(o):
        if not any(k is _FZ_REF for k in _mro(type(r))):
            return True
        cb = _FZ_CALLBACK.__get__(r, _FZ_REF)
        if cb is not None and not _fz_harmless(cb):
            return True
    return False


def rebound(ns: dict, rebinds: list, objs: dict, skip: list, proof: Any) -> dict:
    """{name: value} of the names the cell binds without reading them (`rebinds`, found in the daemon) whose value
    has something that runs when it is freed (as `FinalizerWatch` keeps), proven and reproducible: copied too, so
    the cell's rebinding frees the copy and runs the finalizer as the kernel's would. Others (and ones that cannot be
    copied) are left out, as before."""
    out: dict = {}
    if _FZ_CALLBACK is None:
        return out
    skipped = set(skip)
    for name in rebinds:
        if name in objs or name in skipped or name.startswith("_") or name not in ns:
            continue
        v = dict.get(ns, name)
        kind = _fz_kind(type(v))
        if not (kind == 2 or kind == 3 or (kind == 1 and _FZ_WEAKCOUNT(v) and _fz_called(v))
                or (kind == 4 and _fz_main_class(v) and _fz_called(v))):  # (a class a cell defined: h6)
            continue  # (a value only weakly referenced, without a callback — a DataFrame a Series caches — is not)
        try:
            proof.check(v)
        except _Refused:
            continue
        if _unreproducible(v):
            continue
        out[name] = v
    return out


def runs_python_when_freed(v: Any) -> bool:
    """Freeing `v` runs Python code (the export leaves out a value the cell rebinds that cannot be copied: then the
    cell's rebinding runs that code in the kernel and not in the copy, whose verdict is only likely): a `__del__`
    that is not a C type's own slot (the notebook's class, a library's Python one), a weak reference's callback
    that is not a weak container's own, or a class dict not proven (kind 3). A C type's finalizer alone (Python
    3.13's `sqlite3.Connection.__del__`, a slot wrapper) releases what the value held in the kernel's process,
    which the copy never held. Read as `FinalizerWatch` reads: C descriptors, class dicts proven to hold exact
    `str` keys."""
    if _FZ_CALLBACK is None:
        return True
    t = type(v)
    kind = _fz_kind(t)
    if kind == 3:
        return True
    if kind == 2:
        for k in _mro(t):
            if k is object:
                continue
            kd = _cls_dict(k)
            if "__del__" in kd:
                if type(kd.get("__del__")) is not _WrapperDescriptorType:  # (a mappingproxy: its own C `get`)
                    return True
                break
    if kind == 4:
        return _fz_main_class(v) and _fz_called(v)
    try:
        return bool(_FZ_WEAKCOUNT(v)) and _fz_called(v)
    except TypeError:
        return False

