"""Transplant export, kernel side: the stops (what ends an export, what it may cost) and the shrinking.

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py is the entry).
- `_Control`: it stops (and the run is refused) as soon as a request waits for the kernel's main thread (the
  user's cell comes first: kernel/waiting.py watches the kernel's shell queue without reading it), past its
  kernel-time budget, when the daemon writes `cancel` into the directory, past the copy cap (out-of-band and
  in-band bytes both count), and when the memory the kernel may still use (kernel/shield.memory_headroom,
  cgroup-aware) falls under `_FLOOR`.
- Sizing (`_raw_bytes`): counted by what a pickle will materialise (`nbytes` of views and broadcasts through
  ndarray's C descriptors, containers by a sample), calling nothing; a non-contiguous array is stopped before
  numpy's reducer copies it in band (`_materialised`).
- Refusals (`_TooLarge`, `_unreproducible`): values too large for the memory the kernel has left or the cap, and
  library state a copy would not reproduce.
- Shrinking (`_plan`, `_shrink`): large values are shrunk BEFORE they are copied (kernel/miniature's rules:
  consistent row subsets, on a copy of the cell's names, never the user's namespace), in a miniature run and when
  the values hold more than the request's `copy_mb`; only under `_shrink_gate` (proven objects of pristine library
  classes, libraries untouched by the notebook), bound by the same stops (`_Control.check` between objects,
  columns and chunks of rows). Its time: where the watch works, `_WATCHED_SHRINK_S` of its own (nothing of the
  user's waits behind it), then the copy its `max_s`; elsewhere one `max_s` budget for both.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _HEAPTYPE,
    _MODULES,
    _T_FLAGS,
    _T_MODULE,
    _cls_dict,
    _exists,
    _GetSetDescriptorType,
    _islice,
    _join,
    _mdict,
    _MemberDescriptorType,
    _module,
    _monotonic,
    _mro,
    _process_time,
)
from crane.sandbox.kernel.miniature import (  # kernel: strip
    _GATE,
    _REGISTRY,
    _SHRINK_CHUNK,
    ShrinkStopped,
    _kind,
    _shrink_check,
    shrink_namespace,
)
from crane.sandbox.kernel.proof import _Proof, _Refused, _untouched  # kernel: strip
from crane.sandbox.kernel.shield import memory_headroom  # kernel: strip
from crane.sandbox.kernel.waiting import OddKeyError, own_dict, str_get  # kernel: strip

_FLOOR = 256 << 20  # the export stops when the kernel could allocate less than this
# the pickler's memo: an entry per object written (so that a second reference to it is a reference: identity kept);
# its C table costs about this much per entry at its peak (16 bytes a slot, at most 2/3 full, the old table and
# the new one both held while it grows: 3M entries, 192 MiB). It may take at most a quarter of what the kernel
# could still allocate when the copy starts, and never more than _MEMO_MAX entries
_MEMO_ENTRY = 64
_MEMO_MAX = 40_000_000
_MEMOIZE = 0x94  # pickle's MEMOIZE opcode (protocol 4+: each memo entry is one), counted in the frames written
_CHECK_EVERY = 8 << 20  # bytes written between two looks at the clock, the cancel file and the memory left
_QUEUED = "a request is waiting for the kernel (the user's cell comes first)"
_OVER_TIME = "copying its inputs took longer than the kernel may be kept busy"
# Shrinking a large frame to a miniature can take seconds of the kernel; where the watch sees a queued request at
# once (ipykernel 7), nothing of the user's waits behind it, so it gets this much (the copy after it its own max_s);
# elsewhere it shares the one max_s budget with the copy
_WATCHED_SHRINK_S = 10.0


class _Stopped(Exception):
    """The export was stopped: time, cancel, size or memory."""



class _Control:
    """What stops an export: a request waiting for the kernel, the deadline, the daemon's cancel file, the copy
    cap, the memory floor."""

    def __init__(self, d: str, max_s: float, cap: int, waiting: Any = None) -> None:
        self.cancel_path = _join(d, "cancel")
        self.max_s = max_s
        self.budget(max(max_s, _WATCHED_SHRINK_S) if waiting is not None else max_s)
        self.cap = cap
        self.written = 0
        self.next_check = 0
        self.stop: str | None = None
        self.waiting = waiting  # kernel/waiting.shell_watch's check (the main thread's only), or None
        self.memo = 0  # the pickler's memo entries so far (at most: MEMOIZE bytes counted in the frames written)
        room = memory_headroom()
        self.memo_max = _MEMO_MAX if room is None else max(0, min(_MEMO_MAX, (room >> 2) // _MEMO_ENTRY))
        self.memo_room = room

    def budget(self, seconds: float) -> None:
        """From now on, at most `seconds` of the kernel's CPU time: what the user's queued cell waits on (a loaded
        machine stretches the wall clock, not the work); the wall clock bounds it too, at a multiple, for a kernel
        starved of CPU."""
        self.cpu_deadline = _process_time() + seconds
        self.deadline = _monotonic() + max(5.0, 5 * seconds)

    def copying(self) -> None:
        """The copy itself starts: its own `max_s` where shrinking had the watched budget (else what is left of
        the one budget shrinking shared)."""
        if self.waiting is not None:
            self.budget(self.max_s)

    def watch(self) -> None:
        """On the kernel's main thread: stop when a request waits for it."""
        if not self.stop and self.waiting is not None and self.waiting():
            self.stop = _QUEUED

    def check(self) -> None:
        """On the kernel's main thread, between the steps of shrinking: the same stops as while pickling."""
        self.watch()
        self.poll()
        if self.stop:
            raise ShrinkStopped(self.stop)

    def add(self, n: int) -> None:
        self.written += n
        if self.cap and self.written > self.cap:
            self.stop = f"the values it reads pickle to more than {self.cap >> 20} MiB"
        if _process_time() > self.cpu_deadline:  # at every frame (64 KiB): what the user's cell waits on
            self.stop = _OVER_TIME
        if self.written >= self.next_check:
            self.next_check = self.written + _CHECK_EVERY
            self.poll()
        if self.stop:
            raise _Stopped(self.stop)

    def memoized(self, frame: bytes) -> None:
        """A frame the pickler wrote (its own bytes, not a large value's written apart): its MEMOIZE opcodes (a data
        byte of the same value counts too: an estimate from above) added to the memo's count; the copy stops past
        `memo_max` (kernel/pickling._Sink)."""
        self.memo += frame.count(_MEMOIZE)
        if self.memo > self.memo_max and not self.stop:
            left = f"{self.memo_room >> 20} MiB" if self.memo_room is not None else "no bound known"
            self.stop = (f"the values it reads are more than {self.memo_max:,} objects: the copy's memo of them would "
                         f"take more than a quarter of the memory the kernel has left ({left})")
            raise _Stopped(self.stop)

    def poll(self) -> None:
        if self.stop:
            return
        if _monotonic() > self.deadline or _process_time() > self.cpu_deadline:
            self.stop = _OVER_TIME
        elif _exists(self.cancel_path):
            self.stop = "cancelled"
        else:
            room = memory_headroom()
            if room is not None and room < _FLOOR:
                self.stop = (f"the kernel's memory is short ({room >> 20} MiB left before its limit): copying "
                             "could push it out of memory")



def _ndarray() -> Any:
    """numpy's `ndarray` (a static type: nothing on it can be replaced), or None."""
    nd = _mdict(_module("numpy")).get("ndarray")
    return nd if type(nd) is type and not _T_FLAGS.__get__(nd, type) & _HEAPTYPE else None


def _array_bytes(obj: Any, nd: Any) -> tuple[int, bool]:
    """(what pickling the array materialises: its `nbytes`, a view's and a broadcast's included; whether its
    data goes out of band as is: contiguous) read through ndarray's own C descriptors (a subclass's `nbytes` or
    `shape` property is never called)."""
    nd_dict = _cls_dict(nd)
    flags = nd_dict["flags"].__get__(obj, nd)
    return int(nd_dict["nbytes"].__get__(obj, nd)), bool(flags.c_contiguous or flags.f_contiguous)


def _materialised(obj: Any, nd: Any, ctl: _Control) -> None:
    """Stop before numpy's reducer copies a non-contiguous array (a view, a broadcast, a zero-stride array) in band
    inside the kernel when the copy would pass the cap or the memory the kernel has left: a broadcast of 8 bytes
    can be gigabytes once materialised."""
    nbytes, contiguous = _array_bytes(obj, nd)
    if contiguous:
        return  # its buffer goes out of band, written as it is
    if ctl.cap and ctl.written + nbytes > ctl.cap:
        ctl.stop = f"the values it reads pickle to more than {ctl.cap >> 20} MiB (a non-contiguous array)"
        raise _Stopped(ctl.stop)
    room = memory_headroom()
    if room is not None and nbytes > room - _FLOOR:
        ctl.stop = (f"the kernel's memory is short ({room >> 20} MiB left before its limit): copying a "
                    f"non-contiguous array of {nbytes >> 20} MiB could push it out of memory")
        raise _Stopped(ctl.stop)



_SAMPLE = 64  # items of a container looked at to size it (beyond, the sample is scaled to its length)


def _sample(v: Any) -> tuple[list, int]:
    """(up to `_SAMPLE` items of a plain container, spread over it, keys of a dict included; its length). Exact
    types only: nothing of the user's is called."""
    t = type(v)
    n = len(v)
    if t is dict:
        if n <= _SAMPLE:
            return list(dict.keys(v)) + list(dict.values(v)), n
        out: list = []
        for k, x in _islice(dict.items(v), 0, None, n // _SAMPLE):  # a dict has no positions: a C-level stride
            out += (k, x)
        return out[:2 * _SAMPLE], n
    if t is list or t is tuple:
        step = max(1, n // _SAMPLE)
        return [v[i] for i in range(0, n, step)][:_SAMPLE], n
    items: list = []
    for x in set.__iter__(v) if t is set else frozenset.__iter__(v):
        items.append(x)
        if len(items) >= _SAMPLE:
            break
    return items, n


def _raw_bytes(obj: Any, proof: _Proof, depth: int = 0, seen: dict | None = None, top: str = "") -> int:
    """What copying a value whole costs, counted by what a pickle will materialise: numpy arrays at their `nbytes`
    wherever they sit (a view's and a broadcast's included: numpy's reducer copies those whole; each array once),
    in-band strings/bytes, plain containers by a sample of their items (`_SAMPLE`) scaled to their length, and
    objects of library classes (a DataFrame and its blocks, a sparse matrix, a fitted model) by the arrays their
    instance dicts hold, five levels deep. Nothing is called: no pandas `memory_usage`, no `nbytes` property of a
    class claiming numpy; reads go through C descriptors and instance dicts only."""
    seen = {} if seen is None else seen
    if id(obj) in seen or len(seen) > 20_000:
        return 0
    seen[id(obj)] = obj
    t = type(obj)
    if t is str or t is bytes or t is bytearray:
        return len(obj) + 8
    if depth > 5:
        return 16
    if t is dict or t is list or t is tuple or t is set or t is frozenset:
        items, n = _sample(obj)
        if not items:
            return 8
        per = sum(_raw_bytes(x, proof, depth + 1, seen, top) for x in items) / (len(items) / (2 if t is dict else 1))
        return int(per * n) + 8
    nd = _ndarray()
    mro = _mro(t)
    if nd is not None and any(k is nd for k in mro):
        return _array_bytes(obj, nd)[0]
    tensor = _mdict(_module("torch")).get("Tensor")
    if tensor is not None and t is tensor and proof.pristine(tensor):
        try:
            return int(obj.element_size() * obj.numel())
        except Exception:
            return 0
    if not proof.library_class(t) or proof.check_type(t)[0]:
        return 16
    size = next((_cls_dict(k)["nbytes"] for k in mro if "nbytes" in _cls_dict(k)), None)
    if type(size) is _GetSetDescriptorType:  # a compiled class's own size (pyarrow's arrays): C code, no property
        try:
            n = size.__get__(obj, t)
            return n if type(n) is int else 16
        except Exception:
            return 16
    if not top:  # the library of the outermost library object: only its own compiled fields are read
        mod = _T_MODULE.__get__(t, type)
        top = mod.partition(".")[0] if type(mod) is str else "?"
    return 16 + sum(_raw_bytes(x, proof, depth + 1, seen, top) for x in _held(obj, t, mro, proof, top))


def _held(obj: Any, t: type, mro: tuple, proof: _Proof, top: str) -> list:
    """What a library object holds: its instance dict's values, and the fields the classes of the outermost
    object's own library (`top`) expose through C descriptors (slots; Cython's `cdef public` attributes: pandas'
    blocks and their values; never another library's, whose fields may be computed properties). Never the
    interpreter's own fields (`builtins`: a generator's `gi_frame`, a frame's `f_globals`, ...): they lead into the
    notebook's namespace, which a value does not hold (a generator was sized as the whole namespace, and refused as
    too large instead of as a generator)."""
    out = list(dict.values(own_dict(obj)))[:256]
    if top == "builtins":
        return out
    for k in mro:
        mod = _T_MODULE.__get__(k, type)
        if k is object or type(mod) is not str or mod.partition(".")[0] != top or not proof.library_class(k):
            continue
        for name, d in list(_cls_dict(k).items())[:64]:
            # slots (a struct field: no code), and Cython's `cdef public` fields (getsets without a docstring; a
            # documented getset is a computed property, which may warn or compute: never read)
            if (type(d) is _MemberDescriptorType or type(d) is _GetSetDescriptorType and d.__doc__ is None) \
                    and type(name) is str and not name.startswith("__"):
                try:
                    out.append(d.__get__(obj, t))
                except Exception:
                    continue
    return out



class _TooLarge(Exception):
    """The export is refused for what copying would cost the kernel: its size, or the memory left (the reason)."""


def _memory_room() -> int | None:
    """The memory the kernel may still use (None: unknown); `_TooLarge` when it is under `_FLOOR` already."""
    room = memory_headroom()
    if room is not None and room < _FLOOR:
        raise _TooLarge(f"the kernel's memory is short ({room >> 20} MiB left before its limit): copying its state "
                        "could push it out of memory")
    return room


def _copy_cap(limit: int) -> int:
    """The most bytes a copy may write (0: no cap) given the request's `copy_mb` limit in bytes."""
    return max(2 * limit, limit + (64 << 20)) if limit else 0


def _plan(objs: dict, proof: _Proof, miniature: dict | None, limit: int, room: int | None) \
        -> tuple[dict | None, str | None, int]:
    """(kernel/miniature's spec to shrink `objs` with, or None; why, when the run did not ask for a miniature; what
    the values hold before shrinking, counted only when there is a `limit`). `_TooLarge` when they cannot be
    copied whole and are not to be shrunk."""
    spec, why, raw = miniature, None, 0
    if not spec and limit:
        raw = sum(_raw_bytes(o, proof) for o in dict.values(objs))  # each name on its own, as each is pickled
        if raw > limit:
            spec = {"fraction": max(0.0005, min(0.5, limit / raw)), "floor_rows": 64, "min_rows": 2000,
                    "relative": 0.05, "seed": 0}
            why = (f"the values it reads hold {raw / 1e6:,.0f} MB, more than the {limit >> 20} MiB a transplant "
                   "copies whole")
    if room is not None and raw and raw > room - _FLOOR and not spec:
        raise _TooLarge(f"the values it reads hold {raw >> 20} MiB, more than the kernel's memory allows copying "
                        f"({room >> 20} MiB left before its limit)")
    return spec, why, raw


def _shrunk_enough(raw: int, cap: int, kept: list) -> None:
    """`_TooLarge` when the values are over the copy cap and nothing could be shrunk."""
    if cap and raw > cap and not kept:
        raise _TooLarge(f"the values it reads hold {raw >> 20} MiB, more than a transplant copies ({cap >> 20} MiB), "
                        "and cannot be shrunk to row subsets")


def _unreproducible(obj: Any) -> str | None:
    """State of a library object its own serialization does not carry, which the cell may depend on."""
    mod = _T_MODULE.__get__(type(obj), type)
    if type(mod) is str and mod.startswith(("keras.", "tf_keras.", "tensorflow.")):
        # (instance dicts read through str_get: a planted key sharing a name's hash would run its `__eq__` here)
        try:
            d = own_dict(obj)
            traced = any(str_get(d, f) is not None for f in ("train_function", "test_function", "predict_function"))
            opt = str_get(d, "_optimizer")
            opt = opt if opt is not None else str_get(d, "optimizer")
            built = True
            if opt is not None and type(opt) is not type:
                built = str_get(own_dict(opt), "built", True)
        except OddKeyError:
            return ("holds an instance dict with a key that is not a plain string: its training state cannot be "
                    "read without running the notebook's code")
        if traced and opt is not None and built is False:
            return ("has a traced training step whose optimizer was never built (a failed fit): a copy rebuilt "
                    "from its configuration and weights would not fail the way the kernel's model does")
    return None



def _in_kernel_ok(obj: Any) -> bool:
    """Shrinking runs library code in the kernel: only for values whose subsets touch no file (a Hugging Face
    dataset's `select` may write an indices cache: those are copied whole). Called under `_shrink`'s gate."""
    vals = dict.values(obj) if type(obj) is dict else obj if type(obj) is list or type(obj) is tuple else ()
    return all((_kind(v) or ("",))[0] != "HFDataset" for v in [obj, *list(vals)[:32]])


def _known(kind: str, orig: Any, check: Any = None) -> dict | None:
    """What the worker needs to tell a label the subset dropped from one the data never had (kernel/miniature's
    `artefact`): the original index (RangeIndex, or up to 1M labels; else unknown) and, for each label-like
    column, its dtype and the sorted stable hashes (pandas' `hash_array`) of its distinct values (up to 1M;
    else unknown). A hash collision can only make a crash inconclusive, never a false one. `check` is called
    between columns and chunks (kernel/miniature's `ShrinkStopped` stops it)."""
    if kind not in ("DataFrame", "Series"):
        return None
    pd = _MODULES.get("pandas")
    idx = orig.index
    index = idx if (type(idx).__name__ == "RangeIndex" or len(idx) <= 1_000_000) else None
    cols: dict = {}
    names = [None] if kind == "Series" else list(orig.columns)[:200]
    for c in names:
        _shrink_check(check)
        try:
            col = orig if c is None else orig[c]
            if getattr(col, "ndim", 1) != 1 or col.dtype.kind not in "OiubU":
                continue
            arr = col.to_numpy()
            hashes = _label_hashes(arr, pd, check) if pd is not None else None
            cols[c] = {"dtype": str(arr.dtype), "hashes": hashes}
        except ShrinkStopped:
            raise
        except Exception:
            cols[c] = None
    return {"index": index, "columns": cols}


def _label_hashes(arr: Any, pd: Any, check: Any) -> Any:
    """The sorted distinct `hash_array` values of `arr` (each value's hash depends on it alone: chunks of
    `_SHRINK_CHUNK` rows, `check` between them), or None past 1M."""
    np = _MODULES["numpy"]  # (bound at install: never a `sys.modules` the notebook rebound)
    acc = None
    for a in range(0, max(1, len(arr)), _SHRINK_CHUNK):
        _shrink_check(check)
        u = np.unique(pd.util.hash_array(arr[a:a + _SHRINK_CHUNK]))
        acc = u if acc is None else np.union1d(acc, u)
        if len(acc) > 1_000_000:
            return None
    return acc


_SHRINK_LIBRARIES = ("numpy", "pandas", "pandas.util", "torch", "torch.utils.data", "scipy.sparse", "datasets")



def _shrink_gate(proof: _Proof) -> Any:
    """What kernel/miniature may look into while it shrinks in the kernel: an object proven (`_Proof.check`), a
    plain container, or an instance of a pristine library class, and only while the libraries shrinking calls are
    untouched by the notebook (their functions and classes its own)."""
    def gate(obj: Any) -> bool:
        if not all(_untouched(proof, n) for n in _SHRINK_LIBRARIES):
            return False
        try:
            proof.check(obj)
        except _Refused:
            return False
        t = type(obj)
        return t is dict or t is list or t is tuple or proof.pristine(t)
    return gate


def _shrink(objs: dict, spec: dict, proof: _Proof, check: Any = None) -> tuple[list, list]:
    """Replace the large values in `objs` (a copy of the cell's names, never the user's namespace) by consistent
    row subsets (kernel/miniature's rules): (kept, what the worker needs about each original). `check` is called
    between objects, columns and chunks: kernel/miniature's `ShrinkStopped` stops it (`objs` left whole).
    kernel/miniature looks only into what `_shrink_gate` passes: nothing of the notebook's is sized or called."""
    _GATE[:] = [_shrink_gate(proof)]
    try:
        return _shrink_gated(objs, spec, check)
    finally:
        _GATE.clear()


def _shrink_gated(objs: dict, spec: dict, check: Any = None) -> tuple[list, list]:
    names = [n for n, o in dict.items(objs) if _in_kernel_ok(o)]
    _REGISTRY["objects"].clear()
    before = dict(objs)
    try:
        kept = shrink_namespace(objs, names, spec, check)
        known = [{"label": label, "kind": kind, "n": n, "k": k, "known": _known(kind, orig, check)}
                 for label, kind, orig, _new, n, k in _REGISTRY["objects"]]
    except ShrinkStopped:
        objs.clear()
        objs.update(before)
        raise
    finally:
        _REGISTRY["objects"].clear()  # no reference to the user's objects is kept in the kernel
    return kept, known
