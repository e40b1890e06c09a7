"""Fork sandbox, kernel side: the user's `os.register_at_fork` handlers are not run by CRANE's fork.

`os.fork()` runs every Python-level at-fork handler: `before` and `after_in_parent` in the kernel itself,
`after_in_child` in the child before it is confined. A handler the user defined (in a cell, or in a module of
their own) is user code: CRANE must not run it in the kernel, nor outside the sandbox's confinement. So for the
duration of the fork only, the interpreter's three handler lists hold just the handlers of the standard library
and installed packages (lock acquire/release and re-initialisation hooks that keep them fork-safe; they change
nothing the user can see); right after the fork each list gets its exact previous contents back in the kernel,
and in the child once it is confined (so a process the cell itself forks runs the user's handlers, inside the
sandbox, as the real run would; the layered mode's own clone, before confinement, runs none of them).

The lists live in the interpreter state with no Python API; they are found once per kernel as the gc referrers
of handlers the standard library registers at import (`threading._after_fork`, `logging`'s module-lock
hooks), and checked cheaply before each fork. Where one cannot be found (logging not imported and a handler of
that kind registered before it), its handlers run as with a plain `os.fork()`: `describe()` says which.
Remaining limit: a thread of the kernel that forks during the few microseconds of the swap runs without the
user's handlers. Standard library only; runs in the kernel (the swap) and in the child (the restore).
"""

from __future__ import annotations

import functools
import os
import sys
import types
from typing import Any

_LISTS: dict = {"found": None}  # kind -> the interpreter's list, found once
# handlers the standard library registers, by kind (names across Python 3.10 - 3.13)
_ANCHORS = {
    "before": (("logging", "_prepareFork"), ("logging", "_acquireModuleLock"), ("logging", "_acquireLock")),
    "after_in_parent": (("logging", "_afterFork"), ("logging", "_releaseModuleLock"), ("logging", "_releaseLock")),
    "after_in_child": (("threading", "_after_fork"), ("logging", "_after_at_fork_child_reinit_locks")),
}


def _library_roots() -> tuple[str, ...]:
    import sysconfig

    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            roots.add(os.path.realpath(sysconfig.get_paths()[key]))
        except Exception:
            pass
    for p in sys.path:  # site-packages of this environment, also user and .pth-added ones
        if p and ("site-packages" in p or "dist-packages" in p):
            roots.add(os.path.realpath(p))
    return tuple(sorted(roots))


_ROOTS: dict = {"roots": None}
_FUNCTION, _METHOD, _PARTIAL = types.FunctionType, types.MethodType, functools.partial
_C_CALLABLES = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodWrapperType,
                types.MethodDescriptorType)


def is_library_file(name: Any) -> bool:
    """A code object's file name under the standard library's or an installed package's root."""
    if _ROOTS["roots"] is None:
        _ROOTS["roots"] = _library_roots()
    path = os.path.realpath(name) if type(name) is str and name.startswith("/") else ""
    return bool(path) and any(path.startswith(root + os.sep) for root in _ROOTS["roots"])


def is_library_handler(fn: Any) -> bool:
    """True for a handler of the standard library or an installed package (C functions and methods included);
    False for one defined in the notebook or in the user's own files (and for anything we cannot place).
    Reads only exact types and their slots: no attribute of the handler that user code could define runs."""
    for _ in range(8):
        kind = type(fn)
        if kind is _FUNCTION:
            return is_library_file(fn.__code__.co_filename)
        if kind is _METHOD:
            fn = fn.__func__
            continue
        if kind in _C_CALLABLES:
            return True  # C code of CPython or of an extension module
        if kind is _PARTIAL:
            fn = fn.func
            continue
        return False  # callable objects and the rest: not placed, so not run
    return False


def _find_lists() -> dict:
    import gc

    found: dict = {}
    for kind, anchors in _ANCHORS.items():
        for mod_name, attr in anchors:
            mod = sys.modules.get(mod_name)
            fn = mod.__dict__.get(attr) if mod is not None else None
            if fn is None:
                continue
            refs = gc.get_referrers(fn)
            for ref in refs:
                # the interpreter's list is referenced by no Python object (a user's list would be) but the lists
                # found by an earlier install of this module (its `_LISTS["found"]`: a dict keyed by the kinds), which
                # the seal keeps alive after CRANE installs the module afresh (kernel/private_module)
                if type(ref) is list and ref is not refs and any(x is fn for x in ref) and not [
                        h for h in gc.get_referrers(ref) if h is not refs and type(h) is not types.FrameType
                        and not (type(h) is dict and h and all(type(k) is str and k in _ANCHORS for k in h))]:
                    found[kind] = ref
                    break
            del refs
            if kind in found:
                break
    return found


def _lists() -> dict:
    """The lists, looked up again only when the kernel imported something since or one lost its anchor."""
    key = len(sys.modules)
    cached = _LISTS["found"]
    if cached is not None and _LISTS.get("key") == key and all(lst for lst in cached.values()):
        return cached
    # no reference of ours may stay while looking: it would make the lists look like a user's
    _LISTS["found"] = cached = None
    found = _find_lists()
    _LISTS["found"], _LISTS["key"] = found, key
    return found


def suspend_user_handlers() -> list:
    """In the kernel, right before `os.fork()`: keep only the library handlers in each list. Returns what
    `restore` needs (call it in the parent and in the child right after the fork, whatever happened)."""
    saved = []
    for lst in _lists().values():
        before = lst[:]
        keep = [h for h in before if is_library_handler(h)]
        if len(keep) != len(before):
            lst[:] = keep
            saved.append((lst, before))
    return saved


def restore(saved: list) -> None:
    for lst, before in saved:
        lst[:] = before


_CHILD: dict = {"saved": []}


def keep_suspended(saved: list) -> None:
    """In the child, right after the fork: the user's handlers stay out while it sets itself up (the layered
    mode's clone runs the handlers too, before any confinement), until `resume_in_sandbox`."""
    _CHILD["saved"] = saved


def resume_in_sandbox() -> None:
    """In the process that runs the cell, once confined: the lists as the user had them, so a process the cell
    forks runs the user's handlers, inside the sandbox, as in the real run."""
    saved, _CHILD["saved"] = _CHILD["saved"], []
    restore(saved)


def describe() -> dict:
    """Which handler lists were found (for the tests and the docs' 'what remains')."""
    found = _lists()
    return {kind: kind in found for kind in _ANCHORS}


def random_state() -> tuple | None:
    """The global `random` generator as the kernel has it, read right before CRANE's fork (`put_random_state` in the
    child right after): `random` registers an after-fork handler that seeds a child's generator afresh, a standard
    library handler the fork keeps, so after `random.seed(42)` the child's `random.random()` and `shuffle` differed
    from the kernel's in every run (red team round 17, F1: a certain false crash of a cell relying on a seeded
    sequence). The handler still runs (a process the cell forks is reseeded as in the real run); the child then
    takes the kernel's state back. Read and written by `_random.Random`'s own C `getstate`/`setstate` on
    `random._inst` (exactly `random.Random`) and its `gauss_next` through that class's own `__dict__` descriptor:
    nothing of the notebook's runs (None where any of it is not so)."""
    mod, base = sys.modules.get("random"), sys.modules.get("_random")
    md = mod.__dict__ if type(mod) is types.ModuleType else None
    bd = base.__dict__ if type(base) is types.ModuleType else None
    if type(md) is not dict or type(bd) is not dict:
        return None
    inst, cls, ctype = dict.get(md, "_inst"), dict.get(md, "Random"), dict.get(bd, "Random")
    if type(cls) is not type or type(ctype) is not type or type(inst) is not cls:
        return None
    cdict = type.__dict__["__dict__"].__get__(ctype)
    get, put = cdict.get("getstate"), cdict.get("setstate")
    idict = type.__dict__["__dict__"].__get__(cls).get("__dict__")
    if type(get) is not types.MethodDescriptorType or type(put) is not types.MethodDescriptorType \
            or type(idict) is not types.GetSetDescriptorType:
        return None
    d = idict.__get__(inst)
    return inst, put, get(inst), idict, dict.get(d, "gauss_next") if type(d) is dict else None


def put_random_state(saved: tuple | None) -> None:
    """In the child right after CRANE's fork: the kernel's `random` state back (see `random_state`)."""
    if saved is None:
        return
    inst, put, state, idict, gauss = saved
    try:
        put(inst, state)
        d = idict.__get__(inst)
        if type(d) is dict:
            dict.__setitem__(d, "gauss_next", gauss)
    except Exception:  # noqa: BLE001 - the child's generator stays as the fork left it
        pass
