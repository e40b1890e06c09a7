"""Transplant export, kernel side: what the worker needs to rebuild the kernel's interpreter around the copy.

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py is the entry). `_facts` is `env.json`:
the interpreter, cwd, environment, `sys.path`, the modules to import again, torch's CUDA facts, the kernel's
connection file (hidden from the portable worker), the shell's interactivity, and the settings a fresh interpreter
would not have (`_settings`: shared/carry.py's read side, through `_Lib`, which touches only plain modules'
namespaces, functions proven the library's own, and C-level attributes; torch's own state). The reply's
`carried` (`_carried`: the rebuilt runtimes whose process-wide state the copy carries), `patched`
(`_patched_classes`) and the kernel's process (`_process`) come from here too. Everything is read through
kernel/bound.py's readers; nothing of the notebook's is called.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _EXECUTABLE,
    _MODULE_TYPE,
    _MODULES,
    _O_DICT_GET,
    _SEP,
    _STDLIB_NAMES,
    _SYS,
    _T_MODULE,
    _T_NAME,
    _T_QUALNAME,
    _BuiltinFunctionType,
    _cls_dict,
    _exists,
    _FunctionType,
    _getcwd,
    _GetSetDescriptorType,
    _join,
    _mdict,
    _MemberDescriptorType,
    _module,
    _ModuleType,
    _mro,
)
from crane.sandbox.kernel.library import carriable_module  # kernel: strip
from crane.sandbox.kernel.lookups import _str_keys  # kernel: strip
from crane.sandbox.kernel.proof import (  # kernel: strip
    _OWN_REDUCER_MODULES,
    _call,
    _callable_ok,
    _is_class,
    _library_function,
    _Proof,
    _Refused,
)
from crane.sandbox.kernel.shield import environ_strings, private_open, process_identity  # kernel: strip
from crane.sandbox.kernel.waiting import OddKeyError, own_dict, str_get  # kernel: strip
from crane.sandbox.shared.carry import CARRIED_RUNTIMES, STR_HASH_PROBE, read_carried  # kernel: strip

# modules of the kernel itself, not of the notebook: never imported again in a worker
_KERNEL_MODS = ("ipykernel", "IPython", "jupyter_client", "jupyter_core", "zmq", "tornado", "traitlets", "comm",
                "debugpy", "prompt_toolkit", "pygments", "jedi", "parso", "matplotlib_inline", "psutil",
                "nest_asyncio", "pexpect", "ptyprocess", "wcwidth", "stack_data", "executing", "asttokens",
                "pure_eval", "decorator", "platformdirs", "dateutil", "pickleshare", "backcall", "six", "_pytest")


def _sys_path() -> list:
    p: Any = dict.get(_SYS, "path")
    return [x for x in list.__iter__(p) if type(x) is str] if issubclass(type(p), list) else []



# the kernel's hash of one exact str, taken at install (its builtins proven: kernel/pristine.py): the worker compares
# its own to know whether its string hashes, and so a set of strings' iteration order, are the kernel's
_STR_HASH = hash(STR_HASH_PROBE)


def _facts(shell: Any, keys: list, settings: dict, buffers: int, shell_missed: list) -> dict:
    """`env.json`: what the worker rebuilds the kernel's interpreter from (`keys`: the namespace's names;
    `shell_missed`: the notebook's shell state the worker will not hold, kernel/transformers.py: a crash in the copy
    may rest on it, so it is only "likely", transplant.crash_certain's `missed`)."""
    modules = _modules()
    shell_missed = list(shell_missed)
    shell_settings = _shell_settings(shell, shell_missed)
    return {"executable": _EXECUTABLE, "cwd": _getcwd(), "env": environ_strings(), "path": _sys_path(),
            "modules": modules, "submodules": _submodules(modules), "torch": _torch_facts(), "buffers": buffers, "settings": settings,
            "names": [k for k in keys if not k.startswith("_")][:100000],
            **shell_settings, "shell_missed": shell_missed, "connection_file": _connection_file(), "argv": _sys_argv(),
            "shell_class": _shell_class_name(shell), "str_hash": _STR_HASH}


def _sys_argv() -> list | None:
    """`sys.argv` when it is a plain list of plain strings (None else), for the worker's: a notebook's `argparse`
    reads it (`parser.parse_args()` in a kernel fails on ipykernel's `-f <connection file>`: round 16, F5)."""
    argv = dict.get(_SYS, "argv")
    if type(argv) is not list:
        return None
    items = list(list.__iter__(argv))
    return items if all(type(a) is str for a in items) else None


def _shell_class_name(shell: Any) -> str | None:
    """The name of the shell's class (`ZMQInteractiveShell` in a Jupyter kernel), read from the type's C slot
    (nothing looked up in its dict): notebooks tell a kernel from a terminal by it (round 16, F5)."""
    name = _T_NAME.__get__(type(shell), type)
    return name if type(name) is str else None


def _shell_settings(shell: Any, missed: list) -> dict:
    """The shell's settings the worker's shell takes (interactivity, `__future__` flags, display formats,
    autoawait), each read from instance dicts and trait values proven to hold exact `str` keys only (review M1:
    `dict.get` there compares the name asked for with a planted key, running its `__eq__` in the kernel); one whose
    dicts hold another key is IPython's default in the copy and named in `missed` (`shell_settings`: a crash in the
    copy is then only "likely")."""
    out: dict = {}
    for key, read, default in (("interactivity", _interactivity, "last_expr"), ("compile_flags", _compile_flags, 0),
                               ("formats", _formats, {}), ("autoawait", _autoawait, True)):
        try:
            out[key] = read(shell)
        except OddKeyError:
            out[key] = default
            if "shell_settings" not in missed:
                missed.append("shell_settings")
    return out


def _connection_file() -> str | None:
    """The kernel's connection file (`-f PATH` / `--f=PATH` on its command line, read from `sys.argv` by exact
    type), so the portable worker can hide it (it holds the key that signs requests to this kernel)."""
    argv = dict.get(_SYS, "argv")
    if type(argv) is not list:
        return None
    argv = list(list.__iter__(argv))
    for i, a in enumerate(argv):
        if type(a) is not str:
            continue
        if a in ("-f", "--f") and i + 1 < len(argv) and type(argv[i + 1]) is str:
            return _abspath(argv[i + 1])
        for p in ("-f=", "--f="):
            if a.startswith(p):
                return _abspath(a[len(p):])
    return None


def _abspath(p: str) -> str:
    return p if p.startswith(_SEP) else _join(_getcwd(), p)


# the `__future__` features' compiler flags (CPython's CO_FUTURE_* values, the same on 3.8-3.13: Include/cpython/
# compile.h), as constants: the `__future__` module could be the notebook's by now
FUTURE_FLAGS = 0x1FE0000


def _compile_flags(shell: Any) -> int:
    """The `__future__` features the kernel's cells turned on, which IPython's compiler keeps for every later cell
    (`from __future__ import annotations` in an earlier cell: a later cell's annotations are never evaluated), read
    from the shell's and its compiler's own dicts (an exact int; else none)."""
    comp = str_get(own_dict(shell), "compile")
    flags = str_get(own_dict(comp), "flags") if comp is not None else None
    return flags & FUTURE_FLAGS if type(flags) is int else 0


def _formats(shell: Any) -> dict:
    """The display formatters the kernel's cells switched off or on (`enabled` set on a formatter: only what its
    trait values hold; DisplayFormatter's `active_types` as `"active"`), read from instance dicts and trait values:
    the worker's display hook formats the cell's value with the kernel's (round 12, h7)."""
    out: dict = {}
    values = str_get(own_dict(shell), "_trait_values")
    df = str_get(values, "display_formatter")
    dv = str_get(own_dict(df), "_trait_values") if df is not None else None
    if type(dv) is not dict:
        return out
    active = str_get(dv, "active_types")
    if type(active) is list and all(type(t) is str for t in list.__iter__(active)):
        out["active"] = list(list.__iter__(active))
    formatters = str_get(dv, "formatters")
    for mime, f in dict.items(formatters) if type(formatters) is dict else ():
        fv = str_get(own_dict(f), "_trait_values")
        on = str_get(fv, "enabled")
        if type(mime) is str and type(on) is bool:
            out[mime] = on
    return out


def _autoawait(shell: Any) -> bool:
    """`%autoawait` from the shell's trait values (False after `%autoawait off`: a top-level `await` is then the
    kernel's SyntaxError; carried to the worker, issue 42 part 2, h10)."""
    values = str_get(own_dict(shell), "_trait_values")
    on = str_get(values, "autoawait")
    return on if type(on) is bool else True


def _interactivity(shell: Any) -> str:
    """`ast_node_interactivity` from the shell's trait values (an exact str; else IPython's default)."""
    values = str_get(own_dict(shell), "_trait_values")
    v = str_get(values, "ast_node_interactivity")
    return v if type(v) is str else "last_expr"


def kernel_side(top: str) -> bool:
    """A top-level package of the standard library's or of the kernel's own machinery: never the notebook's."""
    return top in _STDLIB_NAMES or top.startswith(("_", "pydev")) or top in _KERNEL_MODS


def _modules() -> list[str]:
    """The top-level packages the notebook imported (not the standard library's, not the kernel's own), to import
    again in the worker: read from `sys.modules` as a dict, each module's `__file__` from its namespace (a module
    object's `__getattr__`, or an object standing in for a module, is never touched)."""
    out: list[str] = []
    for name in list(dict.keys(_MODULES)):
        if type(name) is not str:
            continue
        top = name.partition(".")[0]
        if top in out or kernel_side(top):
            continue
        path = _mdict(_module(top)).get("__file__")
        if type(path) is str and path:
            out.append(top)
    return out


_SUBMODULES_MAX = 5000


def _submodules(tops: list[str]) -> list[str]:
    """The submodules of the packages `tops` (`_modules`) that the kernel holds now, loaded modules only (no `None`
    placeholder nor any other object the table holds), read from `sys.modules` as a dict: a warm portable head
    imports them ahead of its next run (worker/head.kernel_held), so a cell's first call in a run does not import
    what the kernel had already loaded lazily (a fitted model's predict imports ~20 narwhals/pyarrow modules)."""
    under = set(tops)
    out: list[str] = []
    for name in list(dict.keys(_MODULES)):
        if type(name) is str and "." in name and name.partition(".")[0] in under \
                and type(dict.get(_MODULES, name)) is _ModuleType:
            out.append(name)
            if len(out) >= _SUBMODULES_MAX:
                break
    return out


def _torch_facts() -> dict:
    cuda = _mdict(_module("torch.cuda"))
    if not cuda:
        return {}
    try:
        if not _call(cuda, "is_initialized"):
            return {"cuda": False}
        n = _call(cuda, "device_count")
        if type(n) is not int:
            return {"cuda": False}
        names = [_call(cuda, "get_device_name", i) for i in range(n)]
        return {"cuda": True, "count": n, "names": [x if type(x) is str else "?" for x in names]}
    except Exception:
        return {"cuda": False}


def _process() -> dict:
    """This kernel's process: pid, start time, pid namespace (the daemon ends its workers when it ends)."""
    pid, start, pidns = process_identity()
    return {"kernel_pid": pid, "kernel_start": start, "kernel_pidns": pidns}


def _settings(proof: _Proof, recursion_limit: int) -> dict:
    """Interpreter and library settings a fresh interpreter would not have (shared/carry.py's read side, through
    `_Lib`), and torch's."""
    out = read_carried(_Lib(proof), recursion_limit)
    torch_settings = _torch_settings()
    if torch_settings is not None:
        out["torch"] = torch_settings
    return out


class _Lib:
    """What shared/carry.py's read side may touch in the kernel: plain modules' namespaces, functions proven to be
    the library's own (and named as expected: `np.geterr = os.fork` is not called), C-level attributes."""

    def __init__(self, proof: _Proof, fresh: bool = False) -> None:
        self.proof = proof
        # the copy is one run's (the export request's tag 0): its worker rebuilds the state before it applies the
        # carried settings (worker/main._run), so with no TensorFlow global seed yet (shared/tf_data's shuffle)
        self.fresh = fresh

    def mod(self, name: str) -> dict:
        return _mdict(_module(name))

    def call(self, fn: Any, name: str, *args: Any) -> Any:
        if not _callable_ok(fn, name):
            raise _Refused(name)
        return fn(*args)

    def method(self, cls: Any, name: str, *default: Any) -> Any:
        """`name` as the class's MRO defines it (read from the classes' dicts, each once its keys are proven exact
        `str`: a planted key's `__eq__` never runs; refused otherwise)."""
        if _is_class(cls):
            for k in _mro(cls):
                kd = _cls_dict(k)
                if not _str_keys(kd):
                    raise _Refused(f"{name}: a class's dict holds a key that is not a plain string")
                if name in kd:
                    return kd[name]
        if default:
            return default[0]
        raise _Refused(name)

    def attr(self, obj: Any, name: str) -> Any:
        """A C-level attribute (a getset or member descriptor of the object's class), else refused."""
        d = self.method(type(obj), name)
        if type(d) is not _GetSetDescriptorType and type(d) is not _MemberDescriptorType:
            raise _Refused(name)
        return d.__get__(obj, type(obj))

    def attrs(self, obj: Any) -> dict:
        """The object's instance dict, once its keys are proven exact `str` (its callers read it with `get`: a
        planted key sharing a name's hash would have its `__eq__` run; refused otherwise: that state is unread)."""
        d = own_dict(obj)
        if not _str_keys(d):
            raise _Refused("an instance dict holds a key that is not a plain string")
        return d

    def proven(self, cls: Any) -> bool:
        return _is_class(cls) and self.proof.pristine(cls)

    def proc_status(self) -> str:
        """The kernel's /proc/self/status ("" where there is none), read by the bound `_io.open`."""
        try:
            with private_open("/proc/self/status", "rb") as f:
                return bytes.decode(f.read(1 << 16), "ascii", "replace")
        except OSError:
            return ""

    def class_name(self, cls: Any) -> str | None:
        if not _is_class(cls) or not self.proof.library_class(cls):
            return None
        mod, qual = _T_MODULE.__get__(cls, type), _T_QUALNAME.__get__(cls, type)
        if type(mod) is not str or type(qual) is not str or "<" in qual:
            return None
        obj: Any = _module(mod)
        for part in qual.split("."):
            d = _mdict(obj) if type(obj) is _MODULE_TYPE else _cls_dict(obj) if _is_class(obj) else {}
            if not _str_keys(d):
                return None
            obj = d.get(part)
        return f"{mod}:{qual}" if obj is cls else None



def _torch_settings() -> dict | None:
    """torch's process-wide state a fresh interpreter would not have: the default dtype and device, grad mode (the
    main thread's: cells run there), deterministic algorithms, anomaly detection, matmul precision, the CPU random
    generator's state. Only torch's own functions are called (one the notebook replaced is not: then None, and a
    crash in torch stays "likely")."""
    torch = _MODULES.get("torch")
    if type(torch) is not _ModuleType:
        return None
    td = _O_DICT_GET(torch, "__dict__")

    def call(name: str, owner: dict = td) -> Any:
        fn: Any = dict.get(owner, name)
        t = type(fn)  # a module's C function or a library's Python function: never a bound method of an object
        owner_t = type(fn.__self__) if t is _BuiltinFunctionType else None
        if not (t is _BuiltinFunctionType and (owner_t is _ModuleType or owner_t is type(None))
                or t is _FunctionType and _library_function(fn)):
            raise _Refused(name)
        return fn()

    try:
        rnd = dict.get(td, "random")
        rng = call("get_rng_state", _O_DICT_GET(rnd, "__dict__")) if type(rnd) is _ModuleType else None
        out = {"default_dtype": str(call("get_default_dtype")), "grad_enabled": bool(call("is_grad_enabled")),
               "deterministic": bool(call("are_deterministic_algorithms_enabled")),
               "deterministic_warn_only": bool(call("is_deterministic_algorithms_warn_only_enabled")),
               "anomaly": bool(call("is_anomaly_enabled")),
               "matmul_precision": str(call("get_float32_matmul_precision")),
               "rng": bytes(rng.tolist()).hex() if rng is not None and type(rng) is dict.get(td, "Tensor") else None}
        out["default_device"] = str(call("get_default_device")) if "get_default_device" in td else "cpu"
        out["num_threads"] = int(call("get_num_threads"))
        out["printoptions"] = _torch_printoptions(td)
        return out
    except Exception:
        return None


_NO_OPTION = object()
_TORCH_PRINT = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")


def _torch_printoptions(td: dict) -> dict:
    """torch's print options the notebook set (`torch.set_printoptions`: its `_tensor_str.PRINT_OPTS` instance's
    own values; red team round 18, G9), plain values only, read from the instance dict (nothing of torch's runs)."""
    tstr = dict.get(td, "_tensor_str")
    opts = _mdict(tstr).get("PRINT_OPTS") if type(tstr) is _ModuleType else None
    d = own_dict(opts) if opts is not None else {}
    try:
        found = {k: str_get(d, k, _NO_OPTION) for k in _TORCH_PRINT}
    except OddKeyError:
        return {}
    return {k: v for k, v in found.items() if v is None and k == "sci_mode" or _simple_number(v)}


def _simple_number(v: Any) -> bool:
    t = type(v)  # (by identity: a metaclass's `__eq__` never runs)
    return t is int or t is float or t is bool


def _accessors(proof: _Proof) -> list:
    """Pandas accessors the notebook registered: (class name, accessor name, accessor class), copied by value.
    Read from the classes' dicts, types compared by identity (no `isinstance`, no metaclass `__eq__`)."""
    pd = _mdict(_module("pandas"))
    out: list = []
    for target in ("DataFrame", "Series", "Index"):
        cls: Any = pd.get(target)
        if not _is_class(cls) or not proof.library_class(cls):
            continue
        if not _str_keys(_cls_dict(cls)):  # (library_class proved its MRO's dicts: this one, read again now)
            continue
        names = _cls_dict(cls).get("_accessors")
        found: list = list(set.__iter__(names)) if type(names) is set else \
            list(frozenset.__iter__(names)) if type(names) is frozenset else []
        for name in sorted(n for n in found if type(n) is str):
            acc = _cls_dict(cls).get(name)
            if not _is_class(type(acc)) or not proof.library_class(type(acc)):
                continue
            ad = own_dict(acc)
            inner = dict.get(ad, "_accessor") if _str_keys(ad) else None
            if type(inner) is type and not proof.library_class(inner):
                out.append((target, name, inner))
    return out


def _carried(settings: dict, facts: dict, proof: _Proof, objs: dict) -> list:
    """The rebuilt runtimes whose process-wide state the copy carries (then compared in the worker, shared/carry.py):
    torch on the CPU (its tensors carried whole); JAX, TensorFlow and Keras when their settings were read, no GPU is
    in play (their devices are the worker's own then), and, for TensorFlow/Keras, no value of theirs is copied
    (rebuilt from its configuration by its own saving code: not the kernel's object) other than tf.data pipelines
    made again exactly by the same calls (`proof.tf_data`; one approximate stage keeps them out)."""
    out: list = []
    ts = settings.get("torch")
    if ts and ts["default_device"] == "cpu" and ts["rng"] and not facts["torch"].get("cuda") and not proof.uncarried:
        out.append("torch")
    if _exists("/dev/nvidia0") or _exists("/dev/kfd"):
        return out
    # (a tf.data pipeline rebuilt by the same calls, shared/tf_data.py, is the kernel's: not one of these, unless a
    # stage was made again only approximately)
    own_values = bool(proof.tf_data_approximate) or any(
        type(m) is str and m.partition(".")[0] in _OWN_REDUCER_MODULES
        for m in (_T_MODULE.__get__(type(v), type) for v in dict.values(objs) if id(v) not in proof.tf_data))
    for key, runtimes in CARRIED_RUNTIMES.items():
        if key in settings and (key == "jax" or not own_values):
            out.extend(runtimes)
    return out


def _notebook_method(v: Any) -> bool:
    """`v` (a class dict's value) is a function of the notebook's, or a static/class method over one: what a cell's
    `pd.DataFrame.double = lambda self: self * 2` puts on a library class. Exact types only, read as C members."""
    t = type(v)
    if t is staticmethod or t is classmethod:
        v = v.__func__
    return type(v) is _FunctionType and not _library_function(v)


def _patched_methods(proof: _Proof, objs: dict) -> list:
    """The methods the notebook added to or replaced on library classes the cell can reach: the classes of copied
    values, copied classes, and the classes a copied library module holds (`pd` for `pd.Series.scaled`), with their
    MROs' library classes but the standard library's and those CRANE's worker runs (kernel/library.carriable_module):
    [(class, name, value)], carried to the worker (the class by reference, the function by
    value like any notebook function) and set there on the worker's class, so a call of one runs the notebook's
    code as in the kernel (issue 42 part 2, dl-fresh's `pd.DataFrame.random_split`). Class dicts and module dicts
    read by C-level reads; nothing is called."""
    out: list = []
    seen: set = set()
    classes: list = []
    for v in dict.values(objs):
        if type(v) is _ModuleType:
            classes.extend(c for c in dict.values(_mdict(v)) if _is_class(c))
        else:
            classes.append(v if _is_class(v) else type(v))
    for t in classes:
        if not _is_class(t) or not proof.library_class(t):
            continue
        for k in _mro(t):
            if k is object or id(k) in seen or not proof.library_class(k):
                continue
            seen.add(id(k))
            try:
                mod = _T_MODULE.__get__(k, type)
            except Exception:  # (a heap type with no `__module__`)
                continue
            if not carriable_module(mod):  # (the standard library's, CRANE's worker's own: review r1 H1)
                continue
            for name, value in _cls_dict(k).items():
                if type(name) is str and _notebook_method(value):
                    out.append((k, name, value))
    return out


_TRACED_FUNCTIONS = ("train_function", "test_function", "predict_function")


def _traced_models(objs: dict) -> list:
    """`name:train`, `name:test`, `name:predict`: the copied names holding a Keras model the kernel traced (`fit`, `evaluate` or `predict` made its train,
    test or predict function: set in its instance dict): the copy rebuilds the model with none, so its crash may
    not be the kernel's — the kernel's traced graph fails with another exception than the copy's input check (red
    team round 17h, F6: `InvalidArgumentError` in the kernel, `ValueError` in the copy). Read from the class's C
    `__module__` and the instance dict (its keys proven exact `str`): nothing of the model's runs."""
    out: list[str] = []
    for name, v in dict.items(objs):
        if type(name) is not str or name.startswith("\x00"):
            continue
        mod = _T_MODULE.__get__(type(v), type)
        if type(mod) is not str or mod.partition(".")[0] not in ("keras", "tf_keras"):
            continue
        try:
            d = own_dict(v)
            out.extend(f"{name}:{k.partition('_')[0]}" for k in _TRACED_FUNCTIONS if str_get(d, k) is not None)
        except OddKeyError:
            out.extend(f"{name}:{k.partition('_')[0]}" for k in _TRACED_FUNCTIONS)  # (not read: said traced)
    return out[:150]


def _patched_classes(proof: _Proof, objs: dict, carried: list | tuple = ()) -> list:
    """The short names of the library classes of copied values the notebook patched (a method added or replaced)
    beyond what the copy carries (`carried`: `_patched_methods`' entries): an AttributeError naming one in the copy
    is only "likely" (the copy's class is the library's own)."""
    out: list = []
    ids = {id(value) for _, _, value in carried}
    for v in dict.values(objs):
        t = type(v)
        if proof.library_class(t) and not proof.pristine(t) and not _carried_whole(proof, t, ids):
            name = _T_NAME.__get__(t, type)
            if type(name) is str and name not in out:
                out.append(name)
    return out


def _carried_whole(proof: _Proof, cls: Any, ids: set) -> bool:
    """`cls` (a library class, plain `type` as metaclass) holds nothing of the notebook's but the methods the copy
    carries (ids of their values)."""
    if not ids or type(cls) is not type:
        return False
    for k in _mro(cls):
        if k is object:
            continue
        if not proof.library_class(k):
            return False
        for value in _cls_dict(k).values():
            if id(value) not in ids and not proof._pristine_value(value, 0):
                return False
    return True
