"""CRANE kernel probe: facts of pandas DataFrames (standard library only).

Columns the cell names (`Ctx.wanted`: a label it mentions, or one differing from it only by case or surrounding
spaces) get value facts (kernel/data.vector_facts), each on the per-value scan budget: their NaN counts are what
catches estimator crashes. So do all columns of a frame of at most SMALL_FRAME values, or of any frame when the
request has no `columns` list (hover). Every other listed column gets its name, dtype, its missing values and,
when text-like, numeric_parse — what rules, hover and prompts read of a column the cell does not name:

- integer and bool columns cannot hold NaN: 0, nothing read;
- exactly, when ALL listed columns fit ONE budget per frame (`Ctx.frame_budget`; named ones count too, so
  the same columns are exact whatever the request names, and their facts can be reused): a whole 2-D float or
  object block that fits is checked in one pass first (`_block_flag`; a resumable kernel/scan.run_pass: while it
  is unfinished, its columns are `sampled` with nothing seen and the next call goes on), and only the columns
  it flags are counted;
- when they do not ALL fit (a partial count would give no total), none is read exactly: a numeric column is
  `sampled` with its NaNs unknown (names and dtypes only), except that the strided columns of a frame built
  from one 2-D float array are sampled together by rows (UNNAMED_SAMPLE_N rows: one short read per row); a
  text-like column gets numeric_parse from a strided sample (SAMPLE_N values). `has_nan` is true when a sample
  shows a NaN and absent otherwise (unknown, never "no NaN");
- those samples share a time budget per request (`Ctx.may_sample`): a column it does not reach is `sampled`
  with nothing seen, and the cut is not remembered, so a later call completes it.

Column facts are reused while the kernel's state is unchanged (kernel/cache), keyed on the frame and the position.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any, cast

from crane.probe.kernel.cache import recall, remember  # kernel: strip
from crane.probe.kernel.common import Ctx, isa  # kernel: strip
from crane.probe.kernel.data import (  # kernel: strip
    column_values,  # kernel: strip
    dtype_str,  # kernel: strip
    index_facts,  # kernel: strip
    label_str,  # kernel: strip
    string_dtype,  # kernel: strip
    vector_facts,  # kernel: strip
)  # kernel: strip
from crane.probe.kernel.scan import (  # kernel: strip
    CHUNK,  # kernel: strip
    SAMPLE_N,  # kernel: strip
    _kind_char,  # kernel: strip
    _pandas_lib,  # kernel: strip
    count_missing,  # kernel: strip
    missing_mask,  # kernel: strip
    run_pass,  # kernel: strip
    sample_rows,  # kernel: strip
    scan_weight,  # kernel: strip
)  # kernel: strip

MAX_COLS = 200  # DataFrame columns listed at all
MAX_DETAILED_COLS = 60  # DataFrame columns given value facts
SMALL_FRAME = 100000  # a frame of at most this many values gets value facts for every column (about 1-3 ms)
UNNAMED_SAMPLE_N = 2000  # values sampled of a numeric column the cell does not name, past the frame's budget


def _named_columns(ctx: Ctx, cols: Any, labels: list[Any], ncols: int) -> list[int]:
    """Positions of the columns whose label the cell mentions: among the listed `labels` (also a label that
    differs from a mentioned one only by case or surrounding spaces: the column a typo meant), and beyond."""
    wanted = cast("Collection[str | int]", ctx.wanted)  # called only when the cell names columns
    named = [i for i, lab in enumerate(labels) if (type(lab) is str or type(lab) is int) and lab in wanted]
    loose: dict[str, int] = {}
    for i, lab in enumerate(labels):
        if type(lab) is str:
            loose.setdefault(lab.strip().lower(), i)
    for lab in wanted:
        if type(lab) is str:
            hit = loose.get(lab.strip().lower())
            if hit is not None and hit not in named:
                named.append(hit)
    if ncols > len(labels):
        for lab in wanted:
            if len(named) >= MAX_DETAILED_COLS:
                break
            try:
                if (type(lab) is str or type(lab) is int) and lab in cols:
                    j = cols.get_loc(lab)
                    if type(j) is int and j >= len(labels) and j not in named:
                        named.append(j)
            except Exception:
                continue
    return named


def dataframe_facts(ctx: Ctx, df: Any, out: dict[str, Any]) -> None:
    """Columns (names, dtypes, missing values; value facts for the columns the cell names), NaN totals and the
    index. Exactness depends on the frame alone (see the module's docstring)."""
    nrows, ncols = df.shape
    out["shape"] = [int(nrows), int(ncols)]
    out["length"] = int(nrows)
    cols = df.columns
    labels = cols[: min(ncols, MAX_COLS)].tolist()
    if ctx.wanted is None or nrows * ncols <= SMALL_FRAME:  # small: details everywhere cost next to nothing
        named = list(range(min(len(labels), MAX_DETAILED_COLS)))
        named += [j for j in (_named_columns(ctx, cols, labels, ncols) if ctx.wanted else ()) if j not in named]
    else:
        named = _named_columns(ctx, cols, labels, ncols)
    detailed = set(named)
    layout = _layout(ctx, df, len(labels))
    facts = {}
    for i in named:  # first, while the time budget is fresh
        facts[i] = column_facts(ctx, df, i, labels[i] if i < len(labels) else cols[i], True, layout)
    for i in range(len(labels)):
        if i not in detailed:
            facts[i] = _nothing_to_count(ctx, layout, i, labels[i]) or column_facts(ctx, df, i, labels[i], False,
                                                                                       layout)  # fmt: skip
    columns = [facts[i] for i in range(len(labels))] + [facts[j] for j in named if j >= len(labels)]
    if ncols > len(labels):
        out["columns_truncated"] = True
    out["columns"] = columns
    total: int | None = 0
    seen_nan = False
    for k, c in enumerate(columns):
        if "n_nan" in c:  # exact count: has_nan would be redundant
            if total is not None and k < len(labels):
                total += c["n_nan"]
            c.pop("has_nan", None)
        else:  # sampled or skipped: has_nan True = NaNs seen in the sample
            total = None
            seen_nan = seen_nan or bool(c.get("has_nan"))
    if total is not None and ncols > len(labels):
        total = _missing_beyond(ctx, df, len(labels), layout, total)
    if total is not None:
        out["n_nan"] = total
        out["has_nan"] = total > 0
    elif seen_nan:
        out["has_nan"] = True
    out["index"] = index_facts(ctx, df.index)


def _layout(ctx: Ctx, df: Any, n_listed: int) -> dict[str, Any]:
    """How the frame's budget covers its listed columns, in column order: "none" (integer/bool: nothing to
    read), "block" (its 2-D float or object block is checked in one contiguous pass; then only the columns that
    may hold missing values are counted), "exact" (charged on its own) or "sample". Depends on the frame alone."""
    np = ctx.np
    mode, left = [], ctx.frame_budget
    nrows = int(df.shape[0])
    try:
        mgr = df._mgr
        blknos, blklocs, blocks = mgr.blknos, mgr.blklocs, mgr.blocks
    except Exception:
        blknos = blklocs = blocks = None
    charged = {}
    for i in range(n_listed):
        kc, is_np, step, vals, b = "O", False, 1, None, None
        if blocks is not None:
            try:
                b = int(blknos[i])
                vals = blocks[b].values
                kc, is_np = _kind_char(vals.dtype), isa(vals, np.ndarray)
                if is_np and vals.ndim == 2:
                    step = max(1, min(abs(int(vals.strides[1])) // max(1, int(vals.itemsize)), 8))
            except Exception:
                vals = None
        if is_np and kc in "biu":
            mode.append("none")  # cannot hold NaN: nothing to read
            continue
        if vals is not None and is_np and vals.ndim == 2 and vals.shape[0] > 1 and kc in "fO":
            if b not in charged:
                units = int(vals.size) * scan_weight(kc, True)
                charged[b] = units <= left
                if charged[b]:
                    left -= units
            if charged[b]:
                mode.append("block")
                continue
        units = nrows * scan_weight(kc, is_np) * step
        if units <= left:
            left -= units
            mode.append("exact")
        else:
            mode.append("sample")
    if "sample" in mode:  # not every column fits: a partial count gives no total; read none of them
        mode = [m if m == "none" else "sample" for m in mode]
        left, charged = 0, {}
    return {"mode": mode, "left": left, "blknos": blknos, "blklocs": blklocs, "blocks": blocks, "flags": {},
            "charged": charged, "samples": {}, "frame": id(df)}


def _nothing_to_count(ctx: Ctx, layout: dict[str, Any], i: int, label: Any) -> dict[str, Any] | None:
    """The facts of column i when its block proves it holds no missing value and no text (an integer/bool
    block, or a float block whose one pass found none), built without touching the column; else None."""
    mode = layout["mode"][i] if i < len(layout["mode"]) else None
    if mode not in ("none", "block"):
        return None
    try:
        vals = layout["blocks"][int(layout["blknos"][i])].values
        if _kind_char(vals.dtype) not in "biuf" or (mode == "block" and _block_flag(ctx, layout, i) is not False):
            return None
        return {"name": label_str(label, ctx), "dtype": dtype_str(vals.dtype), "n_nan": 0}
    except Exception:
        return None


def _block_flag(ctx: Ctx, layout: dict[str, Any], i: int) -> bool | str | None:
    """May column i hold a missing value? False (certainly not) / True or None (maybe) / PARTIAL (its block's
    pass is unfinished: a later call completes it), from one contiguous pass over its whole block: per-column
    sums for floats (NaN propagates through a sum; +inf and -inf together also give NaN, then the column's own
    count decides), `is_string_array` for objects."""
    try:
        b = int(layout["blknos"][i])
        if b not in layout["flags"]:
            layout["flags"][b] = _block_pass(ctx, layout, b)
        flags = layout["flags"][b]
        if flags is PARTIAL:
            ctx.cuts += 1  # whatever reads it is partial: not to be remembered (the next call goes on)
            return flags
        if flags is None or flags is False:
            return flags
        return bool(flags[int(layout["blklocs"][i])])
    except Exception:
        return None


PARTIAL = "partial"  # a block whose pass this call left unfinished


def _block_pass(ctx: Ctx, layout: dict[str, Any], b: int) -> list[bool] | bool | str | None:
    """The flags of block b's one pass (a list of bools per column of the block, False: none can hold a missing
    value, None: unknown, PARTIAL: unfinished), a resumable `run_pass` (remembered while the kernel's state is
    unchanged): a float block in runs of rows (each a contiguous region of a frame built from one 2-D array),
    an object block as its flat view."""
    np = ctx.np
    if ctx.over_time():
        return None
    vals = layout["blocks"][b].values
    kc = _kind_char(vals.dtype)
    weight = scan_weight(kc, True)
    if kc == "f":
        width = max(1, int(vals.shape[0]))

        def sums(st: dict[str, Any], s: int, e: int) -> None:
            ctx.scanned += width * (e - s) * weight  # what this call reads (nothing when the pass is reused)
            part = np.isnan(np.einsum("ij->i", vals[:, s:e]))
            st["nan"] = part if st["nan"] is None else (st["nan"] | part)

        st = run_pass(ctx, vals, "block sums", int(vals.shape[1]), lambda: {"nan": None}, sums, True,
                      max(1, CHUNK // width))  # fmt: skip
        if not st["done"]:
            return PARTIAL
        return st["nan"].tolist() if st["nan"] is not None else False
    lib = _pandas_lib()
    if kc != "O" or not vals.flags.c_contiguous or lib is None:
        return None
    flat = vals.reshape(-1)

    def strings(st: dict[str, Any], s: int, e: int) -> None:
        ctx.scanned += (e - s) * weight
        if not lib.is_string_array(flat[s:e], skipna=False):
            st["strings"], st["done"] = False, True

    st = run_pass(ctx, flat, "block strings", int(flat.size), lambda: {"strings": True}, strings, True, CHUNK // 4)
    if not st["done"]:
        return PARTIAL
    return False if st["strings"] else None


def _row_sample_flags(ctx: Ctx, layout: dict[str, Any], i: int) -> bool | None:
    """NaN seen in a row sample of column i's block, when the block is a float block whose columns are strided
    (a frame built from one 2-D array): the same UNNAMED_SAMPLE_N rows of every column of the block, taken
    together (each sampled row is one short contiguous read), instead of one strided read per value and column.
    None when the block is not such a block."""
    np = ctx.np
    try:
        b = int(layout["blknos"][i])
        if b not in layout["samples"]:
            layout["samples"][b] = None
            vals = layout["blocks"][b].values
            if _row_sampled_block(ctx, layout, i):
                rows = vals.T  # one row of the frame per row, its columns side by side
                n = int(rows.shape[0])
                idx = np.arange(0, n, max(1, int(math.ceil(n / float(UNNAMED_SAMPLE_N)))))
                layout["samples"][b] = np.isnan(rows.take(idx, axis=0)).any(axis=0)
        flags = layout["samples"][b]
        return None if flags is None else bool(flags[int(layout["blklocs"][i])])
    except Exception:
        return None


def _unknown(c: dict[str, Any], kc: str, is_np: bool) -> None:
    """A column nothing was read of: integer/bool columns still hold no NaN; any other is `sampled`, nothing seen."""
    if is_np and kc in "biu":
        c["n_nan"] = 0
    else:
        c["sampled"] = True


def column_facts(
    ctx: Ctx, df: Any, i: int, label: Any, detailed: bool, layout: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Facts of column i (`detailed`: value facts too, on the per-value budget; else on the frame's budget, see
    `_layout`), reused while the kernel's state is unchanged (kernel/cache)."""
    key = ("column", id(df), i, detailed)
    hit = recall(key)
    if hit is not None:
        return dict(hit)
    cuts = ctx.cuts
    a = column_values(df, i)
    kc, is_np = _kind_char(a.dtype), isa(a, ctx.np.ndarray)
    c: dict[str, Any] = {"name": label_str(label, ctx), "dtype": dtype_str(a.dtype)}
    string_dtype(a.dtype, c)
    if ctx.over_time():
        _unknown(c, kc, is_np)
        return c
    try:
        mode = layout["mode"][i] if (not detailed and layout is not None and i < len(layout["mode"])) else None
        flag = _block_flag(ctx, layout, i) if mode == "block" else None  # type: ignore[arg-type]  # "block": a layout
        if detailed:
            vector_facts(ctx, a, c, kind_key="kind", details=True)
        elif mode == "none":
            c["n_nan"] = 0
        elif flag is PARTIAL:
            _unknown(c, kc, is_np)  # its block's pass goes on in the next call
        elif mode == "block" and flag is False:
            vector_facts(ctx, a, c, exact=True, kind_key="kind", details=False, missing=0, strings=kc == "O")
        elif mode in ("block", "exact"):  # a flagged column of a block that fit is counted too (at most as much)
            ctx.scanned += len(a) * scan_weight(kc, is_np, a)
            vector_facts(ctx, a, c, exact=True, kind_key="kind", details=False)
        else:
            _sample_column(ctx, layout, i, a, kc, is_np, c)
    except Exception as exc:
        ctx.error("column %s" % c["name"], exc)
    if ctx.cuts == cuts:
        remember(key, dict(c))
    return c


def _sample_column(
    ctx: Ctx, layout: dict[str, Any] | None, i: int, a: Any, kc: str, is_np: bool, c: dict[str, Any]
) -> None:
    """Column i of a frame too large for its budget: a row sample, within the request's sampling time
    (`Ctx.may_sample`). A text-like column gets numeric_parse from it (what the "could not convert string to
    float" rules read of a column the cell does not name); a numeric column gets `sampled` and, when the sample
    holds a NaN, `has_nan` (evidence the estimator rules read when the whole frame is passed on) — for a strided
    2-D float block, one short row read serves all its columns. Past the sampling time: NaN unknown."""
    row_block = is_np and kc in "biufcmM" and _row_sampled_block(ctx, layout, i)
    # (the type: ignores below: `row_block` is only true with a layout)
    if not (row_block and _block_sampled(layout, i)) and not ctx.may_sample():  # type: ignore[arg-type]
        _unknown(c, kc, is_np)
        return
    if row_block:
        seen = _row_sample_flags(ctx, layout, i)  # type: ignore[arg-type]
        if seen is None:
            _unknown(c, kc, is_np)
            return
        c["sampled"] = True
        if seen:
            c["has_nan"] = True
        return
    if is_np and kc in "fcmM":  # numbers: NaN evidence only, one vectorised check of a short sample
        c["sampled"] = True
        if any(missing_mask(ctx, w, kc, is_np).any() for w in _windows(a, UNNAMED_SAMPLE_N)):
            c["has_nan"] = True
        return
    vector_facts(ctx, sample_rows(a, SAMPLE_N), c, exact=False, kind_key="kind", details=False)


def _windows(a: Any, n_keep: int, count: int = 8) -> list[Any]:
    """About `n_keep` elements of 1-D `a` as `count` runs of neighbours spread over it: a few memory
    regions read in full instead of one cache line per element (the strided sample costs ~25x more at 5e6)."""
    n = len(a)
    size = max(1, n_keep // count)
    if n <= n_keep:
        return [a]
    step = (n - size) // (count - 1)
    return [a[k * step:k * step + size] for k in range(count)]


def _block_sampled(layout: dict[str, Any], i: int) -> bool:
    """Was column i's block row-sampled already by this call (its flags then cost nothing more)?"""
    try:
        return int(layout["blknos"][i]) in layout["samples"]
    except Exception:
        return False


def _row_sampled_block(ctx: Ctx, layout: dict[str, Any] | None, i: int) -> bool:
    """Is column i part of a 2-D float block whose columns are strided (a frame built from one 2-D array)?"""
    np = ctx.np
    if layout is None or layout["blocks"] is None:
        return False
    try:
        vals = layout["blocks"][int(layout["blknos"][i])].values
        return (isa(vals, np.ndarray) and vals.ndim == 2 and _kind_char(vals.dtype) == "f" and vals.shape[0] > 1
                and abs(int(vals.strides[0])) < abs(int(vals.strides[1])))  # fmt: skip
    except Exception:
        return False


def _missing_beyond(ctx: Ctx, df: Any, start: int, layout: dict[str, Any], total: int) -> int | None:
    """The exact NaN total including the columns past the listed ones (their block's one-pass check when it was
    made, else their own scans on what is left of the frame's budget), or None when they do not fit."""
    np = ctx.np
    key = ("missing_beyond", id(df), start)
    hit = recall(key)
    if hit is not None:
        return total + hit if hit >= 0 else None
    cuts = ctx.cuts
    extra = 0
    try:
        todo = [(i, True) for i in range(start, int(df.shape[1]))]  # (column, charged on what is left)
        if layout["blknos"] is not None:  # skip whole blocks that cannot hold, or were seen not to hold, NaN
            blknos = np.asarray(layout["blknos"])[start:]
            blklocs = np.asarray(layout["blklocs"])[start:]
            todo = []
            for b in np.unique(blknos).tolist():
                vals = layout["blocks"][b].values
                if isa(vals, np.ndarray) and _kind_char(vals.dtype) in "biu":
                    continue
                where = np.flatnonzero(blknos == b)
                flags = None
                if layout["charged"].get(b):
                    _block_flag(ctx, layout, int(where[0]) + start)  # computes the whole block's flags once
                    flags = layout["flags"].get(b)
                if flags is False:  # no missing value anywhere in the block
                    continue
                if flags is PARTIAL:  # its pass goes on in the next call: no total now
                    extra = -1
                    break
                if flags is not None:  # only the columns whose sum was NaN (their block fit: counted as listed)
                    where = where[np.asarray(flags, dtype=bool)[blklocs[where]]]
                todo.extend((i + start, flags is None) for i in where.tolist())
            todo = [] if extra < 0 else sorted(todo)
        for i, charge in todo:
            a = column_values(df, i)
            kc = _kind_char(a.dtype)
            is_np = isa(a, np.ndarray)
            if is_np and kc in "biu":
                continue
            units = len(a) * scan_weight(kc, is_np, a)
            if charge and (units > layout["left"] or not ctx.can_scan(units, layout["left"])):
                extra = -1
                break
            if charge:
                layout["left"] -= units
            else:
                ctx.scanned += units
            extra += count_missing(ctx, a, kc, is_np) or 0
    except Exception as exc:
        ctx.error("NaN total", exc)
        extra = -1
    if ctx.cuts == cuts:
        remember(key, extra)
    return total + extra if extra >= 0 else None
