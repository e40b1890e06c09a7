"""CRANE kernel probe: shared helpers (standard library only).

The probe parts (kernel/common, kernel/cache, kernel/scan, kernel/data, kernel/frame, kernel/ml, kernel/checks, kernel/entry) run INSIDE the user's kernel,
where CRANE is not installed: `collect.PROBE_MODULE` compiles them, in order, into the private module
`_crane_probe` (the lines marked `# kernel: strip` blanked), installed once per kernel by the daemon's
private-module installer. They use only the standard library and see third-party libraries only through
`sys.modules` (a library that is not loaded cannot have made the user's objects).

Safety rules every part follows: never run user code (no `repr`/`len`/`__getattr__`/properties of arbitrary
objects; type checks by `issubclass(type(v), cls)`), never print, never raise out of the entry points, and keep
every scan of data bounded.
"""

from __future__ import annotations

import json
import math
import sys
import time
import types
from collections.abc import Collection
from typing import Any

MAX_STR = 40  # characters kept of a string value
SCAN_BUDGET = 8000000  # elements one value may have read exactly (an object element counts OBJECT_WEIGHT)
FRAME_BUDGET = SCAN_BUDGET  # the same for the columns of a DataFrame the cell does not name, all together
SAMPLE_SHARE = 0.02  # share of the time budget one call may spend sampling columns the cell does not name (1 ms)
SCAN_SLICE_SHARE = 0.02  # share of the time budget exact passes may read in one call (a later call resumes them)
OBJECT_WEIGHT = 16  # cost of checking one Python object, relative to one number (is_string_array, isna)
EXAMPLE_CHARS = 20  # characters kept of an example value (as CRANE-LLM)

_type_dict = type.__dict__["__dict__"]
_type_mro = type.__dict__["__mro__"]
_type_module = type.__dict__["__module__"]
_type_qualname = type.__dict__["__qualname__"]
_type_name = type.__dict__["__name__"]
_type_flags = type.__dict__["__flags__"]
_DICT_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)
_missing = object()


class Ctx:
    """Budgets of one probe call: wall time, and the number of elements one value may have read exactly.

    The scan budget applies to each value on its own (the columns of a DataFrame the cell does not name share
    `frame_budget`), so whether a value's facts are exact depends on the value alone, never on what the request
    asked before it: facts stay the same whatever the request, and can be reused (kernel/cache). The time budgets
    are shared: work they cut short is counted in `cuts` and not reused (a later call completes it).

    Exact passes over data that stays alive between calls (kernel/scan.run_pass) also stop when the call's scan
    slice is spent (`slice_ms`, default SCAN_SLICE_SHARE of the time budget: the time all passes together
    spent reading in this call) and keep their position: the next call while nothing ran continues them
    (`unfinished` counts those left). Every pass reads at least one chunk per call, so a small one is never cut
    and a large one always advances."""

    def __init__(
        self,
        budget_ms: float = 50.0,
        scan_budget: int = SCAN_BUDGET,
        wanted: Collection[str | int] | None = None,
        frame_budget: int | None = None,
        slice_ms: float | None = None,
    ) -> None:
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + budget_ms / 1000.0
        self.slice_s = (budget_ms * SCAN_SLICE_SHARE if slice_ms is None else max(0.0, slice_ms)) / 1000.0
        self.pass_s = 0.0  # time resumable passes spent reading in this call
        self.call = object()  # names this call (a pass reads its first chunk of a call whatever the slice)
        self.unfinished = 0  # resumable passes this call left for a later one
        self.scan_budget = scan_budget
        self.frame_budget = min(FRAME_BUDGET, scan_budget) if frame_budget is None else frame_budget
        self.sample_s = budget_ms * SAMPLE_SHARE / 1000.0
        self.sample_deadline: float | None = None  # set by the first sample of a column the cell does not name
        self.scanned = 0  # elements read exactly by this call (reported)
        self.errors: list[str] = []
        self.time_capped = False
        self.cuts = 0  # times the time budget cut work short
        # Column labels the target cell mentions: DataFrames give value facts for these columns only (names,
        # dtypes, NaN counts and numeric_parse for the others). None: every column is detailed (up to a cap).
        self.wanted = wanted
        self.attr_message: str | None = None  # a library's own AttributeError text for the attribute check in progress
        # the libraries' modules, or None (used through their dynamic attributes: typed Any)
        self.np: Any = sys.modules.get("numpy")
        self.pd: Any = sys.modules.get("pandas")
        self.torch: Any = sys.modules.get("torch")

    def over_time(self) -> bool:
        if time.perf_counter() > self.deadline:
            self.cuts += 1
            self.time_capped = True
            return True
        return False

    def may_sample(self) -> bool:
        """May this call still sample a column the cell does not name (SAMPLE_SHARE of the time budget, from the
        first such sample)? No counts as a cut: the column says nothing, and a later call completes it."""
        now = time.perf_counter()
        if self.sample_deadline is None:
            self.sample_deadline = now + self.sample_s
        if now > self.sample_deadline or now > self.deadline:
            self.cuts += 1
            self.time_capped = True
            return False
        return True

    def may_continue_pass(self, first: bool) -> bool:
        """May a resumable exact pass read its next chunk? Its `first` one in this call, always; the others
        while the call's scan slice (and time budget) lasts."""
        return first or (self.pass_s < self.slice_s and time.perf_counter() <= self.deadline)

    def left_unfinished(self) -> None:
        """A resumable pass stopped before its end: this call's facts of it are partial (a cut, not reused)."""
        self.unfinished += 1
        self.cuts += 1

    def can_scan(self, n: int, left: int | None = None) -> bool:
        """May a value read `n` elements exactly (within `left`, default the per-value budget)? Else the caller
        works on a sample."""
        if n <= (self.scan_budget if left is None else left) and not self.over_time():
            self.scanned += n
            return True
        return False

    def error(self, what: str, exc: BaseException) -> None:
        if len(self.errors) < 20:
            self.errors.append("%s: %s: %s" % (what, _type_name.__get__(type(exc)), str(exc)[:120]))


# -- types, looked at without running user code ------------------------------------------------------------------
def mro(t: type) -> tuple[type, ...]:
    return _type_mro.__get__(t)


def class_dict(t: type) -> types.MappingProxyType[str, Any]:
    return _type_dict.__get__(t)


def tmodule(t: type) -> str:
    try:
        m = _type_module.__get__(t)
        return m if isinstance(m, str) else ""
    except Exception:
        return ""


def tname(t: type) -> str:
    """Qualified type name: 'int', 'pandas.core.frame.DataFrame'."""
    try:
        qn = _type_qualname.__get__(t)
    except Exception:
        qn = "?"
    m = tmodule(t)
    return qn if m in ("", "builtins") else m + "." + qn


def short_tname(t: type) -> str:
    try:
        return _type_name.__get__(t)
    except Exception:
        return "?"


def shown_tname(t: type) -> str:
    """The name CPython's own messages give a type (its tp_name, as in "'x' object has no attribute 'y'"): a class
    statement's class (a heap type, mutable) by its __name__; a type defined in C (static, or immutable from a
    spec) module-qualified, as `tname`."""
    try:
        flags = _type_flags.__get__(t)
    except Exception:
        return tname(t)
    return short_tname(t) if flags & (1 << 9) and not flags & (1 << 8) else tname(t)


def isa(v: Any, cls: type | None) -> bool:
    """isinstance without asking the object (its `__class__` could be a property)."""
    if cls is None:
        return False
    try:
        return issubclass(type(v), cls)
    except Exception:
        return False


def plain_array(np: Any, v: Any) -> Any:
    """`v` itself for numpy's own array types (ndarray, memmap, matrix, masked arrays: library code), else a plain
    ndarray view of its memory (C-level, no copy, no `__array_finalize__`): the probe never calls a `shape`,
    `__len__`, `reshape`, `min`... that a user-defined (or other library's) subclass overrides."""
    t = type(v)
    if t is np.ndarray or in_lib(t, ("numpy",)):
        return v
    return np.ndarray.view(v, np.ndarray)


def mod_attr(modname: str, name: str) -> Any:
    """A library class or function from a loaded module's dict, or None (never imports)."""
    m = sys.modules.get(modname)
    if m is None:
        return None
    try:
        return object.__getattribute__(m, "__dict__").get(name)
    except Exception:
        return None


def class_lookup(t: type, name: str, default: Any = _missing) -> Any:
    """Static lookup of `name` along the MRO of class `t` (plain dict reads)."""
    for k in mro(t):
        d = class_dict(k)
        if name in d:
            return d[name]
    return default


def in_lib(t: type, prefixes: tuple[str, ...]) -> bool:
    m = tmodule(t)
    for p in prefixes:
        if m == p or m.startswith(p + "."):
            return True
    return False


def mro_has(t: type, modprefix: str, names: tuple[str, ...]) -> bool:
    """Some class in t's MRO is named one of `names` and lives in module `modprefix`[.*]."""
    for k in mro(t):
        if short_tname(k) in names and in_lib(k, (modprefix,)):
            return True
    return False


def inst_dict(obj: Any) -> dict[Any, Any] | None:
    """The instance `__dict__` when the type does not shadow it (as inspect.getattr_static does), else None."""
    t = type(obj)
    for k in mro(t):
        e = class_dict(k).get("__dict__", _missing)
        if e is not _missing:
            if type(e) not in _DICT_DESCRIPTORS:
                return None
            break
    try:
        d = object.__getattribute__(obj, "__dict__")
    except Exception:
        return None
    return d if type(d) is dict else None


# -- JSON-safe values and short reprs ---------------------------------------------------------------------------
def trunc(s: str, n: int = MAX_STR) -> str:
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def jval(v: Any, ctx: Ctx | None = None, depth: int = 0) -> Any:
    """A JSON-safe rendering of a (library or builtin) scalar: numbers stay numbers, the rest become short strings."""
    t = type(v)
    if v is None or t is bool or t is str and len(v) <= MAX_STR:
        return v
    if t is int:
        return v if v.bit_length() <= 256 else "<int with %d bits>" % v.bit_length()
    if t is float:
        return v if math.isfinite(v) else repr(v)
    if t is str:
        return trunc(v)
    np = ctx.np if ctx is not None else sys.modules.get("numpy")
    if np is not None and isa(v, np.generic) and depth == 0:
        try:
            if isa(v, np.datetime64) or isa(v, np.timedelta64):
                return str(v)
            return jval(v.item(), ctx, 1)
        except Exception:
            pass
    return short(v, ctx)


_SCALARS = (int, float, bool, complex, type(None))


_BRACKETS: dict[type, tuple[str, str]] = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("{", "}")}


def short(v: Any, ctx: Ctx | None = None, limit: int = 50, depth: int = 0) -> str:
    """A bounded description of any value that runs no user code: a repr for builtin and library scalars and
    small builtin containers, a shape summary for arrays and frames, `<type>` for everything else."""
    t = type(v)
    try:
        if t is int and v.bit_length() > 256:
            return "<int with %d bits>" % v.bit_length()
        if t in _SCALARS:
            return trunc(repr(v), limit)
        if t is str or t is bytes:
            return repr(v[:limit]) + ("\u2026" if len(v) > limit else "")
        if t in (list, tuple, set, frozenset) or t is dict:
            return _short_container(v, ctx, limit, depth)
        if t is range:
            return repr(v)
        if t is types.ModuleType:
            return "<module %s>" % trunc(str(object.__getattribute__(v, "__dict__").get("__name__", "?")), limit)
        if t is types.FunctionType or t is types.BuiltinFunctionType:
            return "<function %s>" % trunc(str(v.__qualname__), limit)
        if t is types.MethodType:
            return "<bound method>"
        if isa(v, type):  # a class (metaclass checks are on the metaclass, not the object)
            return "<class %s>" % trunc(tname(v), limit)
        lib = _short_library(v, t, ctx)
        if lib is not None:
            return trunc(lib, limit + 30)
        if tmodule(t) in ("datetime", "decimal", "fractions", "pathlib", "uuid"):
            return trunc(repr(v), limit)
    except Exception:
        pass
    return "<%s>" % trunc(tname(t), limit)


def _short_container(v: Any, ctx: Ctx | None, limit: int, depth: int) -> str:
    n = len(v)  # exact builtin types only (checked by the caller)
    if depth >= 2:
        return "<%s of %d>" % (short_tname(type(v)), n)
    if type(v) is dict:
        parts = []
        for i, (k, x) in enumerate(v.items()):
            if i >= 4:
                break
            parts.append(short(k, ctx, 20, depth + 1) + ": " + short(x, ctx, 20, depth + 1))
        body = "{" + ", ".join(parts) + (", \u2026" if n > 4 else "") + "}"
    else:
        items = list(v[:6]) if type(v) in (list, tuple) else []
        if not items and n:
            try:
                items = [x for _, x in zip(range(6), v, strict=False)]
            except Exception:
                items = []
        parts = [short(x, ctx, 20, depth + 1) for x in items]
        open_, close = _BRACKETS[type(v)]
        body = open_ + ", ".join(parts) + (", \u2026" if n > len(items) else "") + close
    if len(body) > limit + 20:
        body = body[: limit + 19] + "\u2026"
    return body if n <= 6 else body + " (len %d)" % n


def _short_library(v: Any, t: type, ctx: Ctx | None) -> str | None:
    np = sys.modules.get("numpy")
    pd = sys.modules.get("pandas")
    torch = sys.modules.get("torch")
    if np is not None:
        if isa(v, np.ndarray):
            v = plain_array(np, v)
            return "ndarray(shape=%s, dtype=%s)" % (tuple(v.shape), v.dtype)
        if isa(v, np.generic):
            return repr(v)
    if pd is not None:
        if isa(v, pd.DataFrame):
            return "DataFrame(shape=%s)" % (tuple(v.shape),)
        if isa(v, pd.Series):
            return "Series(len=%d, dtype=%s)" % (len(v), v.dtype)
        if isa(v, pd.Index):
            return "%s(len=%d, dtype=%s)" % (short_tname(t), len(v), v.dtype)
        if isa(v, pd.Timestamp) or isa(v, pd.Timedelta) or tmodule(t).startswith("pandas._libs"):
            return str(v)  # Interval, Period, NaT, ...: pandas' own scalars
    if torch is not None:
        if isa(v, torch.Tensor):
            return "Tensor(shape=%s, dtype=%s)" % (list(v.shape), v.dtype)
        if isa(v, torch.dtype) or isa(v, torch.device):
            return str(v)
    return None


def _json_default(o: Any) -> str:
    return short(o)


# One encoder for every call (json.dumps with options builds a new one each time: half the cost of a column's facts).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=_json_default)


def dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


def size_of(obj: Any) -> int:
    try:
        return len(dumps(obj))
    except Exception:
        return 1 << 30
