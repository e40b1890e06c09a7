"""Fork sandbox, kernel side: miniature runs (a long cell run on row subsets of the large data it reads, or with
its `for` loops bounded to their first iterations).

In the confined child, before the cell runs, the large objects the cell reads by name (DataFrames, Series,
numpy arrays, tensors, scipy sparse matrices, torch Datasets and DataLoaders, Hugging Face Datasets; also one
level inside dicts, lists and tuples) are replaced in the child's namespace by row subsets:
- objects are grouped by their first dimension; the same positions are kept for every object of a group, so
  X and y (or a DataLoader over X) stay aligned;
- a group is shrunk when it has at least `min_rows` rows and at least `relative` times the rows of the largest
  group (small lookup tables next to a large table stay whole);
- kept: every row needed to keep each column's NaN (a few rows) and every class or category of low-cardinality
  columns (one row each), then random rows (fixed seed) up to `fraction` of the group, at least `floor_rows`;
  the count keeps the original remainder modulo the batch size (a DataLoader's, else 64) so the last batch
  of a loop has the same size as in the full run;
- types, index labels, dtypes and DataLoader settings are kept (`iloc`, fancy indexing, a new DataLoader with
  the same arguments over the shrunk dataset).
Objects nothing can shrink faithfully (iterable datasets, custom samplers, parameters) are left whole.

Shrinking inside the user's kernel (the transplant export, kernel/export.py) passes `check`: called between
objects, columns and chunks of `_SHRINK_CHUNK` rows (never inside a library call, never with a user object), it raises
`ShrinkStopped` to stop at once (a request waits for the kernel, the export's kernel-time cap is reached). The
fork path's child passes none.

`artefact(exc)` then says whether an exception may be an artefact of the smaller data (sample/split/neighbour/
component counts, labels dropped from the subset, shapes that mention the kept or original row counts,
stratification, empty results): such a run is inconclusive, never a crash.
A loop miniature (`spec["loops"]` = n, `spec["loop_ms"]` = a time slice, `spec["rows"]` False: the data stay
whole) is said by a `loop` entry of what was kept; in the process that runs the cell (the fork's child, the
transplant worker), `arm_loops` gives the rewrite of every `for` and `while` statement of the cell (those in functions and
classes it defines included; comprehensions and `async for` are left alone) to go through `__crane_loop__` /
`__crane_while__`, helpers compiled here as user-level code (their globals a fresh dict: no CRANE object is handed
to the cell; they read no frames, which the portable guard refuses). `bound_earlier` does the same, in that
process's copy only, for the functions and methods earlier cells defined: each one's source (the line cache in the
fork's child; the copied `_ih` in the transplant worker) is accepted only when it compiles to the very bytecode the
function has, and the function's `__code__` becomes the bounded compile (same file, lines and free variables; the
user's kernel never runs any of this). Each loop runs whole while it is quick: it is cut only once it has run n
iterations AND the time slice (a loop over a few columns finishes; a training loop stops after its first batches);
for `for`, the item it pulled last is the full run's next one (a failure there is the full run's too) and a cut
`range` still runs its last item (the last epoch, the last partial batch); a cut `while` simply ends (its test was
evaluated, and true, as in the full run); a cut loop's `else` is skipped (it did not end as the full run's would:
an `else: raise ...` after a search is not the full run's path); each cut is recorded. The rule of what such a run
may conclude (`loop_note`, `_loop_artefact`): an exception raised before any loop was cut is on the full run's
own path (certain, and the verdict's reason says so); one raised after a cut is the cell's crash only where the skipped
iterations cannot explain it (not a missing or None value, an index, a count, an empty result, an assert: those
make the run inconclusive), and is labelled a miniature crash; a clean run is a miniature's clean run, as for rows.
Comprehensions and generator expressions are not bounded: their iterations build one value the rest of the cell
reads whole (a cut list is a shorter result, an artefact rather than the full run's path), and they are rarely
where a training loop's time goes.
Standard library only (pandas/numpy/torch are used only when the kernel already imported them).
"""

from __future__ import annotations
import __future__

import copy
import math
import random
import re
import sys
from collections.abc import Callable
from typing import Any

_LOW_CARDINALITY = 50
_SHRINK_CHUNK = 1 << 19  # rows of one column looked at between two checks
_NAN_ROWS = 2
_MAX_COLUMNS = 200
_REGISTRY: dict = {"objects": []}  # child only: (name, kind, original, new, n, k) of what was replaced
# The transplant export's gate (kernel/export `_shrink`), set only while it shrinks in the user's kernel: an object
# it does not pass (not proven, or of a class the notebook defined or patched) is never looked into, sized or taken
# from; types are compared through the classes' own `__mro__` descriptor (no `isinstance`, which reads `__class__`)
_GATE: list = []
_SYS_MODULES = sys.modules  # bound at install
_MRO = type.__dict__["__mro__"]
_MODULE = type(sys)
_DICT_OF = object.__getattribute__
_COPY, _CEIL, _RANDOM = copy.copy, math.ceil, random.Random


# -- the cell's trees, never through `ast`'s Python-level names (issue 41) ------------------------------------
# What a loop miniature parses, walks, builds and compiles: trees the C parser makes (`compile(..., PyCF_ONLY_AST)`,
# `ast.parse`'s own call), node types taken from one such tree when this module is made (their types are the
# interpreter's own, whatever a module attribute says), and walks, locations and the rewrite written here. `ast.parse`,
# `ast.Module`, `ast.NodeTransformer`, `ast.walk`, `ast.copy_location` and `_ast`'s names are all rebindable by a
# notebook; IPython's own path never calls most of them, so a patch of one changed what the miniature ran and not what
# the kernel runs (`ast.NodeTransformer.visit` made to return an empty module: a raising cell's miniature came back
# `no-crash`). The node classes themselves are mutable heap types: a class a cell changed (a property, an `__init__`,
# a base of its own: `_N_PLAIN`) could read CRANE's rewritten nodes differently from the kernel's, so a tree with
# any such class in it is left unbounded (a full run, the kernel's own path).
_N_ONLY_AST = 0x0400  # PyCF_ONLY_AST (CPython's fixed value, Include/cpython/compile.h)
_N_SAMPLE = compile(
    "async def f():\n    async for a in b:\n        await c\n    yield\n"
    "def g():\n    yield from z\n"
    "class C:\n    pass\n"
    "for x in y:\n    break\n"
    "while not t[0]:\n    return\n"
    "x = [f(k=1)]\n"
    "if a:\n    pass\n"
    "lambda: 0\n",
    "<crane>", "exec", _N_ONLY_AST, dont_inherit=True)
_N_MODULE = type(_N_SAMPLE)
_N_ASYNC_DEF = type(_N_SAMPLE.body[0])
_N_ASYNC_FOR = type(_N_SAMPLE.body[0].body[0])
_N_AWAIT = type(_N_SAMPLE.body[0].body[0].body[0].value)
_N_YIELD = type(_N_SAMPLE.body[0].body[1].value)
_N_DEF = type(_N_SAMPLE.body[1])
_N_YIELD_FROM = type(_N_SAMPLE.body[1].body[0].value)
_N_CLASS = type(_N_SAMPLE.body[2])
_N_FOR = type(_N_SAMPLE.body[3])
_N_BREAK = type(_N_SAMPLE.body[3].body[0])
_N_WHILE = type(_N_SAMPLE.body[4])
_N_UNARY = type(_N_SAMPLE.body[4].test)
_N_NOT = type(_N_SAMPLE.body[4].test.op)
_N_SUBSCRIPT = type(_N_SAMPLE.body[4].test.operand)
_N_NAME = type(_N_SAMPLE.body[4].test.operand.value)
_N_LOAD = type(_N_SAMPLE.body[4].test.operand.value.ctx)
_N_CONSTANT = type(_N_SAMPLE.body[4].test.operand.slice)
_N_RETURN = type(_N_SAMPLE.body[4].body[0])
_N_ASSIGN = type(_N_SAMPLE.body[5])
_N_STORE = type(_N_SAMPLE.body[5].targets[0].ctx)
_N_LIST = type(_N_SAMPLE.body[5].value)
_N_CALL = type(_N_SAMPLE.body[5].value.elts[0])
_N_KEYWORD = type(_N_SAMPLE.body[5].value.elts[0].keywords[0])
_N_IF = type(_N_SAMPLE.body[6])
_N_LAMBDA = type(_N_SAMPLE.body[7].value)
_N_TUPLE = type(compile("a, b", "<crane>", "eval", _N_ONLY_AST, dont_inherit=True).body)
_N_USUB = type(compile("-1", "<crane>", "eval", _N_ONLY_AST, dont_inherit=True).body.op)
del _N_SAMPLE
_N_TYPE_DICT = type.__dict__["__dict__"].__get__  # a class's own namespace (no metaclass's `__dict__` asked)
_N_AST = _MRO.__get__(_N_MODULE, type)[-2]  # the base of every node type (`_ast.AST`)
_N_DESCRIPTOR = type(type.__dict__["__dict__"])  # (getset_descriptor: a node class's `__dict__`, `__weakref__`)
_N_PLAIN = (type(None), str, tuple, dict, int)  # what a node class's namespace holds besides the base's C methods
# the deprecated aliases the `ast` module itself puts on node classes when it is imported (`Constant.n`, `Constant.s`,
# `Tuple.dims`): no node type has a field or attribute of these names, so neither `compile` nor CRANE reads them
_N_ALIASES = frozenset(("n", "s", "dims"))
# the base's own methods (`__init__`, `__getattribute__`, `__setattr__`, `__reduce__`, `__new__`...), C functions
_N_AST_OWN = {name: v for name, v in _N_TYPE_DICT(_N_AST).items()
              if type(v) in (type(object.__init__), type(object.__dir__), type(object.__new__))}
_N_LOCATION = ("lineno", "col_offset", "end_lineno", "end_col_offset")


class _TreeTampered(Exception):
    """A node class of the tree holds what a cell put there (`_tree_pristine`)."""


def _tree_pristine(t: Any, seen: dict) -> bool:
    """`t` (a node's type) and each class above it hold only what the interpreter made them with: plain values
    (`_fields`, docs, defaults), their `__dict__`/`__weakref__` slots, the base's own C methods and `ast`'s deprecated
    aliases (`_N_ALIASES`); no function, property or other object a cell can have put there (what compiling or
    building a node would then run).
    `seen`: the answers so far (by the type's id)."""
    key = id(t)
    got = seen.get(key)
    if got is not None:
        return got
    mro = _mini_mro(t)
    ok = len(mro) >= 2 and mro[-2] is _N_AST and mro[-1] is object
    for k in mro[:-1] if ok else ():
        for name, v in list(_N_TYPE_DICT(k).items()):
            kind = type(v)
            if kind in _N_PLAIN or (kind is _N_DESCRIPTOR and name in ("__dict__", "__weakref__")) \
                    or name in _N_ALIASES:
                continue
            if k is _N_AST and _N_AST_OWN.get(name) is v:
                continue
            ok = False
    seen[key] = ok
    return ok


_N_IS_NODE: dict = {}  # type -> whether it is a node type (types hash and compare by identity: `type`'s own)


def _is_node(x: Any) -> bool:
    t = type(x)
    got = _N_IS_NODE.get(t)
    if got is None:
        got = _N_IS_NODE[t] = any(k is _N_AST for k in _mini_mro(t))
    return got


def _tree_fields(node: Any, names: str = "_fields") -> tuple:
    got = getattr(type(node), names, ())
    return got if type(got) is tuple else ()


def _tree_children(node: Any) -> list:
    out: list = []
    for field in _tree_fields(node):
        v = getattr(node, field, None) if type(field) is str else None
        if type(v) is list:
            out.extend(x for x in v if _is_node(x))
        elif _is_node(v):
            out.append(v)
    return out


def _tree_walk(node: Any, seen: dict | None = None) -> list:
    """Every node of `node`'s tree (`ast.walk`'s order); `_TreeTampered` when a node's class is not pristine (checked
    before any field of it is read)."""
    seen = {} if seen is None else seen
    out: list = [node]
    i = 0
    while i < len(out):
        n = out[i]
        i += 1
        if not _tree_pristine(type(n), seen):
            raise _TreeTampered(f"the node class {type.__dict__['__name__'].__get__(type(n))} was changed")
        out.extend(_tree_children(n))
    return out


def _tree_parse(text: str, mode: str = "exec") -> Any:
    """`text`'s tree as the C parser makes it (a SyntaxError raised as `ast.parse`'s)."""
    return compile(text, "<unknown>", mode, _N_ONLY_AST, dont_inherit=True)


def _tree_located(new: Any, old: Any = None) -> Any:
    """`ast.copy_location(new, old)` (given `old`) then `ast.fix_missing_locations(new)`: `new` takes `old`'s place in
    the source, and every node under it without one takes its parent's."""
    if old is not None and "lineno" in _tree_fields(new, "_attributes"):
        for attr in _N_LOCATION:
            value = getattr(old, attr, None)
            if value is not None:
                setattr(new, attr, value)
    todo = [(new, (1, 0, 1, 0))]
    while todo:
        n, loc = todo.pop()
        if "lineno" in _tree_fields(n, "_attributes"):
            here = []
            for attr, parent in zip(_N_LOCATION, loc, strict=True):
                value = getattr(n, attr, None)
                if value is None:
                    setattr(n, attr, parent)
                    value = parent
                here.append(value)
            loc = (here[0], here[1], here[2], here[3])
        todo.extend((c, loc) for c in _tree_children(n))
    return new


def _tree_literal(text: str) -> Any:
    """`ast.literal_eval` of what a pandas `KeyError` lists: constants, signed numbers, lists and tuples of them;
    ValueError for anything else."""
    tree = _tree_parse(text.strip(), "eval")
    _tree_walk(tree)
    return _tree_value(tree.body)


def _tree_value(node: Any) -> Any:
    kind = type(node)
    if kind is _N_CONSTANT:
        return node.value
    if kind is _N_LIST or kind is _N_TUPLE:
        values = [_tree_value(elt) for elt in node.elts]
        return values if kind is _N_LIST else tuple(values)
    if kind is _N_UNARY and type(node.op) is _N_USUB and type(node.operand) is _N_CONSTANT \
            and type(node.operand.value) in (int, float, complex):
        return -node.operand.value
    raise ValueError("not a literal")


class ShrinkStopped(Exception):
    """Raised by a shrink's `check` to stop it (the reason is its message)."""


def _shrink_check(check: Any) -> None:
    if check is not None:
        check()


def _mods() -> tuple[Any, Any, Any, Any]:
    return _mod("numpy"), _mod("pandas"), _mod("torch"), _mod("torch.utils.data")


def _mod(name: str) -> Any:
    m = dict.get(_SYS_MODULES, name)
    return m if type(m) is _MODULE else None


def _cls(mod: Any, name: str) -> Any:
    """A class of a plain module, read from its namespace (None if it is not a class)."""
    if mod is None:
        return None
    v = dict.get(_DICT_OF(mod, "__dict__"), name)
    return v if any(k is type for k in _mini_mro(type(v))) else None


def _isa(obj: Any, cls: Any) -> bool:
    return cls is not None and any(k is cls for k in _mini_mro(type(obj)))


def _mini_mro(t: Any) -> tuple:
    """`t.__mro__` from the C slot; () for a static type never readied (f2py's `fortran`: the slot is empty)."""
    mro = _MRO.__get__(t, type)
    return mro if type(mro) is tuple else ()


def _gated(obj: Any) -> bool:
    return not _GATE or bool(_GATE[0](obj))


def cell_names(shell: Any, source: str) -> list[str]:
    """Names the cell reads (after IPython's transforms), in order of first use."""
    try:
        text = shell.transform_cell(source) if shell is not None else source
        nodes = _tree_walk(_tree_parse(text))
    except Exception:
        return []
    out: list[str] = []
    for node in nodes:
        if type(node) is _N_NAME and type(node.ctx) is _N_LOAD and type(node.id) is str and node.id not in out:
            out.append(node.id)
    return out


def _kind(obj: Any) -> tuple[str, int] | None:
    """(kind, rows) for an object a miniature run can shrink, else None."""
    np, pd, torch, tud = _mods()
    if not _gated(obj):
        return None
    try:
        for name in ("DataFrame", "Series"):
            if _isa(obj, _cls(pd, name)):
                return name, len(obj)
        if _isa(obj, _cls(np, "ndarray")):
            return ("ndarray", int(obj.shape[0])) if obj.ndim >= 1 else None
        if _isa(obj, _cls(torch, "Tensor")):
            if obj.dim() < 1 or obj.requires_grad or _isa(obj, _cls(_mod("torch.nn.parameter"), "Parameter")) \
                    or obj.device.type != "cpu":
                return None
            return "Tensor", int(obj.shape[0])
        if _isa(obj, _cls(tud, "DataLoader")):
            inner = _dataset_kind(obj.dataset)
            return ("DataLoader", inner[1]) if inner and obj.batch_size is not None else None
        if _isa(obj, _cls(tud, "Dataset")):
            return _dataset_kind(obj)
        if _isa(obj, _cls(_mod("scipy.sparse._base"), "_spbase")) and obj.ndim == 2:
            return "sparse", int(obj.shape[0])
        if _isa(obj, _cls(_mod("datasets"), "Dataset")):
            return "HFDataset", len(obj)
    except Exception:
        return None
    return None


def _dataset_kind(ds: Any) -> tuple[str, int] | None:
    _, _, _, tud = _mods()
    if tud is None or not _gated(ds) or _isa(ds, _cls(tud, "IterableDataset")):
        return None
    try:
        n = len(ds)
    except Exception:
        return None
    if _isa(ds, _cls(tud, "TensorDataset")):
        return "TensorDataset", n
    if _isa(ds, _cls(tud, "Subset")):
        return "Subset", n
    fields = [v for v in vars(ds).values() if _sized(v) == n] if hasattr(ds, "__dict__") else []
    return ("Dataset", n) if fields else None


def _sized(v: Any) -> int | None:
    if type(v) is list or type(v) is tuple:
        return len(v)
    k = _kind(v)
    return k[1] if k and k[0] not in ("DataLoader",) else None


# -- which rows must stay ------------------------------------------------------------------------------------
def _values_required(values: Any, req: set, check: Any = None) -> None:
    """A 1-D column: a few NaN rows, and one row per class when it has few distinct values (a sample of the
    column tells high-cardinality columns apart cheaply). Long columns are read in chunks of `_SHRINK_CHUNK` rows,
    `check` called between them (the rows found are the same as in one pass)."""
    np, pd, _, _ = _mods()
    try:
        n = len(values)
        spans = [(s, min(n, s + _SHRINK_CHUNK)) for s in range(0, n, _SHRINK_CHUNK)] or [(0, 0)]
        if values.dtype.kind in "fc" or values.dtype.kind in "mM" or pd is None:
            if values.dtype.kind in "fc" or pd is not None:
                _first_missing(values, spans, np.isnan if values.dtype.kind in "fc" else pd.isna, req, check)
            return
        sample = values if n <= 5000 else values[np.linspace(0, n - 1, 5000).astype(np.int64)]
        if len(pd.unique(sample)) > _LOW_CARDINALITY:
            _first_missing(values, spans, pd.isna, req, check)
            return
        rows: list = []  # each chunk's first row of each of its classes (missing included): the column's
        for a, b in spans:  # first row of each class is among them
            _shrink_check(check)
            codes, uniques = pd.factorize(values[a:b])
            if len(uniques) > _LOW_CARDINALITY:
                rows = []
                break
            _shrink_check(check)
            _, first = np.unique(codes, return_index=True)
            rows.extend(a + int(i) for i in first)
        codes, uniques = pd.factorize(values[np.asarray(rows, dtype=np.int64)]) if rows else (None, ())
        if rows and len(uniques) <= _LOW_CARDINALITY:
            _, first = np.unique(codes, return_index=True)
            req.update(rows[int(i)] for i in first)  # code -1 (missing) included
        else:
            _first_missing(values, spans, pd.isna, req, check)
    except ShrinkStopped:
        raise
    except Exception:
        pass


def _first_missing(values: Any, spans: list, missing: Callable[[Any], Any], req: set, check: Any) -> None:
    """The first `_NAN_ROWS` missing rows of a column, chunk by chunk."""
    np: Any = dict.get(_SYS_MODULES, "numpy")  # (never a `sys.modules` the notebook rebound)
    found = 0
    for a, b in spans:
        _shrink_check(check)
        rows = np.flatnonzero(missing(values[a:b]))[:_NAN_ROWS - found]
        req.update(a + int(i) for i in rows)
        found += len(rows)
        if found >= _NAN_ROWS:
            return


def _required(obj: Any, kind: str, req: set, check: Any = None) -> None:
    np, pd, torch, _ = _mods()
    try:
        if kind == "DataFrame":
            for j in range(min(obj.shape[1], _MAX_COLUMNS)):
                _shrink_check(check)
                _values_required(obj.iloc[:, j].to_numpy(), req, check)
        elif kind == "Series":
            _values_required(obj.to_numpy(), req, check)
        elif kind in ("ndarray", "Tensor"):
            arr = obj.detach().numpy() if kind == "Tensor" else obj
            if arr.ndim == 1:
                _values_required(arr, req, check)
            elif arr.dtype.kind == "f" and arr.size <= 50_000_000:
                flat = arr.reshape(arr.shape[0], -1)
                step = max(1, (_SHRINK_CHUNK * 8) // max(1, flat.shape[1]))  # about 4M values between two checks
                found = 0
                for a in range(0, flat.shape[0], step):
                    _shrink_check(check)
                    rows = np.flatnonzero(np.isnan(flat[a:a + step]).any(axis=1))[:_NAN_ROWS - found]
                    req.update(a + int(i) for i in rows)
                    found += len(rows)
                    if found >= _NAN_ROWS:
                        break
        elif kind == "TensorDataset":
            for t in obj.tensors:
                _shrink_check(check)
                _required(t, "Tensor", req, check)
        elif kind == "Subset":
            pass  # positions index the subset: its dataset's classes cannot be read without loading it
        elif kind == "Dataset":
            n = len(obj)
            for v in vars(obj).values():
                k = _kind(v)
                if k and k[1] == n and k[0] not in ("DataLoader", "Dataset"):
                    _shrink_check(check)
                    _required(v, k[0], req, check)
        elif kind == "DataLoader":
            inner = _dataset_kind(obj.dataset)
            if inner:
                _required(obj.dataset, inner[0], req, check)
    except ShrinkStopped:
        raise
    except Exception:
        pass


# -- taking rows ---------------------------------------------------------------------------------------------
def _distinct(np: Any, gen: Any, n: int, m: int, req: Any) -> Any:
    """The rows `req` (a sorted int64 array of distinct row numbers) and `m` others of range(n) drawn uniformly
    at random, sorted in one int64 array, chunk by chunk (`_SHRINK_CHUNK` rows: how many a chunk gives is
    hypergeometric, which rows numpy's `choice` within it): the kernel holds the answer and one chunk's rows.
    (numpy's `choice(n, m, replace=False)` permutes all `n` once `m` > n / 50: 8 bytes a row of the whole object
    in the user's kernel, then a sorted copy and a Python list of the rows kept; a 40 MB uint8 array shrunk
    under a 16 MiB copy limit took the kernel 0.9 GB higher.)"""
    free = n - len(req)  # rows not required, in this chunk and after
    m = max(0, min(m, free))
    out = np.empty(m + len(req), dtype=np.int64)
    at = 0
    for a in range(0, n, _SHRINK_CHUNK):
        b = min(n, a + _SHRINK_CHUNK)
        lo, hi = (int(x) for x in np.searchsorted(req, [a, b]))
        if m <= 0 and hi == lo:
            if lo == len(req):
                break
            continue
        rows = np.arange(a, b, dtype=np.int64)
        if hi > lo:
            rows = np.setdiff1d(rows, req[lo:hi], assume_unique=True)
        free -= len(rows)
        take = 0
        if m > 0 and len(rows):
            take = min(m, len(rows)) if free <= 0 else int(gen.hypergeometric(len(rows), free, m))
        picked = gen.choice(rows, size=take, replace=False) if take else rows[:0]
        part = np.concatenate([req[lo:hi], picked])
        part.sort()
        out[at:at + len(part)] = part
        at += len(part)
        m -= take
    return out[:at]


def _take(obj: Any, kind: str, pos: Any, memo: dict) -> Any:
    if id(obj) in memo:
        return memo[id(obj)]
    np, pd, torch, tud = _mods()
    idx = np.asarray(pos, dtype=np.int64) if np is not None else pos
    if kind in ("DataFrame", "Series"):
        new = obj.iloc[idx]
    elif kind in ("ndarray", "sparse"):
        new = obj[idx]
    elif kind == "Tensor":
        new = obj[torch.as_tensor(idx)]
    elif kind == "HFDataset":
        new = obj.select([int(i) for i in pos])
    elif kind == "TensorDataset":
        new = type(obj)(*[_take(t, "Tensor", pos, memo) for t in obj.tensors])
    elif kind == "Subset":
        new = _COPY(obj)
        new.indices = [obj.indices[i] for i in pos]
    elif kind == "Dataset":
        n = len(obj)
        new = _COPY(obj)
        for attr, v in vars(obj).items():
            if isinstance(v, (list, tuple)) and len(v) == n:
                setattr(new, attr, type(v)(v[i] for i in pos) if isinstance(v, list) else tuple(v[i] for i in pos))
                continue
            k = _kind(v)
            if k and k[1] == n and k[0] not in ("DataLoader",):
                setattr(new, attr, _take(v, k[0], pos, memo))
        if len(new) != len(pos):
            raise ValueError("the dataset's length does not follow its fields")
    elif kind == "DataLoader":
        inner = _dataset_kind(obj.dataset)
        new = _rebuild_loader(obj, _take(obj.dataset, inner[0], pos, memo))  # type: ignore[index]
    else:
        raise TypeError(kind)
    memo[id(obj)] = new
    return new


def _rebuild_loader(dl: Any, dataset: Any) -> Any:
    """A DataLoader with the same arguments over the shrunk dataset (plain random/sequential sampling only)."""
    _, _, _, tud = _mods()
    sampler = dl.sampler
    if isinstance(sampler, tud.RandomSampler):
        if sampler.replacement or getattr(sampler, "_num_samples", None) is not None:
            raise ValueError("a random sampler with replacement or a sample count")
        shuffle = True
    elif isinstance(sampler, tud.SequentialSampler):
        shuffle = False
    else:
        raise ValueError("a custom sampler")
    if type(dl.batch_sampler) is not tud.BatchSampler:
        raise ValueError("a custom batch sampler")
    kw = dict(batch_size=dl.batch_size, shuffle=shuffle, num_workers=dl.num_workers, collate_fn=dl.collate_fn,
              pin_memory=dl.pin_memory, drop_last=dl.drop_last, timeout=dl.timeout, worker_init_fn=dl.worker_init_fn,
              multiprocessing_context=dl.multiprocessing_context, generator=dl.generator,
              persistent_workers=dl.persistent_workers)
    if dl.num_workers > 0:
        kw["prefetch_factor"] = dl.prefetch_factor
    try:
        return type(dl)(dataset, **kw)
    except TypeError:
        return tud.DataLoader(dataset, **kw)


def _rows_to_keep(n: int, fraction: float, floor_rows: int, modulus: int, required: int) -> int:
    """About `fraction` of `n` rows (at least `floor_rows` and the `required` ones), rounded so that the count
    keeps `n`'s remainder modulo the batch size: whole batches plus the same last batch as the full run (the
    last batch alone when the floor allows and it holds a few rows)."""
    k = max(floor_rows, int(_CEIL(fraction * n)), required)
    if modulus > 1 and n > 2 * modulus:
        rem = n % modulus
        fewest = 0 if (floor_rows <= rem and rem >= 8) else 1
        m = max(fewest, _CEIL((k - rem) / modulus))
        k = m * modulus + rem
    return min(k, n)


def _positions(n: int, k: int, required: set, rng: random.Random) -> Any:
    """`k` row numbers of `n`, the `required` ones among them, sorted: a list, or for millions of rows an int64
    array (a Python list of millions of ints is 36 bytes a row in the kernel)."""
    chosen = set(required)
    np = dict.get(_SYS_MODULES, "numpy")
    if len(chosen) < k and np is not None and n > 100_000:  # millions of rows: numpy's sampling (a local
        gen = np.random.default_rng(rng.getrandbits(63))  # generator seeded from ours: no global RNG state used)
        req = np.sort(np.fromiter(chosen, dtype=np.int64, count=len(chosen)))
        return _distinct(np, gen, n, k - len(chosen), req)
    if len(chosen) < k:
        for p in rng.sample(range(n), min(n, k + len(chosen))):
            if len(chosen) >= k:
                break
            chosen.add(p)
    return sorted(chosen)


def _candidates(ns: dict, names: list[str]) -> list[tuple[tuple, object, str, int]]:
    """(path, getter-free description, object, kind, rows) of shrinkable objects the cell reads."""
    out: list[tuple[tuple, object, str, int]] = []
    for name in names:
        if name not in ns or name.startswith("_"):
            continue
        obj = ns[name]
        k = _kind(obj)
        if k:
            out.append(((name,), obj, k[0], k[1]))
            continue
        items = []
        if not _gated(obj):
            continue
        if isinstance(obj, dict) and len(obj) <= 32:
            items = [(key, v) for key, v in dict.items(obj) if type(key) is str or type(key) is int]
        elif isinstance(obj, (list, tuple)) and len(obj) <= 16:
            items = list(enumerate(list.__iter__(obj) if isinstance(obj, list) else tuple.__iter__(obj)))
        for key, v in items:
            k = _kind(v)
            if k:
                out.append(((name, key), v, k[0], k[1]))
    return out


def _label(path: tuple) -> str:
    return path[0] if len(path) == 1 else f"{path[0]}[{path[1]!r}]"


def shrink_namespace(ns: dict, names: list[str], spec: dict, check: Any = None) -> list[dict]:
    """Replace the large objects the cell reads (see the module docstring); returns what was kept. `check`
    (see the module docstring) may stop it by raising `ShrinkStopped`: `ns` is then left as it was."""
    loops = loop_kept(spec)
    if spec.get("rows") is False:  # a loop miniature alone: the data stay whole
        return loops
    fraction = float(spec.get("fraction", 0.05))
    floor_rows = int(spec.get("floor_rows", 64))
    min_rows = int(spec.get("min_rows", 2000))
    relative = float(spec.get("relative", 0.05))
    rng = _RANDOM(int(spec.get("seed", 0)))
    cands = _candidates(ns, names)
    if not cands:
        return loops
    n_max = max(c[3] for c in cands)
    groups: dict[int, list] = {}
    for c in cands:
        if c[3] >= min_rows and c[3] >= relative * n_max:
            groups.setdefault(c[3], []).append(c)
    memo: dict = {}
    kept: list[dict] = []
    replaced: dict[tuple, object] = {}
    for n, members in sorted(groups.items(), reverse=True):
        req: set = set()
        modulus = 64  # the usual batch sizes 1..64 keep their last batch; a DataLoader says its own
        for _path, obj, kind, _ in members:
            _shrink_check(check)
            _required(obj, kind, req, check)
            if kind == "DataLoader" and obj.batch_size:
                modulus = int(obj.batch_size)
        k = _rows_to_keep(n, fraction, floor_rows, modulus, len(req))
        if k >= 0.8 * n:
            continue
        _shrink_check(check)
        pos = _positions(n, k, req, rng)
        for path, obj, kind, _ in members:
            _shrink_check(check)
            try:
                new = _take(obj, kind, pos, memo)
            except Exception:
                continue  # left whole
            replaced[path] = new
            _REGISTRY["objects"].append((_label(path), kind, obj, new, n, len(pos)))
            kept.append({"name": _label(path), "kind": kind, "rows": len(pos), "of": n})
    containers: dict[str, object] = {}
    for path, new in replaced.items():
        name = path[0]
        if len(path) == 1:
            ns[name] = new
            continue
        holder = containers.get(name)
        if holder is None:
            orig = ns[name]
            holder = dict(orig) if isinstance(orig, dict) and type(orig) is not dict else _COPY(orig)
            if isinstance(orig, tuple):
                holder = list(orig)
            containers[name] = holder
        holder[path[1]] = new  # type: ignore[index]
    for name, holder in containers.items():
        orig = ns[name]
        if isinstance(orig, tuple):
            holder = orig._make(holder) if hasattr(orig, "_make") else tuple(holder)  # type: ignore
        ns[name] = holder
    return kept + loops


# -- artefacts -----------------------------------------------------------------------------------------------
_ARTEFACT_TEXT = re.compile(
    r"equal division|of size 1\b|size-1|single element|can only convert an array|n_samples|n_splits|n_neighbors|n_components|n_clusters|perplexity|number of (?:samples|members|classes|splits|"
    r"folds|labels)|least populated class|too few|only one class|only 1 (?:class|member)|contains only one class|"
    r"at least \d+ (?:samples|members|classes)|found array with 0|zero-size|0 sample|empty|unseen|unknown categor|"
    r"not in (?:the )?(?:training|fitted)|inconsistent numbers of samples|length mismatch|length of values|"
    r"does not match length|could not be broadcast|cannot reshape|is invalid for input of size|size mismatch|"
    r"expected more than 1 value per channel|larger sample than population|sample larger than population|"
    r"cannot take a larger sample|singular matrix|not positive definite|lapack|stratif|test_size|train_size|"
    r"division by zero|divide by zero|no objects to concatenate|positional indexer",
    re.I,
)
# exceptions whose outcome depends on how many rows there are or which ones were kept: an `assert` about the
# data (its length, a total, a lookup's result) included
_ALWAYS_ARTEFACT = ("ZeroDivisionError", "StopIteration", "LinAlgError", "FloatingPointError", "AssertionError")


def _sizes() -> set[int]:
    out = set()
    for obj in _REGISTRY["objects"]:
        out.update(obj[4:6])
    return out


def _dropped_label(key: Any) -> bool:
    """`key` (or any element of a list-like key) is a row label or a value the subset dropped."""
    np, pd, _, _ = _mods()
    keys = key if isinstance(key, (list, tuple)) else [key]
    if isinstance(key, str) and key.startswith("[") and key.endswith("not in index"):
        try:
            keys = _tree_literal(key[: key.rindex("]") + 1])
        except Exception:
            keys = []
    for _name, kind, orig, new, _n, _k in _REGISTRY["objects"]:
        if kind not in ("DataFrame", "Series"):
            continue
        for kk in keys[:20]:
            try:
                if kk in orig.index and kk not in new.index:
                    return True
                cols = [orig] if kind == "Series" else [orig[c] for c in list(orig.columns)[:_MAX_COLUMNS]
                                                         if orig[c].dtype.kind in "OiubU"]
                newcols = [new] if kind == "Series" else [new[c] for c in list(orig.columns)[:_MAX_COLUMNS]
                                                           if orig[c].dtype.kind in "OiubU"]
                for oc, nc in zip(cols, newcols, strict=False):
                    if bool((oc == kk).any()) and not bool((nc == kk).any()):
                        return True
            except Exception:
                continue
    return False


def artefact(exc: BaseException | None) -> str | None:
    """Why `exc`, raised in a miniature run, may come from the smaller data or the iterations a loop miniature
    skipped (then the run is inconclusive)."""
    why = _loop_artefact(exc)
    if why or not _REGISTRY["objects"]:
        return why
    chain: list[BaseException] = []
    seen: set[int] = set()
    e = exc
    while e is not None and id(e) not in seen and len(chain) < 10:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    sizes = {s for s in _sizes() if s >= 100}
    for e in chain:
        name = type(e).__name__
        try:
            text = str(e)
        except Exception:
            text = ""
        numbers = {int(x) for x in re.findall(r"\d+", text)}
        if name == "KeyError":
            if _dropped_label(e.args[0] if e.args else None):
                return "a label the miniature's subset dropped"
            continue
        if numbers & sizes:
            return "the message mentions a row count the miniature changed"
        if name in _ALWAYS_ARTEFACT or (name == "IndexError" and not {x for x in numbers if x > 1}):
            return f"{name} on smaller data"
        if _ARTEFACT_TEXT.search(text):
            return "an error about sample, class or shape counts"
    return None


# -- loop miniatures -----------------------------------------------------------------------------------------
# the process that runs the cell only: n, the cuts list the helpers append (where, n, the range's length or -1;
# -2 for an endless `while`; where: the cell's line, or "line L of `f`" for a loop of an earlier cell's function), the functions rebound
_LOOPS: dict = {"n": 0, "ms": 0, "cuts": None, "bounded": 0, "earlier": [], "tampered": False}
_LOOP_NAME = "__crane_loop__"
_WHILE_NAME = "__crane_while__"
_LOOP_FILE = "<crane-sandbox/loops>"  # (frames under this name are left out of the verdict's traceback)
_LOOP_HELPER = """
def __crane_loop__(iterable, line, cut=None):
    n, t0 = _N, _CLOCK()
    last = iterable[-1] if type(iterable) is range and len(iterable) else _NONE
    k = 0
    for item in iterable:
        if k >= n and _CLOCK() - t0 > _SLICE:
            if type(cut) is list and cut:
                cut[0] = True
            if last is not _NONE and item != last:
                _CUTS.append((line, k, len(iterable)))
                yield last
                return
            if last is _NONE:
                _CUTS.append((line, k, -1))
                return
        k += 1
        yield item

def __crane_while__(state, *test, endless=False):
    if not test:
        return [0, _CLOCK(), state, False, endless]
    if type(state) is not list or len(state) != 5:
        _CUTS.append((0, 0, -1))
        return False
    if len(test) == 2:
        return state[3]
    if not test[0]:
        return False
    if state[0] >= _N and _CLOCK() - state[1] > _SLICE:
        _CUTS.append((state[2], state[0], -2 if state[4] else -1))
        state[3] = True
        return False
    state[0] += 1
    return True
"""


def loop_kept(spec: dict) -> list[dict]:
    """What a loop miniature keeps (one `loop` entry: each loop cut after `rows` iterations once it has run `of`
    ms), or nothing."""
    n, ms = spec.get("loops"), spec.get("loop_ms", 0)
    if type(n) is not int or n <= 0 or type(ms) is not int or ms < 0:
        return []
    return [{"name": "loops", "kind": "loop", "rows": n, "of": ms}]


class _LoopBound:
    """`for T in IT:` -> `for T in __crane_loop__(IT, line):` (with an `else`, a flag the cut sets, which skips
    it); `while C:` -> `__crane_wL_C__ = __crane_while__(line)`
    (a fresh count and clock each time the loop starts, in a local of its scope: the helpers read no frames, which
    the portable guard refuses) then `while __crane_while__(__crane_wL_C__, C):` (C evaluated and tested once, as
    before; False once the loop is cut; its `else` then skipped). Same lines; nested loops and function bodies
    too. `where(line)`: what a cut names. `visit` (what IPython's `transform_ast` calls, as on an
    `ast.NodeTransformer`) rewrites a tree in place, with CRANE's own walk and node types (never `ast`'s names);
    a tree with a node class a cell changed is left as it is (`_tree_pristine`: the run is then a full one)."""

    def __init__(self, offset: int, where: Callable[[int], Any] | None = None) -> None:
        self.offset = offset  # the cell's lines IPython's transforms dropped before the code (leading blank lines)
        self.where = where or (lambda line: line + offset)

    def visit(self, node: Any) -> Any:
        try:
            _tree_walk(node)  # every class checked before anything is changed
        except _TreeTampered:
            _LOOPS["tampered"] = True
            return node
        return self._visit(node)

    def _visit(self, node: Any) -> Any:
        kind = type(node)
        if kind is _N_FOR:
            return self.visit_For(node)
        if kind is _N_WHILE:
            return self.visit_While(node)
        return self.generic_visit(node)

    def generic_visit(self, node: Any) -> Any:
        """`ast.NodeTransformer.generic_visit`: each child rewritten (a statement may become several)."""
        for field in _tree_fields(node):
            old = getattr(node, field, None) if type(field) is str else None
            if type(old) is list:
                new: list = []
                for v in old:
                    if _is_node(v):
                        v = self._visit(v)
                        if type(v) is list:
                            new.extend(v)
                            continue
                    new.append(v)
                old[:] = new
            elif _is_node(old):
                setattr(node, field, self._visit(old))
        return node

    def _call(self, name: str, args: list, node: Any) -> Any:
        return _tree_located(_N_CALL(func=_N_NAME(id=name, ctx=_N_LOAD()), args=args, keywords=[]), node)

    def visit_For(self, node: Any) -> Any:
        self.generic_visit(node)
        args = [node.iter, _N_CONSTANT(value=self.where(node.lineno))]
        _LOOPS["bounded"] += 1
        if not node.orelse:
            node.iter = self._call(_LOOP_NAME, args, node.iter)
            return node
        flag = f"__crane_f{node.lineno}_{node.col_offset}__"  # set when this loop is cut: its `else` skipped
        node.iter = self._call(_LOOP_NAME, [*args, _N_NAME(id=flag, ctx=_N_LOAD())], node.iter)
        first = _N_SUBSCRIPT(value=_N_NAME(id=flag, ctx=_N_LOAD()), slice=_N_CONSTANT(value=0), ctx=_N_LOAD())
        guard = _N_IF(test=_N_UNARY(op=_N_NOT(), operand=first), body=node.orelse, orelse=[])
        node.orelse = [_tree_located(guard, node.orelse[0])]
        start = _N_ASSIGN(targets=[_N_NAME(id=flag, ctx=_N_STORE())],
                          value=_N_LIST(elts=[_N_CONSTANT(value=False)], ctx=_N_LOAD()))
        return [_tree_located(start, node), node]

    def visit_While(self, node: Any) -> list:
        endless = _endless(node)  # (before the nested loops are rewritten)
        self.generic_visit(node)
        state = f"__crane_w{node.lineno}_{node.col_offset}__"  # (a local of the loop's scope: re-entry, recursion)
        node.test = self._call(_WHILE_NAME, [_N_NAME(id=state, ctx=_N_LOAD()), node.test], node.test)
        if node.orelse:  # a cut loop did not end as the full run's would: its `else` (often a raise) is skipped
            cut = self._call(_WHILE_NAME, [_N_NAME(id=state, ctx=_N_LOAD()), _N_CONSTANT(value=None),
                                           _N_CONSTANT(value=None)], node)
            guard = _N_IF(test=_N_UNARY(op=_N_NOT(), operand=cut), body=node.orelse, orelse=[])
            node.orelse = [_tree_located(guard, node.orelse[0])]
        begin = self._call(_WHILE_NAME, [_N_CONSTANT(value=self.where(node.lineno))], node)
        if endless:
            begin.keywords = [_N_KEYWORD(arg="endless", value=_N_CONSTANT(value=True))]
        start = _N_ASSIGN(targets=[_N_NAME(id=state, ctx=_N_STORE())], value=begin)
        _LOOPS["bounded"] += 1
        return [_tree_located(start, node), node]


def _endless(node: Any) -> bool:
    """A `while` that only an exception can leave: its test a true constant (`while True:`, `while 1:`) and no
    `break` of its own (nor a `return`, a `yield` handing control back) in its body."""
    if not (type(node.test) is _N_CONSTANT and node.test.value):
        return False
    leaves = (_N_RETURN, _N_YIELD, _N_YIELD_FROM, _N_AWAIT)
    todo: list = list(node.body)
    while todo:
        n = todo.pop()
        kind = type(n)
        if kind is _N_BREAK or kind in leaves:
            return False
        if kind in (_N_DEF, _N_ASYNC_DEF, _N_CLASS, _N_LAMBDA):
            continue
        if kind in (_N_FOR, _N_ASYNC_FOR, _N_WHILE):  # their own `break`s are theirs; `else` is ours
            todo.extend(n.orelse)
            todo.extend(x for x in _tree_walk(n) if type(x) in leaves)
            continue
        todo.extend(_tree_children(n))
    return True


def arm_loops(kept: list, shell: Any, offset: int = 0) -> _LoopBound | None:
    """In the process that runs the cell, before it is compiled: a loop miniature's bound put in place (the helpers
    in the cell's namespace; `offset`: the cell's leading lines the transforms dropped, for the lines the cuts name),
    and the loops of functions earlier cells defined bounded in their code objects here (`bound_earlier`). Returns
    the rewrite the cell's tree goes through after IPython's own AST transformers (kernel/run._compile_plan), None
    for another run. It is not put among the shell's `ast_transformers`: with one there, IPython's `transform_ast`
    also calls `ast.fix_missing_locations`, which a kernel with none never calls (a notebook could rebind it to
    change the tree of the miniature alone)."""
    loop = next((k for k in kept if type(k) is dict and k.get("kind") == "loop"), None)
    n, ms = (loop.get("rows"), loop.get("of")) if loop is not None else (0, 0)
    if type(n) is not int or n <= 0 or type(ms) is not int or shell is None:
        return None
    import builtins
    import time
    cuts: list = []
    g: dict = {"__builtins__": builtins, "_N": n, "_SLICE": ms / 1000.0, "_CLOCK": time.perf_counter,
               "_NONE": object(), "_CUTS": cuts}
    exec(compile(_LOOP_HELPER, _LOOP_FILE, "exec"), g)  # noqa: S102 - CRANE's own constant source
    _LOOPS.update(n=n, ms=ms, cuts=cuts, bounded=0, earlier=[], tampered=False)
    shell.user_ns[_LOOP_NAME] = g[_LOOP_NAME]
    shell.user_ns[_WHILE_NAME] = g[_WHILE_NAME]
    try:
        _LOOPS["earlier"] = bound_earlier(shell)
    except Exception:
        _LOOPS["earlier"] = []
    return _LoopBound(offset)


_EARLIER_MAX = 200  # functions looked at


def _notebook_functions(ns: dict) -> list:
    """Functions the notebook defined that the cell's namespace reaches: its values, the methods (static, class,
    property accessors) of the notebook's classes, one `__wrapped__` level under a decorator's wrapper."""
    import types
    out: list = []
    seen: set[int] = set()

    def add(f: Any) -> None:
        for _ in range(3):
            if type(f) is types.FunctionType and id(f) not in seen and f.__module__ == "__main__":
                seen.add(id(f))
                out.append(f)
            f = f.__dict__.get("__wrapped__") if hasattr(f, "__dict__") and type(f.__dict__) is dict else None
            if f is None:
                return

    for name, v in list(dict.items(ns)):
        if type(name) is not str or name.startswith("__crane"):
            continue
        if isinstance(v, type) and v.__dict__.get("__module__") == "__main__":
            for m in list(v.__dict__.values()):
                if isinstance(m, (staticmethod, classmethod)):
                    m = m.__func__
                if isinstance(m, property):
                    for acc in (m.fget, m.fset, m.fdel):
                        add(acc)
                    continue
                add(m)
        else:
            add(v)
        if len(out) >= _EARLIER_MAX:
            break
    return out


def _def_in(tree: Any, qualname: str, first: int) -> list | None:
    """The path of class and function definitions to `qualname` whose first line (decorators included) is
    `first`, or None (a function made in another function's body has `<locals>` in its name: never looked for)."""
    parts = qualname.split(".")
    if "<locals>" in parts:
        return None
    body: list = tree.body
    path: list = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        kinds = (_N_DEF, _N_ASYNC_DEF) if last else (_N_CLASS,)
        found = [d for d in body if type(d) in kinds and d.name == part]
        if last:
            found = [d for d in found if min([d.lineno] + [x.lineno for x in d.decorator_list]) == first]
        if len(found) != 1:
            return None
        path.append(found[0])
        body = found[0].body
    return path


def _code_in(code: Any, name: str, first: int) -> Any:
    """The code object of function `name` on line `first` compiled inside `code` (depth first)."""
    import types
    for c in code.co_consts:
        if type(c) is types.CodeType:
            if c.co_name == name and c.co_firstlineno == first:
                return c
            got = _code_in(c, name, first)
            if got is not None:
                return got
    return None


def _compiled_def(text: str, qualname: str, first: int, filename: str, flags: int, bound: _LoopBound | None) -> Any:
    """The function `qualname` whose first line is `first` in `text`, compiled alone inside its classes (the same
    names, lines and free variables as in its cell; the loops bounded when `bound` is given), from a tree of its own
    (the bounded rewrite changes the tree it is given), or None."""
    path = _def_in(_tree_parse(text), qualname, first)
    if path is None:
        return None
    node = path[-1]
    if bound is not None:
        node = bound.visit(node)
    for outer in reversed(path[:-1]):
        outer.body = [node]
        outer.decorator_list = []
        node = outer
    mod = _tree_located(_N_MODULE(body=[node], type_ignores=[]))
    code = compile(mod, filename, "exec", flags=flags, dont_inherit=True)
    return _code_in(code, qualname.rpartition(".")[2], first)


def _sources_of(shell: Any, filename: str, history: list) -> list[str]:
    """Where an earlier cell's source may be: the line cache (the fork's child has the kernel's), else the inputs
    of the kernel's history (`_ih`, as copied: the transplant worker has no line cache of the kernel's; transformed
    once into `history`)."""
    import linecache
    lines = linecache.getlines(filename)
    if lines:
        return ["".join(lines)]
    if not history:
        hist = dict.get(shell.user_ns, "_ih")
        for raw in reversed(hist[-200:] if type(hist) is list else []):
            if type(raw) is str and "def " in raw:
                try:
                    history.append(shell.transform_cell(raw))
                except Exception:
                    continue
        history.append("")
    return history


def _named(qualname: str) -> Callable[[int], str]:
    """What a cut of a loop in an earlier cell's function names: its line in that cell and the function."""
    return lambda line: f"line {line} of `{qualname}`"


_FUTURE_FLAGS = __future__.annotations.compiler_flag | __future__.barry_as_FLUFL.compiler_flag  # (as compiled)


def bound_earlier(shell: Any) -> list[str]:
    """In the process that runs the cell only: each function an earlier cell defined (`_notebook_functions`) that
    has a `for` or `while` loop gets, in this process's copy of it, the code of its source with the loops bounded
    (its source found by its file, name and first line, and accepted only when it compiles, unbounded, to the very
    code the function has). Returns the names of the functions bounded."""
    done: list[str] = []
    parsed: dict[str, list] = {}
    history: list[str] = []
    for fn in _notebook_functions(shell.user_ns):
        code = fn.__code__
        if code.co_filename.startswith("<crane") or type(fn.__globals__) is not dict:
            continue
        flags = code.co_flags & _FUTURE_FLAGS
        if code.co_filename not in parsed:
            trees = []
            for text in _sources_of(shell, code.co_filename, history):
                try:
                    tree = _tree_parse(text)
                    _tree_walk(tree)  # (a node class a cell changed: no function of this source is bounded)
                except _TreeTampered:
                    _LOOPS["tampered"] = True
                    continue
                except SyntaxError:
                    continue
                trees.append((text, tree))
            parsed[code.co_filename] = trees
        for text, tree in parsed[code.co_filename]:
            path = _def_in(tree, fn.__qualname__, code.co_firstlineno)
            if path is None or not any(type(n) in (_N_FOR, _N_WHILE) for n in _tree_walk(path[-1])):
                continue
            first = min([path[-1].lineno] + [x.lineno for x in path[-1].decorator_list])
            try:
                plain = _compiled_def(text, fn.__qualname__, first, code.co_filename, flags, None)
                if plain is None or plain.co_code != code.co_code or plain.co_names != code.co_names \
                        or plain.co_freevars != code.co_freevars or plain.co_consts != code.co_consts:
                    continue
                new = _compiled_def(text, fn.__qualname__, first, code.co_filename, flags,
                                    _LoopBound(0, _named(fn.__qualname__)))
            except Exception:
                continue
            if new is None or new.co_freevars != code.co_freevars:
                continue
            if fn.__globals__ is not shell.user_ns:  # (a copy's own globals: the worker's unpickled closures)
                for helper in (_LOOP_NAME, _WHILE_NAME):
                    fn.__globals__[helper] = shell.user_ns[helper]
            fn.__code__ = new
            done.append(fn.__qualname__)
            break
    return done


def _loop_cuts() -> list[tuple]:
    """The cuts made so far (the cell can reach the list: whatever is not CRANE's own tuple counts as a cut)."""
    cuts = _LOOPS["cuts"]
    if cuts is None:
        return []
    if type(cuts) is not list:
        return [(0, 0, -1)]
    return [c if type(c) is tuple and len(c) == 3 and type(c[0]) in (int, str) and type(c[1]) is int
            and type(c[2]) is int else (0, 0, -1) for c in list.__iter__(cuts)]


_LOOP_ARTEFACT = ("NameError", "UnboundLocalError", "IndexError", "KeyError")
# fewer items than the full run (a cut generator of batches, a cut loop that collects them)
_LOOP_ARTEFACT_TEXT = re.compile(r"not enough values to unpack|need at least one array|ran out of data|exhausted",
                                 re.I)


def _loop_artefact(exc: BaseException | None) -> str | None:
    """Why `exc`, raised after a loop miniature cut a loop, may come from the iterations it skipped."""
    cuts = _loop_cuts()
    if exc is None or not cuts:
        return None
    lengths = {c[2] for c in cuts if c[2] >= 10}
    e: BaseException | None = exc
    seen: set[int] = set()
    while e is not None and id(e) not in seen and len(seen) < 10:
        seen.add(id(e))
        name = type(e).__name__
        try:
            text = str(e)
        except Exception:
            text = ""
        if name in _ALWAYS_ARTEFACT or name in _LOOP_ARTEFACT:
            return f"{name} after a loop was cut short"
        if "NoneType" in text or "None" in text.split():
            return "a value a skipped iteration would have set"
        if {int(x) for x in re.findall(r"\d+", text)} & lengths:
            return "the message mentions a loop length the miniature changed"
        if _ARTEFACT_TEXT.search(text) or _LOOP_ARTEFACT_TEXT.search(text):
            return "an error about counts, sizes or empty results after a loop was cut short"
        e = e.__cause__ or e.__context__
    return None


def loop_unended() -> str | None:
    """Why a loop miniature's clean run says nothing (the verdict's reason), or None: it cut a `while` that only an
    exception can leave (`_endless`: `while True:` with no `break`; its cut entry's length -2), so the full run either
    never ends or ends raising: a clean run with it cut short is no evidence. A crash is judged as usual."""
    lines = list(dict.fromkeys(str(c[0]) for c in _loop_cuts() if c[2] == -2))
    if not lines:
        return None
    many = len(lines) > 1
    return (f"loop miniature: ran clean until the endless `while` loop{'s' if many else ''} on line"
            f"{'s' if many else ''} {', '.join(lines[:6])} {'were' if many else 'was'} cut short; only an exception "
            "ends such a loop, so the full run either never ends or raises: no verdict (the full run did not finish "
            "in time)")


def loop_note(verdict: str) -> str | None:
    """What a loop miniature's crash or clean run rests on (the verdict's reason), or None for other runs."""
    if not _LOOPS["n"]:
        return None
    n, cuts = _LOOPS["n"], _loop_cuts()
    earlier = [e for e in _LOOPS["earlier"] if type(e) is str][:4]
    bound = (f"each `for` and `while` loop cut after {n} iterations once it had run {_LOOPS['ms'] / 1000:g} s, a "
             "range's last iteration run too")
    if earlier:
        more = len(_LOOPS["earlier"]) - len(earlier)
        bound += ("; so were the loops of the functions earlier cells defined (" + ", ".join(f"`{e}`" for e in earlier)
                  + (f" and {more} more" if more > 0 else "") + "), in this run's copy only")
    if _LOOPS["tampered"] is not False:
        return ("loop miniature: the notebook changed a class of Python's syntax trees that the cell's code is made of, "
                "so no loop was bounded (CRANE's rewrite could be read differently from the kernel's code): this was "
                "a full run")
    if not _LOOPS["bounded"]:
        return "loop miniature: the cell has no `for` or `while` loop to bound, so this was a full run"
    where = list(dict.fromkeys(c[0] for c in cuts if c[0]))[:6]
    own = [str(w) for w in where if type(w) is int]
    parts = ([f"line{'s' if len(own) > 1 else ''} " + ", ".join(own)] if own else []) + [
        str(w) for w in where if type(w) is not int]
    lines = ", ".join(parts) or "?"
    if verdict == "crash" and not cuts:
        return (f"loop miniature ({bound}): raised before any loop was cut short, on the path the full run takes: "
                "certain")
    if verdict == "crash":
        return (f"loop miniature ({bound}): raised after the loops on {lines} were cut short; not certain (the "
                "iterations it skipped do not explain the exception, as far as CRANE can tell)")
    if not cuts:
        return f"loop miniature ({bound}): no loop reached its bound, so this was the full run"
    return f"loop miniature ({bound}): ran clean with the loops on {lines} cut short"
