"""Transplant worker: what runs in the kernel when a copied object is freed, run in the worker too (issues 41/42, h2).

The export pickles, after the namespace and with the same pickler (kernel/finalizers.py), a tail: the kernel's
reference count of every copied object, the `weakref.finalize` registrations and weak-reference callbacks on copied
objects that could be copied, and which objects have something that runs when they are freed. Here:
- `load_with_finalizers(data, buffers)` unpickles the namespace and, where there is one, the tail with the same unpickler
  (its memo: each copied object by its index in the pickle, the one the kernel's pickler gave it);
- `arm_finalizers(carried, rebind)`, once the namespace is filled and nothing of the load holds an object any more: each
  finalizer is registered again on the copy of its object (`weakref.finalize(copy, func, *args, **kwargs)`, its
  `atexit` flag the kernel's), each other callback on a weak reference the worker keeps; then every copied object the
  kernel holds more often than the worker does is held once more here (an `Out` entry, a name not copied, a
  library's cache), so the cell frees an object only where it would free it in the kernel; an object the worker holds
  more often than the kernel, or whose callback could not be copied, is watched;
- `finalizers_missed()`, after the cell: a watched object the cell freed (or, held more here, would have freed in the kernel)
  names what the copy did not run: the run's clean verdict is then only likely (transplant.py).
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
    """The tail as loaded: the kernel's counts, the entries to register, the watched indices, and the copied objects
    by memo index (held only until `arm_finalizers`)."""

    def __init__(self, counts: list, entries: list, watched: list, objs: list) -> None:
        self.counts, self.entries, self.watched, self.objs = counts, entries, watched, objs


def load_with_finalizers(data: bytes, buffers: list) -> tuple[Any, FinCarried | None]:
    """The namespace's pickle and the tail after it (None where there is none or it is not CRANE's)."""
    up = pickle.Unpickler(io.BytesIO(data), buffers=buffers)
    state = up.load()
    return state, finalizers_tail(up)


def finalizers_tail(up: Any) -> FinCarried | None:
    """The tail that follows the namespace in the stream `up` (an unpickler that has just loaded the namespace),
    loaded by it, with the copied objects by memo index; None where the stream ends or it is not CRANE's."""
    try:
        tail = up.load()
    except EOFError:
        return None
    if not (type(tail) is tuple and len(tail) == 4 and tail[0] == _FZ_TAG):
        return None
    _, counts, entries, watched = tail
    memo = up.memo.copy()  # {index: object}
    del tail
    objs = [memo.get(i) for i in range(len(counts))]
    memo.clear()
    return FinCarried(counts, entries, watched, objs)


def arm_finalizers(carried: FinCarried | None, rebind: Any) -> None:
    """Register the kernel's finalizers and callbacks on the copies, hold what the kernel holds more, watch the rest
    (see the module docstring). `rebind(f)`: a notebook function bound to the namespace, as the namespace's are."""
    if carried is None:
        return
    objs = carried.objs
    for i, kind, payload in carried.entries:
        if kind == "finalize":
            func, args, kwargs, at_exit = payload
            weakref.finalize(objs[i], rebind(func), *args, **kwargs).atexit = bool(at_exit)
        else:
            _FZW["keep"].append(weakref.ref(objs[i], rebind(payload)))
    carried.entries = []
    func = args = kwargs = payload = None
    counts = carried.counts
    here = [c - _FZW_HELD for c in map(_FZW_REFCOUNT, objs)]
    _FZW["pins"].extend(objs[i] for i in range(len(objs)) if counts[i] > here[i])  # the kernel holds it more
    for i, missed in carried.watched:
        if here[i] > counts[i]:  # the worker holds it more: the kernel frees it before the worker does
            _FZW["strong"].append(objs[i])
            _FZW["excess"].append(here[i] - counts[i])
        elif missed and here[i] == counts[i]:
            _FZW["weak"].append(weakref.ref(objs[i]))
    carried.objs = []
    objs.clear()


def finalizers_missed() -> str | None:
    """After the cell: what the copy did not run that the kernel would have (None: nothing)."""
    strong = _FZW["strong"]
    now = [c - _FZW_HELD for c in map(_FZW_REFCOUNT, strong)]
    if any(n - e <= 0 for n, e in zip(now, _FZW["excess"], strict=True)) or any(w() is None for w in _FZW["weak"]):
        return ("the cell freed a copied object whose finalizer or weak-reference callback in the kernel the copy "
                "could not run as the kernel does")
    return None
