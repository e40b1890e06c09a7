"""Transplant export, kernel side: the pickling of the proven objects into the run's private directory.

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py is the entry). `dump_state(objs, reducers,
...)` pickles `{name: object}` in ONE pickle (identity and sharing between names survive) with CRANE's private
copy of cloudpickle (`_cloudpickle`: `sys.modules["_crane_cloudpickle"]`, taken once and proven CRANE's) at
protocol 5, straight into `state.pkl` (no in-memory copy), each out-of-band buffer into `buf-N` as the pickler
meets it. Every object is proven (`_Proof.check`) before anything reads it; then `reducers` (an exact type -> a
function of the object returning a reduce tuple, or NotImplemented for cloudpickle's own) is consulted, looked up
only once the type is proven (a metaclass `__hash__` of the notebook's is refused before). The pickler runs in a
thread of its own with a known stack (`_STACK`) under a recursion limit CRANE sets (`_DEPTH`), so a deep
structure is refused, never a C-stack overflow; the kernel's main thread waits, polling the stops
(kernel/stops.py). `_culprit` names the first value that fails alone.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _IO_BASE,
    _LRU_WRAPPER,
    _MODULE_TYPE,
    _MODULES,
    _O_DICT_GET,
    _T_MODULE,
    _T_NAME,
    _allocate_lock,
    _cls_dict,
    _CodeType,
    _FunctionType,
    _getrecursionlimit,
    _join,
    _lru_wrapped,
    _mdict,
    _module,
    _mro,
    _setprofile,
    _setrecursionlimit,
    _settrace,
    _SimpleNamespace,
    _stack_size,
    _start_thread,
    _type_name,
    private_modules,
)
from crane.sandbox.kernel.proof import (  # kernel: strip
    _OWN_REDUCER_MODULES,
    _PICKLING,
    _is_class,
    _library_function,
    _Proof,
    _Refused,
)
from crane.sandbox.kernel.shield import BUILTINS, private_open  # kernel: strip
from crane.sandbox.kernel.stops import _QUEUED, _Control, _materialised, _ndarray, _Stopped  # kernel: strip

_WEAKREF = _mdict(_module("_weakref")).get("ref")  # (the seal's type: kernel/private_module.py)
_STACK = 256 << 20  # the pickler thread's C stack
_DEPTH = 20_000  # the recursion limit while pickling (a deeper structure is refused)


# the opcodes of a value the C pickler writes apart from its frames (64 KiB or more): BINBYTES, BINUNICODE (a 4-byte
# size), BINBYTES8, BINUNICODE8, BYTEARRAY8 (8 bytes); their header ends the pickler's write before the value's data
_APART_HEADS = {0x42: 4, 0x58: 4, 0x8E: 8, 0x8D: 8, 0x96: 8}
_APART_MIN = 1 << 16  # (the C pickler's FRAME_SIZE_TARGET: smaller values stay in the frame)


class _Sink:
    """The state file, written as the pickler goes (its 64 KiB frames), counted: bytes, and the memo's entries.

    The C pickler's writes are its own (PROTO first in each dump, then a FRAME and its data, then, where a large
    value follows, that value's opcode and size), or a large value's data written apart, which the write before
    announced: only the pickler's own are counted (review L1: a bytes value starting 0x80/0x95 was counted as a
    frame, so `b"\\x80" + b"\\x94" * 40_000_010` stopped the copy)."""

    def __init__(self, path: str | None, ctl: _Control) -> None:
        self.f = private_open(path, "wb", buffering=0) if path else None
        self.ctl = ctl
        self.apart = 0  # bytes of a large value the pickler announced and has not written yet

    def write(self, b: bytes | bytearray | memoryview) -> int:
        n = len(b)
        self.ctl.add(n)
        if self.apart:  # a large value's data: not the pickler's opcodes
            self.apart = max(0, self.apart - n)
        elif type(b) is bytes:
            self.apart = _own_write(b, self.ctl)
        if self.f is not None:
            self.f.write(b)
        return n

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def _own_write(b: bytes, ctl: _Control) -> int:
    """The memo's entries in the pickler's own write `b` counted (kernel/stops._Control.memoized: its opcodes, not a
    value's data written apart); the size of the large value whose header ends it (written next), else 0."""
    n = len(b)
    i = 2 if b[:1] == b"\x80" else 0  # (PROTO: a dump's first write)
    if b[i:i + 1] == b"\x95" and n >= i + 9:  # FRAME and its size: the frame's data ends there, a header may follow
        end = min(n, i + 9 + int.from_bytes(b[i + 1:i + 9], "little"))
        heads: tuple[int, ...] = (end,)
    else:  # (no FRAME: a frame under 4 bytes is written bare, and a header may follow it)
        end = n
        heads = (n - 9, n - 5) if n - i <= 3 + 9 else ()
    apart = 0
    for h in heads:
        width = n - 1 - h
        if i <= h < n and _APART_HEADS.get(b[h]) == width:
            size = int.from_bytes(b[h + 1:], "little")
            if size >= _APART_MIN:
                apart, end = size, h
                break
    ctl.memoized(b if end == n else b[:end])
    return apart


def torch_reducers(proof: _Proof) -> dict:
    """torch's own `Tensor` and `Parameter` (when the notebook patched neither: else tensors are pickled by torch's
    own, proven, hook) -> a reducer that pickles a detached copy tagged with the device it lives on
    (worker/devices.py); the user's tensor is not touched. What the copy leaves out (a CUDA tensor's device, a
    non-leaf's graph, a retained gradient, the inference flag) is noted in `proof.uncarried`."""
    tensor: Any = _mdict(_module("torch")).get("Tensor")
    if tensor is None:
        return {}
    parameter: Any = _mdict(_module("torch.nn.parameter")).get("Parameter")
    if not (proof.pristine(tensor) and proof.pristine(parameter)):
        return {}

    def tagged(obj: Any, copy: Any, device: str, keep_dict: bool) -> Any:
        """`copy` (a detached tensor over `obj`'s data, or its CPU copy) made `obj`'s kind again and tagged with
        the device it lives on: what is pickled in its place."""
        if type(obj) is parameter:
            copy = parameter(copy, requires_grad=obj.requires_grad)
        elif obj.requires_grad:
            copy.requires_grad_(True)
        if keep_dict:
            copy.__dict__.update(obj.__dict__)
        copy.__dict__["_crane_vdev"] = device
        if obj.is_leaf and obj.grad is not None:
            # torch's pickling drops `.grad`; loading sets every `__dict__` key with setattr, so the copy gets its
            # gradient back (the `grad` descriptor wins over this key here)
            copy.__dict__["grad"] = obj.grad
        return copy.__reduce_ex__(5)

    def reduce(obj: Any) -> Any:
        try:
            device = obj.device.type
            if device != "cpu" or obj.retains_grad or obj.is_inference() or (obj.requires_grad and not obj.is_leaf):
                # the copy differs: a CPU leaf in the worker, its graph, retained gradient and inference flag gone
                proof.uncarried.append("torch")
            if device == "cpu" and "_crane_vdev" not in obj.__dict__:
                return tagged(obj, obj.detach(), "cpu", keep_dict=True)
            if device not in ("cpu", "meta"):
                return tagged(obj, obj.detach().to("cpu"), str(obj.device), keep_dict=False)
        except (_Refused, _Stopped):
            raise
        except Exception:
            pass
        return NotImplemented

    return {tensor: reduce, parameter: reduce}


_CELL: Any = type((lambda x: lambda: x)(0).__closure__[0])  # type: ignore[index]  # (the cell type itself, bound at install: not `types`')
_CELL_CONTENTS = _CELL.__dict__["cell_contents"]
_F_CLOSURE = _FunctionType.__dict__["__closure__"]
_F_CODE = _FunctionType.__dict__["__code__"]


def lru_reducers(proof: _Proof) -> dict:
    """`functools.lru_cache`/`cache` wrappers of the notebook's functions -> a reducer that rebuilds the wrapper in
    the worker around the function copied by value (`_lru_cache_wrapper(function, maxsize, typed, _CacheInfo)`, its
    `__dict__` as the state: `__wrapped__`, names, `cache_parameters`), an empty cache. Without it the wrapper pickled
    by reference to `__main__.<name>`, which the worker's `__main__` lacks: the copy was `unavailable` (red team round
    17h, F3). The wrapped function is read through the collector (bound._lru_wrapped), `maxsize` and `typed` from
    the closure of the `cache_parameters` functools itself set (its code proven the library's, the cells read by
    the cell type's own descriptor): nothing is called. Any other wrapper pickles as before."""
    info = _mdict(_module("functools")).get("_CacheInfo")
    if _LRU_WRAPPER is None or not _is_class(info) or not proof.pristine(info):
        return {}
    cell, contents = _CELL, _CELL_CONTENTS

    def parameters(params: Any) -> tuple | None:
        if type(params) is not _FunctionType or not _library_function(params):
            return None
        code = _F_CODE.__get__(params, _FunctionType)
        cells = _F_CLOSURE.__get__(params, _FunctionType)
        if code.co_freevars != ("maxsize", "typed") or type(cells) is not tuple or len(cells) != 2:
            return None
        try:
            maxsize, typed = (contents.__get__(c, cell) for c in cells)  # (`__get__` checks each is a cell)
        except (TypeError, ValueError):  # (an empty cell)
            return None
        if not (maxsize is None or type(maxsize) is int) or type(typed) is not bool:
            return None
        return maxsize, typed

    def reduce(obj: Any) -> Any:
        f = _lru_wrapped(obj)
        if type(f) is not _FunctionType or _library_function(f):
            return NotImplemented  # (a library's function pickles by reference, as the library's)
        own = _O_DICT_GET(obj, "__dict__")
        if type(own) is not dict or not all(type(k) is str for k in dict.keys(own)):
            return NotImplemented
        got = parameters(dict.get(own, "cache_parameters"))
        if got is None:
            return NotImplemented
        return _LRU_WRAPPER, (f, got[0], got[1], info), dict(own)

    return {_LRU_WRAPPER: reduce}


def _pickler_class(cp: Any, proof: _Proof, ctl: _Control, reducers: dict, see: Any = None) -> type[Any]:
    copyreg = _MODULES.get("copyreg")  # its reducers: the notebook's may be registered there (copyreg.pickle)
    table = dict.get(_O_DICT_GET(copyreg, "__dict__"), "dispatch_table") if copyreg is not None else None
    registered = table if type(table) is dict else {}
    io_base = _IO_BASE
    nd = _ndarray()
    base: Any = cp.CloudPickler

    class Pickler(base):
        def reducer_override(self, obj: Any) -> Any:
            if ctl.stop:
                raise _Stopped(ctl.stop)
            proof.check(obj)  # before anything reads the object (cloudpickle's isinstance reads __class__)
            if see is not None:  # (what runs when it is freed: kernel/finalizers.py)
                see(obj)
            t = type(obj)
            red = dict.get(registered, t)
            if red is not None and not _library_function(red):  # copyreg.pickle(T, notebook_function)
                raise _Refused(f"{_type_name(obj)}: its pickling was registered with copyreg by the notebook")
            mro = _mro(t)
            if any(k is io_base for k in mro) and _T_NAME.__get__(t, type) not in ("BytesIO", "StringIO"):
                raise TypeError(f"cannot copy an open file or stream ({_T_NAME.__get__(t, type)})")
            if nd is not None and any(k is nd for k in mro):
                _materialised(obj, nd, ctl)
            own = dict.get(reducers, t)  # CRANE's reducer for this exact type (the type is proven: hashing it is)
            if own is not None:  # (one that calls a library's own pickling proves what it reaches first)
                out = own(obj)
                if out is not NotImplemented:
                    return out
            mod = _T_MODULE.__get__(t, type)
            if type(mod) is str and mod.partition(".")[0] in _OWN_REDUCER_MODULES and id(obj) not in proof.walked \
                    and _own_pickling(mro):  # (one pickled by pickle itself: each object it reaches comes here)
                proof.prewalk(obj)
            return super().reducer_override(obj)

    return Pickler


def _own_pickling(mro: tuple) -> bool:
    """A class of the MRO pickles with Python code of one of `_OWN_REDUCER_MODULES` (Keras's `__reduce__`: its
    saving code), which may reach objects pickle never sees (a namedtuple's `__getnewargs__`, collections' code,
    gives pickle its items)."""
    for k in mro:
        if k is object:
            continue
        kd = _cls_dict(k)
        for n in _PICKLING:
            fn = kd.get(n)
            if type(fn) is _FunctionType:
                g = fn.__globals__
                mod = dict.get(g, "__name__") if type(g) is dict else None
                if type(mod) is not str or mod.partition(".")[0] in _OWN_REDUCER_MODULES:
                    return True
    return False


def dump_state(objs: dict, reducers: dict, *, cp: Any, d: str | None, tag: str, ctl: _Control, proof: _Proof,
               watch: Any = None) -> dict:
    """Pickle `objs` (CRANE's dict of proven objects, by name) with CRANE's `reducers` (an exact type -> a function
    of the object: a reduce tuple, or NotImplemented for cloudpickle's own) into `d` (None: count only) in a thread with a known stack and CRANE's recursion limit;
    the calling thread waits, polling the controls. {"ok", "buffers": [sizes], "bytes", "error", "tail"}.
    `watch` (kernel/finalizers.FinalizerWatch): `watch.see(obj)` for each object the pickler proves; once `objs` is
    pickled, what `watch.tail(pickler, trial, objs)` returns (not None) is pickled next into the same file by the same
    pickler (its memo: identity with the namespace's objects kept); `trial(value)` says whether `value` pickles on its
    own (a dry run, counted, not written). `out["tail"]`: whether one was written."""
    out: dict = {"ok": False, "buffers": [], "bytes": 0, "error": None, "tail": False}
    sink = _Sink(_join(d, f"state{tag}.pkl") if d else None, ctl)

    def keep(pb: Any) -> bool:  # a pickle.PickleBuffer
        try:
            raw = pb.raw()
        except BufferError:
            return True  # not contiguous: in band
        i = len(out["buffers"])
        ctl.add(raw.nbytes)
        if d:
            with private_open(_join(d, f"buf{tag}-{i}"), "wb", buffering=0) as f:
                step = 1 << 24
                for off in range(0, raw.nbytes, step):
                    f.write(raw[off:off + step])
                    if off:
                        ctl.add(0)
        out["buffers"].append(raw.nbytes)
        return False

    def work() -> None:
        _setprofile(None)
        _settrace(None)
        try:
            pickler = _pickler_class(cp, proof, ctl, reducers, watch.see if watch is not None else None)(
                sink, protocol=5, buffer_callback=keep)
            pickler.dump(objs)
            extra = watch.tail(pickler, _trial(_pickler_class(cp, proof, ctl, reducers), ctl), objs) \
                if watch is not None else None
            if extra is not None:
                pickler.dump(extra)
                out["tail"] = True
            out["ok"] = True
        except RecursionError:
            out["error"] = ("RecursionError", "it is nested deeper than a copy may go")
        except BaseException as exc:  # noqa: BLE001 - reported, the kernel carries on
            out["error"] = (type(exc).__name__, str(exc)[:500])
        finally:
            sink.close()

    old_limit = _getrecursionlimit()
    done = _allocate_lock()  # held by the pickler thread until it ends (`_thread`: no `threading.Thread` looked up)
    done.acquire()

    def run() -> None:
        try:
            work()
        finally:
            done.release()

    _setrecursionlimit(max(_DEPTH, 200))
    try:
        old_stack = _stack_size(_STACK)
        try:
            _start_thread(run, ())
        finally:
            _stack_size(old_stack)
        while not done.acquire(True, 0.05):
            ctl.watch()  # here only: the main thread's own queue
            ctl.poll()  # the pickler sees `stop` at its next object or write
    finally:
        _setrecursionlimit(old_limit)
    out["bytes"] = ctl.written
    if ctl.stop and not out["ok"]:
        out["error"] = ("Stopped", ctl.stop)
    return out



def _trial(cls: Any, ctl: _Control) -> Any:
    """`trial(value)`: `value` pickles with the export's pickler class on its own, into nothing (its buffers out of
    band, counted): a refusal or an error is False; a stop still stops the export."""

    def trial(value: Any) -> bool:
        try:
            cls(_Sink(None, ctl), protocol=5, buffer_callback=_out_of_band).dump(value)
        except _Stopped:
            raise
        except BaseException:  # noqa: BLE001 - not copied: the caller says what that misses
            return False
        return True

    return trial


def _out_of_band(pb: Any) -> bool:
    return False


def _cloudpickle(resealed: list | None = None) -> Any:
    """CRANE's private cloudpickle, taken once (a reference kept from then on: the notebook replacing
    `sys.modules["_crane_cloudpickle"]` or its classes later changes nothing), its `CloudPickler` proven to be
    CRANE's own code; the module's `__builtins__` become CRANE's (the C pickler imports the modules of the classes
    it saves through the `__import__` it finds there). When it takes the module (CRANE's changes above made), it
    seals it again and appends the new seal's three addresses to `resealed` (the request's own list: the export's
    reply carries them to the daemon, which calls the module by that seal from then on)."""
    m = dict.get(_MODULES, "_crane_cloudpickle")
    if _CP and (m is None or _CP[0] is m):
        return _CP[1]
    if type(m) is not _MODULE_TYPE:
        return None
    md = _mdict(m)
    # its install's seal (kernel/private_module.py), which the request that called this checked just before: its
    # code object, made into a function afresh, seals the module again once CRANE's changes below are in
    seal: Any = md.get("__crane_seal__")
    hold = seal.__callback__.__self__ if type(seal) is _WEAKREF and seal() is m else None
    code = hold[0] if type(hold) is tuple and len(hold) == 1 else None
    if type(code) is not _CodeType:
        return None
    cls = md.get("CloudPickler")
    if type(cls) is not type or not all(
            type(v) is not _FunctionType or v.__code__.co_filename.startswith("<crane-kernel")
            for v in _cls_dict(cls).values()):
        return None
    md["__builtins__"] = BUILTINS
    private_modules(md)  # its `dis`, `sys`, `types`, ...: private copies (kernel/bound.py)
    walkers = _global_walker(md.get("dis"))
    if walkers is None:
        return None
    walker = walkers[0]
    _WALKER[:] = walkers  # (kernel/dynamic_reads.py reads code objects by the same walks)
    md["_walk_global_ops"] = walker  # no `dis` on the way (3.12+: its ArgResolver's methods are the shared module's)
    # the new seal: the daemon calls only while the module binds what it binds now (CRANE's changes above in, any
    # later rebinding of the notebook's out)
    new = _FunctionType(code, {"__builtins__": {}})(2, m, None, None, None, None)
    if resealed is not None:
        resealed.append(new)
    _CP[:] = [m, _SimpleNamespace(CloudPickler=cls)]
    return _CP[1]


_CP: list = []
_WALKER: list = []  # `_global_walker`'s functions, once `_cloudpickle` made them
# builtins whose one argument's order does not show in their result (`_untested_loads`)
_ORDER_FREE_CALLS = frozenset(("len", "sorted", "set", "frozenset", "min", "max", "sum", "any", "all", "bool"))
# set methods whose result shows no order of the set's (in place, a test, another set read the same way)
_SET_METHODS = frozenset(("add", "discard", "remove", "update", "difference_update", "intersection_update",
                          "symmetric_difference_update", "clear", "issubset", "issuperset", "isdisjoint", "union",
                          "intersection", "difference", "symmetric_difference", "copy"))


def _global_walker(dis_module: Any) -> Any:
    """cloudpickle's `_walk_global_ops` without `dis`: the names a code object's global loads, stores and deletes
    refer to, read from its bytecode (`co_code`, un-specialised; EXTENDED_ARG prefixes; LOAD_GLOBAL's name index is
    its argument >> 1 from 3.11). `dis.get_instructions` runs Python code of the shared `dis` module on 3.12+ (its
    ArgResolver's methods look `_deoptop`, `_get_name_info`, ... up there), which the notebook may have patched;
    the opcode numbers are read once, now, from the private copy of `dis` (None: no such copy, no export).
    Returns it, and `_untested_loads` (kernel/dynamic_reads.py): the names of the global loads where a set's order
    can show: not the right operand of a membership test (`x in s`: the next instruction, inline caches passed
    over, is CONTAINS_OP), nor the one argument of a builtin whose result has no order (`len(s)`, `sorted(s)`:
    the load right after that global's, then the call), nor tested for its truth (`if s:`, `not s`), nor the object
    of a set method whose result shows no order (`s.add(x)`, `s.union(t)`)."""
    if type(dis_module) is not _MODULE_TYPE:
        return None
    ops = _mdict(dis_module).get("opmap")
    if type(ops) is not dict:
        return None
    numbers = [dict.get(ops, n) for n in ("EXTENDED_ARG", "LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL",
                                          "CONTAINS_OP")]
    if not all(type(n) is int for n in numbers):
        return None
    cache = dict.get(ops, "CACHE", 0)
    calls = {dict.get(ops, "PRECALL", -1), dict.get(ops, "CALL", -1)} - {-1}
    # what the set's next instruction may be where its order does not show: its truth (a jump on it, `not`), a set
    # method (LOAD_METHOD on 3.11; LOAD_ATTR, its name index shifted by one from 3.12, where LOAD_METHOD is a pseudo
    # instruction numbered past 255)
    truth = {n for name, n in dict.items(ops) if type(name) is str and type(n) is int and n < 256
             and (name.startswith("POP_JUMP") or name in ("TO_BOOL", "UNARY_NOT"))}
    method, attr = dict.get(ops, "LOAD_METHOD", -1), dict.get(ops, "LOAD_ATTR", -1)
    attr_shift = 0 if 0 <= method < 256 else 1

    def _walk_global_ops(code: Any, _ext_op: Any = numbers[0], _load: Any = numbers[1], _store: Any = numbers[2],
                         _delete: Any = numbers[3]) -> Any:
        raw, names = code.co_code, code.co_names
        ext = 0
        for i in range(0, len(raw), 2):
            op, arg = raw[i], raw[i + 1] | ext
            if op == _ext_op:
                ext = arg << 8
                continue
            ext = 0
            if op == _load:
                yield names[arg >> 1]
            elif op == _store or op == _delete:
                yield names[arg]

    def _untested_loads(code: Any, _ext_op: Any = numbers[0], _load: Any = numbers[1], _contains: Any = numbers[4],
                        _cache: Any = cache, _calls: Any = frozenset(calls), _truth: Any = frozenset(truth),
                        _method: Any = method, _attr: Any = attr, _shift: Any = attr_shift) -> Any:
        raw, names = code.co_code, code.co_names
        ext, pending, before, last = 0, None, None, None
        for i in range(0, len(raw), 2):
            op, arg = raw[i], raw[i + 1] | ext
            if op == _cache:
                continue
            if op == _ext_op:
                ext = arg << 8
                continue
            ext = 0
            if pending is not None and op != _contains and op not in _truth and not (
                    before in _ORDER_FREE_CALLS and op in _calls and arg == 1) and not (
                    op == _method and names[arg] in _SET_METHODS) and not (
                    op == _attr and names[arg >> _shift] in _SET_METHODS):
                yield pending
            name = names[arg >> 1] if op == _load else None
            pending, before, last = name, last if name is not None else None, name
        if pending is not None:
            yield pending

    return _walk_global_ops, _untested_loads


def _culprit(cp: Any, objs: dict, reducers: dict, ename: str, evalue: str, d: str, waiting: Any = None,
             rebuilt: dict | None = None) -> str:
    """The first name whose value alone fails the same way (counted, not written, under the same controls;
    `rebuilt`: the notebook's Keras classes the reducers rebuild, as the export's proof knew them)."""
    if ename == "_Refused":
        lead = "cannot be copied without running the notebook's code in the kernel"
    else:
        lead = "cannot be copied into a separate process"
    for name, obj in objs.items():
        if name.startswith("\x00"):
            continue
        ctl = _Control(d, 5.0, 0, waiting)
        proof = _Proof()
        proof.rebuilt.update(rebuilt or {})
        res = dump_state({name: obj}, reducers, cp=cp, d=None, tag="", ctl=ctl, proof=proof)
        if ctl.stop == _QUEUED:
            break  # the user's cell comes first: the search for the culprit ends here
        if not res["ok"]:
            e, v = res["error"] or (ename, evalue)
            what = v if e in ("_Refused", "_Stopped") else f"{e}: {v}"
            return f"`{name}` ({_type_name(obj)}) {lead if e == ename else 'cannot be copied'}: {what}"
    return f"the cell's inputs {lead}: {evalue if ename in ('_Refused', '_Stopped') else f'{ename}: {evalue}'}"
