"""CRANE kernel probe, part 3 of 8: exact scans and samples of arrays, on numpy's and pandas' fast paths (standard
library only).

What a scan costs is what it reads from memory: a contiguous float64 column of n rows is n/8 cache lines, a
column of a frame built from one 2-D array (strided: one element per row of the array) is n lines, a Python
object is a pointer plus a type check. The scans here read the data once:

- `number_scan`: the missing-value count, minimum and maximum of a numeric column in ONE pass over memory,
  chunk by chunk: a min reduction reads each chunk (NaN and NaT propagate through it, so a missing value is
  seen without a temporary), and only a chunk that holds one is counted, and only a wanted range is reduced,
  while the chunk is still in the core's cache. A strided column is copied chunk by chunk into one small
  buffer, never as a whole (no large temporary, no page faults).
- `count_missing`: the same count for any 1-D array; pandas' `is_string_array` proves an object array holds
  only strings (no missing value) without a mask.
- `sample_rows`: a bounded strided sample, never reading what it does not keep.

Integer and bool numpy arrays cannot hold a missing value: nothing is read for them.
"""

import math
import sys

from crane.probe.kp_common import OBJECT_WEIGHT  # kernel: strip

SAMPLE_N = 20000  # elements kept by a strided sample of a value whose facts the cell needs
CHUNK = 1 << 16  # elements per step of a fused pass (512 KiB of float64: still cached for the next reductions)


def _kind_char(dtype):
    try:
        k = dtype.kind
        return k if isinstance(k, str) else "O"
    except Exception:
        return "O"


def strided_step(a):
    """Elements between two consecutive ones of a 1-D numpy array (1: contiguous), bounded to 8 (a cache line)."""
    try:
        return max(1, min(abs(int(a.strides[0])) // max(1, int(a.itemsize)), 8)) if a.ndim == 1 else 1
    except Exception:
        return 1


def scan_weight(kc, is_np, a=None):
    """Cost of reading one element exactly, in scan-budget units: numbers 1, Python objects OBJECT_WEIGHT; a
    strided 1-D numpy array (a column of a frame built from a 2-D array) costs the cache lines it touches."""
    w = 1 if (is_np and kc in "biufcmM") else OBJECT_WEIGHT
    if a is not None and is_np:
        w *= strided_step(a)
    return w


def _pandas_lib():
    return sys.modules.get("pandas._libs.lib")


def missing_mask(ctx, a, kc, is_np):
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


def all_strings(a):
    """True when pandas proves the 1-D object array `a` holds only str (so nothing is missing); else False."""
    lib = _pandas_lib()
    check = getattr(lib, "is_string_array", None) if lib is not None else None
    if check is None or a.ndim != 1:
        return False
    try:
        return bool(check(a, skipna=False))
    except Exception:
        return False


def count_missing(ctx, a, kc, is_np):
    """(number of missing values of 1-D `a`, or None when its dtype cannot hold any; its minimum when that came
    for free)."""
    np = ctx.np
    if is_np and kc in "biu":
        return None, None
    if is_np and kc in "fmM" and a.ndim == 1:
        return number_scan(ctx, a, kc, False)[0], None
    if is_np and kc == "O" and all_strings(a):
        return 0, None
    mask = missing_mask(ctx, a, kc, is_np)
    return (int(np.count_nonzero(mask)) if mask is not None else None), None


def number_scan(ctx, a, kc, want_range, keep=0):
    """(missing count, min, max, sample) of a 1-D numeric (kind i/u/f/m/M) numpy array, reading it from memory
    once. min and max are None when not wanted or when every value is missing; the count is 0 for integers.
    `keep` > 0: also a strided sample of about `keep` elements, taken from each chunk while it is cached (else
    None)."""
    np = ctx.np
    n = len(a)
    isnull = np.isnan if kc == "f" else (np.isnat if kc in "mM" else None)
    buf = None
    if n > CHUNK and not a.flags.c_contiguous:
        buf = np.empty(CHUNK, dtype=a.dtype)
    step = max(1, int(math.ceil(n / float(keep)))) if keep else 0
    parts = []
    nn, lo, hi = 0, None, None
    last = 0  # missing values in the previous chunk: then look for them first in this one
    for s in range(0, n, CHUNK):
        c = a[s : s + CHUNK]
        if buf is not None:
            b = buf[: len(c)]
            np.copyto(b, c)
            c = b
        if step:
            parts.append(c[(-s) % step :: step].copy() if buf is not None else c[(-s) % step :: step])
        m = None if last else c.min()
        if isnull is not None and (last or isnull(m)):  # maybe missing values here: count them while cached
            miss = isnull(c)
            last = k = int(np.count_nonzero(miss))
            nn += k
            if not want_range or k == len(c):
                continue
            if not k:
                cm, cx = c.min(), c.max()
            elif kc == "f":
                cm, cx = np.fmin.reduce(c), np.fmax.reduce(c)
            else:
                v = c[~miss]
                cm, cx = v.min(), v.max()
        elif not want_range:
            continue
        else:
            cm, cx = m, c.max()
        if lo is None or cm < lo:
            lo = cm
        if hi is None or cx > hi:
            hi = cx
    sample = None
    if step:
        sample = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return nn, lo, hi, sample


def sample_rows(a, n_keep):
    """A strided view of about `n_keep` elements of 1-D `a` (reads only what it keeps)."""
    n = len(a)
    return a[:: max(1, int(math.ceil(n / float(max(1, n_keep)))))] if n else a
