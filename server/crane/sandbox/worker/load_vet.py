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

What is the session's is not read from strings a command controls (review M2: a function whose
`__code__.replace(co_filename=json.__file__)` passed as pandas', a str subclass as its filename ran the command's
`startswith` during the vet). Before the session's first command runs, `snapshot_library` records what exists: every
code object (functions' and those nested in them), the module globals functions hold, every heap class's dict but
`__main__`'s and every module's dict but the namespace's. Then a function is library or CRANE code only where its
filename is an exact str under the installation (or CRANE's or frozen), its code object is one recorded and its
globals are recorded ones: a forged filename on new code, or a recorded code object given the command's globals, is
the session's. A library class's or module's entry that is not what it was at the start (a function, a wrapper or
property over one, an object of a heap class) is the session's whatever its code: `pd.DataFrame.__setstate__ =
shutil.rmtree` too; so is a module attribute `find_class` returns, or a dotted name's first owner, that was replaced.
A dict key that is not an exact str (its `__eq__` would run in a lookup) is the session's. No attribute of a value
is read through Python code during the vet (dict reads, member descriptors, type flags; never `isinstance`, which
reads `__class__`). Code that exists only since the first command (a library the load imports for the first time)
counts as the session's: the rest of that load runs under the audit hook, as a command's import does.

Code a library function reaches through state a command changed is the session's too (fixC's open point, h7): the
snapshot also records each function's defaults, keyword defaults (a copy) and closure cells' contents, and a copy
of every recorded globals dict; a library function is the session's where one of those, or a global or builtin its
code (or code nested in it) names, is not what it was at the start and is a class or holds code (`json.JSONEncoder
= Own`, `json.dumps.__kwdefaults__['default'] = own`, a singledispatch function's `dispatch` cell refilled), and the
same, two library functions deep, for the unchanged library functions it names (`shutil.copy` -> `copyfile` ->
a rebound `copyfileobj`). A function made after the start has its defaults and cells vetted as any value.

Not covered: a library class's method a command replaced that a library function reaches through an unchanged
global naming the class (only a class the pickle names is vetted), state reached deeper than two library
functions, through an attribute of an object, or through C code (a Cython function's globals); a builtin or C
function set in a class's place runs bypassed; the OS layer (Landlock, seccomp) holds those, as it holds a
command's frame walk to CRANE's locals (`ctx`, `audit`), which only the portable session's guard refuses.
"""

from __future__ import annotations

import gc
import io
import pickle
import sys
import types
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.worker.finalizers import finalizers_tail  # kernel: strip

_LV_HEAP = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a static (C) type's dict cannot be changed, so holds no session code
_LV_TYPE = 1 << 31  # Py_TPFLAGS_TYPE_SUBCLASS: a class (read off its type's flags: `isinstance` reads `__class__`)
_LV_DICT = type.__dict__["__dict__"].__get__
_LV_MRO = type.__dict__["__mro__"].__get__
_LV_FLAGS = type.__dict__["__flags__"].__get__
_LV_MDICT = vars(types.ModuleType)["__dict__"].__get__
_LV_CODE = attrgetter("__code__")  # (a function's, read at the start: no command has run)
_LV_GLOBALS = attrgetter("__globals__")
_LV_SUBS = type.__subclasses__
_LV_DEFAULTS = types.FunctionType.__dict__["__defaults__"].__get__
_LV_KWDEFAULTS = types.FunctionType.__dict__["__kwdefaults__"].__get__
_LV_CLOSURE = types.FunctionType.__dict__["__closure__"].__get__
_LV_FCODE = types.FunctionType.__dict__["__code__"].__get__
_LV_FGLOBALS = types.FunctionType.__dict__["__globals__"].__get__
_LV_CELL = types.CellType.__dict__["cell_contents"].__get__
_LV_REACH_DEPTH = 2  # how many library functions deep the vet follows the names a function's code reads
_LV_WRAPS = (staticmethod, classmethod, types.MethodType)
_LV_NONE = object()
# what existed before the session's first command (`snapshot_library`); empty until then
_LV_START: dict[str, dict] = {}


def snapshot_library(namespace: dict) -> None:
    """Record the code, globals, heap classes' dicts and modules' dicts that exist now (before the session's first
    command runs; the audit hook bypassed by the caller: `gc.get_objects`). `namespace`'s module and `__main__`'s
    classes are left out (the notebook's copies: nothing here holds them more)."""
    if _LV_START:
        return
    objs = gc.get_objects()
    fns = [o for o in objs if type(o) is types.FunctionType]
    codes: dict[int, types.CodeType] = {id(c): c for c in map(_LV_CODE, fns)}
    globs: dict[int, dict] = {id(g): g for g in map(_LV_GLOBALS, fns)}
    globs.pop(id(namespace), None)
    # what each function reaches besides its code: its defaults, keyword defaults and closure cells' contents
    state = {id(f): (f, _LV_DEFAULTS(f), _lv_kw(f), _lv_cells(f)) for f in fns}
    objs = fns = []
    classes: dict[int, tuple[type, dict]] = {}
    seen = {id(object)}
    stack: list = [object]
    while stack:  # (every class, by `type.__subclasses__`: no metaclass's own)
        for k in _LV_SUBS(stack.pop()):
            if id(k) not in seen:
                seen.add(id(k))
                stack.append(k)
                d = _LV_DICT(k)
                if _LV_FLAGS(k) & _LV_HEAP and not (type(d.get("__module__")) is str and d["__module__"] == "__main__"):
                    classes[id(k)] = (k, dict(d))
    stack = list(codes.values())
    while stack:
        for c in stack.pop().co_consts:
            if type(c) is types.CodeType and id(c) not in codes:
                codes[id(c)] = c
                stack.append(c)
    modules = {id(m): (m, dict(_LV_MDICT(m))) for m in list(sys.modules.values())
               if type(m) is types.ModuleType and _LV_MDICT(m) is not namespace
               and _LV_MDICT(m).get("__name__") != "__main__"}
    # every recorded globals dict's entries (a module's: the copy above)
    copies = {id(_LV_MDICT(m)): (_LV_MDICT(m), d) for m, d in modules.values()}
    copies.update((i, (g, dict(g))) for i, g in globs.items() if i not in copies)
    _LV_START.update(codes=codes, globals=globs, classes=classes, modules=modules, functions=state, copies=copies)


def _lv_kw(fn: types.FunctionType) -> dict | None:
    kw = _LV_KWDEFAULTS(fn)
    return dict(kw) if type(kw) is dict else None


def _lv_cells(fn: types.FunctionType) -> tuple | None:
    """The contents of `fn`'s closure cells (`_LV_NONE` for an empty one)."""
    cells = _LV_CLOSURE(fn)
    if cells is None:
        return None
    out = []
    for c in cells:
        try:
            out.append(_LV_CELL(c))
        except ValueError:
            out.append(_LV_NONE)
    return tuple(out)


def _lv_start(kind: str, obj: Any) -> dict | None:
    """`obj`'s dict as it was at the start (None: not recorded, or no snapshot yet)."""
    got = _LV_START.get(kind, {}).get(id(obj))
    return got[1] if got is not None and got[0] is obj else None


def _lv_sessions_code(fn: types.FunctionType) -> bool:
    """Code that is neither a library's (the interpreter's installation) nor CRANE's own (`<crane-kernel/...>`),
    or (after the snapshot) was not there before the session's first command, or runs in globals that were not."""
    code = fn.__code__
    name = code.co_filename
    if type(name) is not str:
        return True  # (a str subclass: its methods are the command's)
    if not (name.startswith("<crane-kernel/") or name.startswith("<frozen ") or is_library(name)):
        return True
    if not _LV_START:
        return False
    g = fn.__globals__
    return _LV_START["codes"].get(id(code)) is not code or _LV_START["globals"].get(id(g)) is not g


def _lv_value(value: Any, cache: dict, depth: int = 0, fresh: bool = False) -> bool:
    """Does calling or getting `value` (a class attribute, a module's `__getattr__`, what `find_class` returns) run
    code of the session's? `fresh`: the value is not what its library class or module held at the start, so any
    code in it is the session's."""
    t = type(value)
    if t is types.FunctionType:
        return fresh or _lv_sessions_code(value) or _lv_reaches(value, cache)
    if t in _LV_WRAPS:
        return depth < 4 and _lv_value(value.__func__, cache, depth + 1, fresh)
    if t is property:
        return depth < 4 and any(f is not None and _lv_value(f, cache, depth + 1, fresh)
                                 for f in (value.fget, value.fset, value.fdel))
    if t is type or not _LV_FLAGS(t) & _LV_HEAP:
        return False  # (a static type's instance: a builtin, a C descriptor, a number, a str)
    if fresh and _LV_FLAGS(t) & _LV_TYPE:
        return True  # (a class put in a library class's or module's place)
    return fresh or (depth < 1 and _lv_class(t, cache, shallow=True))  # an object of a heap class: its `__get__`


def _lv_names(code: types.CodeType, cache: dict) -> frozenset:
    """The global (and builtin) names `code` and the code nested in it read."""
    key = ("names", id(code))
    got = cache.get(key)
    if got is None:
        names: set = set()
        stack = [code]
        while stack:
            c = stack.pop()
            names.update(n for n in c.co_names if type(n) is str)
            stack.extend(k for k in c.co_consts if type(k) is types.CodeType)
        got = cache[key] = frozenset(names)
    return got


def _lv_changed(now: Any, then: Any, cache: dict) -> bool:
    """A value in a library function's reach that is not what was there at the start (`then`), holding code or a
    class (the session's, whatever its code)."""
    return now is not then and now is not _LV_NONE and (
        bool(_LV_FLAGS(type(now)) & _LV_TYPE) or _lv_value(now, cache, 0, True))


def _lv_reaches(fn: types.FunctionType, cache: dict) -> bool:
    """Code of the session's that library code `fn` reaches through state changed since the start: a default, a
    keyword default or a closure cell's contents (of a function recorded at the start: what differs from then; of
    a later one: vetted as any value), a global or builtin its code names that was rebound, and, a few library
    functions deep, the same for the unchanged library functions it names."""
    key = ("reach", id(fn))
    hit = cache.get(key)
    if hit is not None:
        return hit
    depth = cache.get("reach-depth", 0)
    if depth > 8:
        return False
    cache[key] = False  # (a function reached again while it is vetted)
    cache["reach-depth"] = depth + 1
    try:
        hit = _lv_reach(fn, cache, depth)
    finally:
        cache["reach-depth"] = depth
    cache[key] = hit
    return hit


def _lv_reach(fn: types.FunctionType, cache: dict, depth: int) -> bool:
    got = _LV_START.get("functions", {}).get(id(fn))
    start = got if got is not None and got[0] is fn else None
    defaults, kw, cells = _LV_DEFAULTS(fn), _LV_KWDEFAULTS(fn), _lv_cells(fn)
    if kw is not None and (type(kw) is not dict or _lv_keys(kw)):
        return True
    pairs: list = []
    if start is None:  # (made after the start: its state vetted as any value)
        pairs += [(v, _LV_NONE) for v in (defaults or ())]
        pairs += [(v, _LV_NONE) for v in (kw or {}).values()]
        pairs += [(v, _LV_NONE) for v in (cells or ())]
        if any(v is not _LV_NONE and _lv_value(v, cache) for v, _ in pairs):
            return True
    else:
        then_d, then_kw, then_c = start[1] or (), start[2] or {}, start[3] or ()
        pairs += [(v, then_d[i] if i < len(then_d) else _LV_NONE) for i, v in enumerate(defaults or ())]
        pairs += [(v, then_kw.get(k, _LV_NONE)) for k, v in (kw or {}).items()]
        pairs += [(v, then_c[i] if i < len(then_c) else _LV_NONE) for i, v in enumerate(cells or ())]
        if any(_lv_changed(now, then, cache) for now, then in pairs):
            return True
    g = _LV_FGLOBALS(fn)
    got = _LV_START.get("copies", {}).get(id(g))
    if got is None or got[0] is not g:
        return False  # (globals not recorded: `_lv_sessions_code` answers for them)
    if _lv_odd_keys(g, cache):
        return True
    then_g = got[1]
    b = g.get("__builtins__")
    bd = _LV_MDICT(b) if type(b) is types.ModuleType else b if type(b) is dict else None
    got = _LV_START["copies"].get(id(bd)) if bd is not None else None
    then_b = got[1] if got is not None and got[0] is bd and not _lv_odd_keys(bd, cache) else None
    for name in _lv_names(_LV_FCODE(fn), cache):
        if name in g:
            now, then = g[name], then_g.get(name, _LV_NONE)
        elif then_b is not None and bd is not None and name in bd:
            now, then = bd[name], then_b.get(name, _LV_NONE)
        else:
            continue
        if _lv_changed(now, then, cache):
            return True
        if now is then and type(now) is types.FunctionType and depth < _LV_REACH_DEPTH and _lv_reaches(now, cache):
            return True
    return False


def _lv_odd_keys(d: dict, cache: dict) -> bool:
    """`_lv_keys` of a namespace, once per vet."""
    key = ("keys", id(d))
    got = cache.get(key)
    if got is None:
        got = cache[key] = _lv_keys(d)
    return got


def _lv_keys(d: Any) -> bool:
    """A key that is not an exact str: a lookup in `d` would run its `__eq__`."""
    return any(type(k) is not str for k in d)


def _lv_class(cls: type, cache: dict, shallow: bool = False) -> bool:
    """Code of the session's in `cls`'s MRO (read by C-level dict reads, each library class's compared with the
    start) or, unless `shallow`, its metaclass's."""
    key = (id(cls), shallow)
    hit = cache.get(key)
    if hit is None:
        cache[key] = False  # (a class reached again while it is vetted)
        hit = False
        for k in _LV_MRO(cls):
            if not _LV_FLAGS(k) & _LV_HEAP:
                continue
            d = _LV_DICT(k)
            if _lv_keys(d):
                hit = True
                break
            start = _lv_start("classes", k)
            if any(_lv_value(v, cache, 1 if shallow else 0,
                             start is not None and start.get(n, _LV_NONE) is not v) for n, v in list(d.items())):
                hit = True
                break
        if not hit and not shallow and type(cls) is not type:
            hit = _lv_class(type(cls), cache)
        cache[key] = hit
    return hit


def _lv_module(mod: Any, cache: dict) -> bool:
    """A module that is not one, a key that is not a str, or a `__getattr__` of the session's (or not the start's)."""
    if type(mod) is not types.ModuleType:
        return True
    d = _LV_MDICT(mod)
    if _lv_keys(d):
        return True
    ga = d.get("__getattr__")
    start = _lv_start("modules", mod)
    return _lv_value(ga, cache, 0, start is not None and start.get("__getattr__") is not ga)


def _lv_replaced(mod: Any, name: str, value: Any, cache: dict) -> bool:
    """`mod.name` (`value`) replaced since the start by a class or by code."""
    start = _lv_start("modules", mod)
    if start is None or start.get(name, _LV_NONE) is value:
        return False
    return bool(_LV_FLAGS(type(value)) & _LV_TYPE) or _lv_value(value, cache, 0, True)


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
        if mod is not None and _lv_module(mod, self.lv_cache):
            self._found(label)
        elif mod is not None and "." in name and self._lv_owner(mod, name):
            self._found(label)
        obj = super().find_class(module, name)
        if self.lv_found:
            return obj
        mod = sys.modules.get(module)  # (the module as imported by now)
        if (type(mod) is types.ModuleType and "." not in name and _lv_replaced(mod, name, obj, self.lv_cache)) or (
                _lv_class(obj, self.lv_cache) if _LV_FLAGS(type(obj)) & _LV_TYPE else _lv_value(obj, self.lv_cache)):
            self._found(label)
        return obj

    def _lv_owner(self, mod: types.ModuleType, name: str) -> bool:
        """A dotted name (`DataFrame.from_dict`): each owner on the way, found by dict reads, holds no code of the
        session's (its metaclass's `__getattribute__`, the attribute's `__get__`); True where one does, or where
        the way cannot be read without running code."""
        parts = name.split(".")
        obj: Any = _LV_MDICT(mod).get(parts[0])
        if _lv_replaced(mod, parts[0], obj, self.lv_cache):
            return True
        for part in parts[1:]:
            if type(obj) is types.ModuleType:
                if _lv_module(obj, self.lv_cache):
                    return True
                obj = _LV_MDICT(obj).get(part)
                continue
            if not _LV_FLAGS(type(obj)) & _LV_TYPE:
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
