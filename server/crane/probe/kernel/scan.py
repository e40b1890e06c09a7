"""CRANE kernel probe: exact scans and samples of arrays, on numpy's and pandas' fast paths (standard
library only).

What a scan costs is what it reads from memory: a contiguous float64 column of n rows is n/8 cache lines, a
column of a frame built from one 2-D array (strided: one element per row of the array) is n lines, a Python
object is a pointer plus a type check. The scans here read the data once, and only once while the kernel's
state is unchanged:

- `run_pass`: the frame of every exact pass: chunk by chunk; its result is remembered for the memory it read
  (the same column reached as `df.c3` and as column c3 is read once); a resumable pass stops when the call's
  scan slice is spent and the next call continues it, so no single request reads a large column whole (a
  1e6-row strided column takes ~8 ms: more than twice an empty request);
- `number_scan`: the missing-value count, minimum and maximum of a numeric column in ONE pass over memory,
  chunk by chunk: a min reduction reads each chunk (NaN and NaT propagate through it, so a missing value is
  seen without a temporary), and only a chunk that holds one is counted, and only a wanted range is reduced,
  while the chunk is still in the core's cache. A strided column is copied chunk by chunk into one small
  buffer, never as a whole (no large temporary, no page faults).
- `object_scan`: the same count for an object array: pandas' `is_string_array` proves a chunk holds only
  strings (no missing value) without a mask; `count_missing`: the count for any 1-D array, in full.
- `sample_rows`: a bounded strided sample, never reading what it does not keep.

Integer and bool numpy arrays cannot hold a missing value: nothing is read for them.
"""

from __future__ import annotations

import math
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

from crane.probe.kernel.cache import active, recall, remember  # kernel: strip
from crane.probe.kernel.common import OBJECT_WEIGHT, Ctx, isa  # kernel: strip

SAMPLE_N = 20000  # elements kept by a strided sample of a value whose facts the cell needs
CHUNK = 1 << 16  # elements per step of a fused pass (512 KiB of float64: still cached for the next reductions)


def _kind_char(dtype: Any) -> str:
    try:
        k = dtype.kind
        return k if isinstance(k, str) else "O"
    except Exception:
        return "O"


def strided_step(a: Any) -> int:
    """Elements between two consecutive ones of a 1-D numpy array (1: contiguous), bounded to 8 (a cache line)."""
    try:
        return max(1, min(abs(int(a.strides[0])) // max(1, int(a.itemsize)), 8)) if a.ndim == 1 else 1
    except Exception:
        return 1


def scan_weight(kc: str, is_np: bool, a: Any = None) -> int:
    """Cost of reading one element exactly, in scan-budget units: numbers 1, Python objects OBJECT_WEIGHT; a
    strided 1-D numpy array (a column of a frame built from a 2-D array) costs the cache lines it touches."""
    w = 1 if (is_np and kc in "biufcmM") else OBJECT_WEIGHT
    if a is not None and is_np:
        w *= strided_step(a)
    return w


def _pandas_lib() -> Any:
    return sys.modules.get("pandas._libs.lib")


def missing_mask(ctx: Ctx, a: Any, kc: str, is_np: bool) -> Any:
    """A bool array: which elements of 1-D `a` are missing (None for integer/bool arrays: none can be)."""
    np, pd = ctx.np, ctx.pd
    if is_np and kc in "biu":
        return None
    if is_np and kc in "fc":
        return np.isnan(a)
    if is_np and kc in "mM":
        return np.isnat(a)
    if pd is not None:
        return np.asarray(pd.isna(a), dtype=bool)
    # object array without pandas: None and float NaN are missing
    return np.fromiter((x is None or (type(x) is float and x != x) for x in a), dtype=bool, count=len(a))


# -- exact passes, resumable across calls -------------------------------------------------------------------------
def memory_key(ctx: Ctx, a: Any) -> tuple[tuple[Any, ...] | None, weakref.ref[Any] | None]:
    """(key, weak reference) naming the memory numpy array `a` views: its address, shape, strides and dtype, and
    the object that owns the memory (the end of its `base` chain, weakly referenced: while it lives, and no code
    ran, the memory holds what it held). (None, None) when it cannot be named. Read through ndarray's own
    descriptors (a subclass cannot run code here)."""
    np = ctx.np
    try:
        if np is None or not isa(a, np.ndarray):
            return None, None
        slots = np.ndarray.__dict__
        base = slots["base"]
        root = a
        for _ in range(32):
            b = base.__get__(root) if isa(root, np.ndarray) else None
            if b is None:
                break
            root = b
        ref = weakref.ref(root)
        addr = slots["__array_interface__"].__get__(a)["data"][0]
        return (addr, tuple(a.shape), tuple(a.strides), a.dtype.str, id(root)), ref
    except Exception:
        return None, None


def run_pass(
    ctx: Ctx,
    a: Any,
    what: str | tuple[Any, ...],
    n: int,
    start: Callable[[], dict[str, Any]],
    step: Callable[[dict[str, Any], int, int], None],
    resumable: bool = True,
    chunk: int = CHUNK,
) -> dict[str, Any]:
    """One exact pass over the `n` rows of `a`, chunk by chunk: `step(state, s, e)` reads rows s..e-1 into the
    dict `state` (`start()` makes a fresh one; a step may set state["done"] to stop early). The finished state
    is remembered for `a`'s memory while the kernel's state is unchanged (kernel/cache), so the same column asked
    twice (as `df.c3` and as column c3) is read once. `resumable`: stop when the call's scan slice is spent
    (`Ctx.may_continue_pass`) and keep the position: the next call continues from there. Returns the state;
    state["done"] is False when the pass is unfinished (the caller reports partial facts)."""
    key, ref = memory_key(ctx, a)
    state = None
    if key is not None and active():
        key = ("pass", what, key)
        hit = recall(key, counted=False)
        if hit is not None and hit["ref"]() is not None:
            state = hit
    else:
        key, resumable = None, False  # nothing outlives this call: read it all now
    if state is None:
        state = start()
        state["pos"], state["done"], state["ref"], state["call"] = 0, False, ref, None
    pos = state["pos"]
    while pos < n and not state["done"]:
        if resumable and not ctx.may_continue_pass(state["call"] != ctx.call):  # its first chunk in this call?
            break
        state["call"] = ctx.call
        e = min(n, pos + chunk)
        t = time.perf_counter()
        step(state, pos, e)
        ctx.pass_s += time.perf_counter() - t
        pos = e
    state["pos"] = pos
    if pos >= n:
        state["done"] = True
    if key is not None:
        remember(key, state)
    if not state["done"]:
        ctx.left_unfinished()
    return state


def object_scan(ctx: Ctx, a: Any, resumable: bool = False) -> tuple[int, bool, bool]:
    """(missing count, every element is a str, done) of a 1-D object numpy array in one `run_pass`: a chunk
    pandas' `is_string_array` proves holds only str has no missing value (no mask); any other is counted with
    `missing_mask`. An unfinished pass gives what the rows read so far hold."""
    np = ctx.np
    lib = _pandas_lib()
    check = getattr(lib, "is_string_array", None) if lib is not None else None

    def step(st: dict[str, Any], s: int, e: int) -> None:
        c = a[s:e]
        try:
            if check is not None and check(c, skipna=False):
                return
        except Exception:
            pass
        st["strings"] = False
        st["nn"] += int(np.count_nonzero(missing_mask(ctx, c, "O", True)))

    st = run_pass(ctx, a, "objects", len(a), lambda: {"nn": 0, "strings": True}, step, resumable, CHUNK // 4)
    return st["nn"], st["strings"], st["done"]


def count_missing(ctx: Ctx, a: Any, kc: str, is_np: bool) -> int | None:
    """The number of missing values of 1-D `a` (None when its dtype cannot hold any), read in full."""
    np = ctx.np
    if is_np and kc in "biu":
        return None
    if is_np and kc in "fmM" and a.ndim == 1:
        return number_scan(ctx, a, kc, False)[0]
    if is_np and kc == "O" and a.ndim == 1:
        return object_scan(ctx, a)[0]
    mask = missing_mask(ctx, a, kc, is_np)
    return int(np.count_nonzero(mask)) if mask is not None else None


def number_scan(
    ctx: Ctx, a: Any, kc: str, want_range: bool, keep: int = 0, resumable: bool = False
) -> tuple[int, Any, Any, Any, bool]:
    """(missing count, min, max, sample, done) of a 1-D numeric (kind i/u/f/m/M) numpy array, reading it from
    memory once (`run_pass`: remembered; `resumable`: possibly over several calls, done False until the last).
    min and max are None when not wanted or when every value is missing; the count is 0 for integers.
    `keep` > 0: also a strided sample of about `keep` elements, taken from each chunk while it is cached (else
    None). An unfinished pass gives the count, range and sample of the rows read so far."""
    np = ctx.np
    n = len(a)
    isnull = np.isnan if kc == "f" else (np.isnat if kc in "mM" else None)
    strided = n > CHUNK and not a.flags.c_contiguous
    buf = None  # for a strided column: allocated on the first chunk this call reads
    step_n = max(1, int(math.ceil(n / float(keep)))) if keep else 0

    def step(st: dict[str, Any], s: int, e: int) -> None:
        c = a[s:e]
        nonlocal buf
        if strided:
            if buf is None:
                buf = np.empty(CHUNK, dtype=a.dtype)
            b = buf[: len(c)]
            np.copyto(b, c)
            c = b
        if step_n:
            st["parts"].append(c[(-s) % step_n :: step_n].copy())
        m = None if st["last"] else c.min()
        if isnull is not None and (st["last"] or isnull(m)):  # maybe missing values here: count them while cached
            miss = isnull(c)
            st["last"] = k = int(np.count_nonzero(miss))
            st["nn"] += k
            if not want_range or k == len(c):
                return
            if not k:
                cm, cx = c.min(), c.max()
            elif kc == "f":
                cm, cx = np.fmin.reduce(c), np.fmax.reduce(c)
            else:
                v = c[~miss]
                cm, cx = v.min(), v.max()
        elif not want_range:
            return
        else:
            cm, cx = m, c.max()
        if st["lo"] is None or cm < st["lo"]:
            st["lo"] = cm
        if st["hi"] is None or cx > st["hi"]:
            st["hi"] = cx

    st = run_pass(ctx, a, ("numbers", kc, bool(want_range), keep), n,
                  lambda: {"nn": 0, "lo": None, "hi": None, "parts": [], "last": 0}, step, resumable)  # fmt: skip
    parts = st["parts"]
    sample = None
    if step_n and parts:
        sample = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return st["nn"], st["lo"], st["hi"], sample, st["done"]


def sample_rows(a: Any, n_keep: int) -> Any:
    """A strided view of about `n_keep` elements of 1-D `a` (reads only what it keeps)."""
    n = len(a)
    return a[:: max(1, int(math.ceil(n / float(max(1, n_keep)))))] if n else a
