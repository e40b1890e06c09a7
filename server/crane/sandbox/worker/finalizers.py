"""Transplant worker: what runs in the kernel when a copied object is freed, run in the worker too (issues 41/42, h2).

The export pickles, after the namespace and with the same pickler (kernel/finalizers.py), a tail: for each copied
object weakly referenced or of a class with `__del__`, a reference to it (the namespace's copy), the kernel's reference
count of it, the `weakref.finalize` registrations and weak-reference callbacks on it that could be copied, and whether
one could not. Here:
- `load_with_finalizers(data, buffers)` unpickles the namespace and, where there is one, the tail with the same
  unpickler (`finalizers_tail`: a session's OS-path load, worker/load_vet.py, calls it with its own);
- `arm_finalizers(carried, rebind)`, once the namespace is filled and nothing of the load holds an object any more:
  each finalizer is registered again on the copy (`weakref.finalize(copy, func, *args, **kwargs)`, its `atexit` flag
  the kernel's), each other callback on a weak reference the worker keeps; an object the kernel holds more often than
  the worker does (an `Out` entry, a name not copied, a library's cache) is held once more here, so the cell frees it
  only where it would in the kernel; one the worker holds more often, or whose callback could not be copied, is
  watched;
- `finalizers_missed()`, after the cell: a watched object the cell freed (or, held more here, would have freed in
  the kernel) names what the copy did not run: the run's clean verdict is then only likely (transplant.py).
Not covered: a container of such an object that the kernel holds elsewhere (`Out` holding `[d]`, the cell's `del`
of the list's name): the worker frees the list and runs `d`'s finalizer, the kernel does not.
"""

from __future__ import annotations

import io
import pickle
import sys
import weakref
from typing import Any

_FZ_TAG = "crane-finalizers-1"  # (kernel/finalizers.FINALIZERS_TAG)
_FZW_REFCOUNT = sys.getrefcount  # (bound before any cell runs)
_FZW_HELD = 2  # references the counting holds: the list, `map`
_FZW: dict[str, Any] = {"pins": [], "keep": [], "strong": [], "excess": [], "weak": []}


class FinCarried:
    """The tail as loaded: per copied object, (the object, the kernel's references to it, its entries, whether
    something of it was missed); held only until `arm_finalizers`."""

    def __init__(self, records: list) -> None:
        self.records = records


def load_with_finalizers(data: bytes, buffers: list) -> tuple[Any, FinCarried | None]:
    """The namespace's pickle and the tail after it (None where there is none or it is not CRANE's)."""
    up = pickle.Unpickler(io.BytesIO(data), buffers=buffers)
    state = up.load()
    return state, finalizers_tail(up)


def finalizers_tail(up: Any) -> FinCarried | None:
    """The tail that follows the namespace in the stream `up` (an unpickler that has just loaded the namespace: its
    objects are the namespace's), loaded by it; None where the stream ends or it is not CRANE's."""
    try:
        tail = up.load()
    except EOFError:
        return None
    if not (type(tail) is tuple and len(tail) == 2 and tail[0] == _FZ_TAG and type(tail[1]) is list):
        return None
    return FinCarried(tail[1])


def arm_finalizers(carried: FinCarried | None, rebind: Any) -> None:
    """Register the kernel's finalizers and callbacks on the copies, hold what the kernel holds more, watch the rest
    (see the module docstring). `rebind(f)`: a notebook function bound to the namespace, as the namespace's are.
    Called once nothing of the load holds a copied object (the unpickler gone, the loaded table emptied)."""
    if carried is None:
        return
    objs: list = []
    counts: list = []
    missed: list = []
    for obj, count, entries, lost in carried.records:
        for kind, payload in entries:
            if kind == "finalize":
                func, args, kwargs, at_exit = payload
                weakref.finalize(obj, rebind(func), *args, **kwargs).atexit = bool(at_exit)
            else:
                _FZW["keep"].append(weakref.ref(obj, rebind(payload)))
        objs.append(obj)
        counts.append(count)
        missed.append(lost)
    carried.records = []
    obj = entries = payload = func = args = kwargs = None
    here = [c - _FZW_HELD for c in map(_FZW_REFCOUNT, objs)]
    for i, o in enumerate(objs):
        if counts[i] > here[i]:  # the kernel holds it more: never freed by the cell here either
            _FZW["pins"].append(o)
        elif here[i] > counts[i]:  # the worker holds it more: the kernel frees it before the worker does
            _FZW["strong"].append(o)
            _FZW["excess"].append(here[i] - counts[i])
        elif missed[i]:
            _FZW["weak"].append(weakref.ref(o))
    o = None
    objs.clear()


def finalizers_missed() -> str | None:
    """After the cell: what the copy did not run that the kernel would have (None: nothing)."""
    strong = _FZW["strong"]
    now = [c - _FZW_HELD for c in map(_FZW_REFCOUNT, strong)]
    if any(n - e <= 0 for n, e in zip(now, _FZW["excess"], strict=True)) or any(w() is None for w in _FZW["weak"]):
        return ("the cell freed a copied object whose finalizer or weak-reference callback in the kernel the copy "
                "could not run as the kernel does")
    return None
