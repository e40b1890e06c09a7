"""Carried state: the process-wide settings a fresh interpreter would not have, one library at a time, each with
its read side (the kernel: kernel/export.py, as part of `_crane_transplant`) beside its apply-and-compare side (the
transplant worker: worker/main.py, as part of its `_crane_sandbox`). Standard library only (see the package).

Read side (`read_carried`): runs in the user's kernel, so it touches nothing but what `lib` gives it (kernel/export's
`_Lib`): plain modules' namespaces read as dicts (`lib.mod`), calls of functions proven to be the library's own
whose name is the expected one (`lib.call`: a function the notebook replaced is never called, the library's state
is then reported unread), C-level attributes (`lib.attr`). Values are kept only when they are plain builtins
(exact types): the result is JSON.

Apply side (`apply_carried`): in the worker, after the state is loaded, each library's settings are applied and read back
the same way; a library whose state, read back, differs from the kernel's (or that could not be read there) is
returned by name: a crash in it is then only "likely" (crane.sandbox.transplant.crash_certain).

What travels: the recursion limit and `sys.get_int_max_str_digits()`; `warnings` filters whose parts are plain
(an action, a message and module regex, a category that is a builtin warning class, a line number); the `decimal`
context (precision, rounding, Emin/Emax, capitals, clamp, traps and flags); the global RNG states (`random`,
numpy's legacy global RandomState); numpy's error handling and print options; pandas options that differ from
their defaults; scikit-learn's configuration; matplotlib's rcParams that differ from its defaults (not the backend);
JAX's config values (x64, default dtype bits, PRNG implementation, ...); TensorFlow's eager and
soft-placement flags and its eager global seed with the generator of its operation seeds, and its global
`tf.random.Generator`'s algorithm and state; Keras' floatx, image data
format, epsilon, dtype policy, global seed and global `SeedGenerator` state; `logging`'s loggers' levels, `disabled`
and `propagate` flags, `logging.disable` and `raiseExceptions`; the default socket timeout; the file-mode mask;
plain values the notebook put in the builtins.
"""

from __future__ import annotations

from typing import Any

_SIMPLE = (bool, int, float, str, type(None))
# the string whose hash the kernel takes at install (kernel/environment) and the worker compares with its own
# (worker/main `_hash_missed`): equal hashes, the kernel's string hash seed
STR_HASH_PROBE = "crane: the kernel's string hash"
# in env.json's `reach` (kernel/dynamic_reads): a function the cell reaches loads the builtin `id` as a global (not
# an attribute `x.id`; not an identifier, so no rule reading `reach` as words meets it); read by transplant.state_doubt
REACH_ID_CALL = "id()"


def str_set(v: Any) -> bool:
    """`v` is an exact set or frozenset of more than one item that holds a `str` or `bytes` (or a tuple with a `str`):
    rebuilt in a worker, it iterates in another order than in the kernel. Items are read by their type only, through
    the exact types' own C iteration (also in the kernel: kernel/dynamic_reads; the worker: worker/main)."""
    t = type(v)
    if t is not set and t is not frozenset:
        return False
    for n, x in enumerate(set.__iter__(v) if t is set else frozenset.__iter__(v)):
        if type(x) is str or type(x) is bytes or (type(x) is tuple and any(type(y) is str for y in x)):
            return (set.__len__(v) if t is set else frozenset.__len__(v)) > 1
        if n >= 64:
            break
    return False
_SIGNALS = ("Clamped", "DivisionByZero", "Inexact", "Overflow", "Rounded", "Subnormal", "Underflow",
            "InvalidOperation", "FloatOperation")
_DECIMAL_FIELDS = ("prec", "rounding", "Emin", "Emax", "capitals", "clamp")
# JAX settings that name a machine's devices or files: not the worker's to take (it has its own devices)
_JAX_LOCAL = ("platform", "device", "cuda", "rocm", "backend", "plugin", "cache_dir", "compilation_cache")
# libraries whose whole carried state, proven equal in the worker, makes a crash in them certain
CARRIED_RUNTIMES = {"jax": ("jax", "jaxlib", "flax", "optax"), "tf": ("tensorflow",), "keras": ("keras", "tf_keras")}


def _simple(v: Any) -> bool:
    t = type(v)
    return any(t is c for c in _SIMPLE)


def _str_keyed(d: Any) -> bool:
    """`d` is an exact dict whose keys are all exact `str` (by type: nothing of a key's runs), so looking a name up
    in it compares no key of the notebook's (a planted `str` subclass sharing the name's hash would have its
    `__eq__` run in the kernel)."""
    return type(d) is dict and all(type(k) is str for k in d)


# -- read side (the kernel) ----------------------------------------------------------------------------------
def read_carried(lib: Any, recursion_limit: int) -> dict:
    """Every library's carried state the kernel has loaded: {key: value}; `unread` lists the libraries loaded
    whose state could not be read without calling code that is not the library's own."""
    out: dict = {"recursionlimit": recursion_limit, "unread": []}
    for key, fn, module in _READERS:
        if module and not lib.mod(module):
            continue
        try:
            value = fn(lib)
        except Exception:
            value = None
        if value is None:
            out["unread"].append(key)
        else:
            out[key] = value
    return out


def _read_interpreter(lib: Any) -> Any:
    sysd = lib.mod("sys")
    return {"int_max_str_digits": lib.call(sysd.get("get_int_max_str_digits"), "get_int_max_str_digits")} \
        if "get_int_max_str_digits" in sysd else {}


def _read_numpy(lib: Any) -> Any:
    np = lib.mod("numpy")
    err = lib.call(np.get("geterr"), "geterr")
    opts = lib.call(np.get("get_printoptions"), "get_printoptions")
    if type(err) is not dict or type(opts) is not dict:
        return None
    return {"seterr": {k: v for k, v in dict.items(err) if type(k) is str and type(v) is str},
            "printoptions": {k: v for k, v in dict.items(opts) if type(k) is str and _simple(v)}}


def _read_numpy_random(lib: Any) -> Any:
    """numpy's legacy global RandomState (`np.random.seed`, `np.random.rand`): its MT19937 state."""
    mt = lib.mod("numpy.random.mtrand")
    rand = mt.get("_rand")
    cls = mt.get("RandomState")
    if type(rand) is not cls or not lib.proven(cls):
        return None
    state = lib.call(lib.method(cls, "get_state"), "get_state", rand)
    if type(state) is not tuple or len(state) != 5 or state[0] != "MT19937":
        return None
    keys = lib.call(lib.method(type(state[1]), "tolist"), "tolist", state[1])
    if type(keys) is not list or not all(type(k) is int for k in keys):
        return None
    pos, has_gauss, cached = state[2], state[3], state[4]
    if type(pos) is not int or type(has_gauss) is not int or type(cached) is not float:
        return None
    return [keys, pos, has_gauss, cached]


def _read_random(lib: Any) -> Any:
    """The `random` module's global generator (`random.seed`, `random.random`)."""
    return _random_state(lib, lib.mod("random").get("_inst"))


def _read_decimal(lib: Any) -> Any:
    dec = lib.mod("decimal")
    ctx = lib.call(dec.get("getcontext"), "getcontext")
    if not lib.proven(type(ctx)):
        return None
    out: dict = {f: lib.attr(ctx, f) for f in _DECIMAL_FIELDS}
    if not all(_simple(v) for v in out.values()):
        return None
    for field in ("traps", "flags"):
        # `Context.__getattribute__` (C) hands out the signal dicts
        signals = lib.call(lib.method(type(ctx), "__getattribute__"), "__getattribute__", ctx, field)
        get = lib.method(type(signals), "__getitem__")  # the C mapping's own (`lib.call` refuses any other)
        values = {}
        for name in _SIGNALS:
            sig = dec.get(name)
            if sig is None:
                continue
            v = lib.call(get, "__getitem__", signals, sig)
            if type(v) is not bool:
                return None
            values[name] = v
        out[field] = values
    return out


def _read_warnings(lib: Any) -> Any:
    """The `warnings` filters when every part of each is plain (else None: not carried, not comparable)."""
    w = lib.mod("warnings")
    filters = w.get("filters")
    pattern = lib.mod("re").get("Pattern")
    if type(filters) is not list:
        return None
    out = []
    for f in list.__iter__(filters):
        if type(f) is not tuple or len(f) != 5:
            return None
        action, msg, cat, mod, lineno = f
        parts: list = []
        for rx in (msg, mod):
            if rx is None:
                parts.append(None)
            elif type(rx) is str:  # matched by equality (the interpreter's own default filters)
                parts.append(["str", rx])
            elif type(rx) is pattern and pattern is not None:
                p, flags = lib.attr(rx, "pattern"), lib.attr(rx, "flags")
                if type(p) is not str or type(flags) is not int:
                    return None
                parts.append(["re", p, flags])
            else:
                return None
        name = lib.class_name(cat)
        if type(action) is not str or type(lineno) is not int or name is None:
            return None
        out.append([action, parts[0], name, parts[1], lineno])
    return out


def _read_pandas(lib: Any) -> Any:
    """pandas options that differ from their defaults, read from its option tree (no `get_option`, which may warn,
    and no function of pandas' own is called)."""
    cfg = lib.mod("pandas._config.config")
    registered, deprecated, root = cfg.get("_registered_options"), cfg.get("_deprecated_options"), \
        cfg.get("_global_config")
    if type(registered) is not dict or not _str_keyed(deprecated) or type(root) is not dict:
        return None
    out = {}
    for key, reg in dict.items(registered):
        if type(key) is not str or key in deprecated or not lib.proven(type(reg)) or not issubclass(type(reg), tuple):
            continue
        node: Any = root
        parts = key.split(".")
        for p in parts[:-1]:
            node = dict.get(node, p) if _str_keyed(node) else None
        if not _str_keyed(node):
            continue
        default = tuple.__getitem__(reg, 1)
        val = dict.get(node, parts[-1], default)
        if _simple(val) and not (_simple(default) and type(default) is type(val) and val == default):
            out[key] = val
    return out


def _read_sklearn(lib: Any) -> Any:
    """scikit-learn's configuration (`set_config`: `transform_output`, `enable_metadata_routing`, `assume_finite`,
    ...) where it differs from its defaults: `set_config` writes the calling thread's copy (`_threadlocal.
    global_config`), read here for the thread the cells run in (the kernel's main thread; through the exact
    `_thread._local` type's own C lookup), the defaults `_global_config`. Simple values only; nothing of scikit-learn's is
    called (red team round 17h, F5: a fresh worker's defaults gave certain false crashes)."""
    cfg = lib.mod("sklearn._config")
    defaults: Any = cfg.get("_global_config")
    local = cfg.get("_threadlocal")
    if not _str_keyed(defaults):
        return None
    mine = None
    tl = lib.mod("_thread").get("_local")
    if local is not None and type(tl) is type and type(local) is tl:  # (`threading.local`: the C type's own lookup)
        own = lib.method(tl, "__getattribute__")(local, "__dict__")  # (this thread's dict: the cells' main thread)
        mine = dict.get(own, "global_config") if type(own) is dict else None
    current: Any = mine if _str_keyed(mine) else defaults
    out = {}
    for key, val in dict.items(current):
        default = dict.get(defaults, key)
        if _simple(val) and not (_simple(default) and type(default) is type(val) and val == default):
            out[key] = val
    return out


# rcParams that name the process's backend or GUI (the worker draws with its own): never carried
_MPL_LOCAL = ("backend", "backend_fallback", "interactive", "toolbar", "webagg.", "tk.", "macosx.")


def _read_matplotlib(lib: Any) -> Any:
    """matplotlib's rcParams that differ from its defaults (`rcParams.update`, `plt.style.use`, `rc`): values read
    from the dicts themselves (`dict.items`, none of `RcParams`' methods) and kept as plain values (a list for a
    list or tuple, an enum's string, a one-level cycler's list of dicts), both sides made plain before they are
    compared (no `__eq__` of a value runs). None (not carried: its crashes "likely") when a differing value is none
    of those (red team round 17h, F10: `savefig.format` was the worker's default)."""
    mpl = lib.mod("matplotlib")
    rc, defaults = mpl.get("rcParams"), mpl.get("rcParamsDefault")
    if not lib.proven(type(rc)) or type(defaults) is not type(rc) or not issubclass(type(rc), dict):
        return None
    if not all(type(k) is str for k in dict.keys(rc)) or not all(type(k) is str for k in dict.keys(defaults)):
        return None
    out = {}
    for key, val in dict.items(rc):
        if any(key == w or (w.endswith(".") and key.startswith(w)) for w in _MPL_LOCAL):
            continue
        plain = _mpl_plain(lib, val)
        if plain == _mpl_plain(lib, dict.get(defaults, key)) and plain is not _UNPLAIN:
            continue
        if plain is _UNPLAIN:
            return None
        out[key] = plain
    return out


_UNPLAIN = object()


def _mpl_plain(lib: Any, v: Any) -> Any:
    """An rcParams value as plain builtins (see `_read_matplotlib`), else `_UNPLAIN`."""
    small = _plain_row(v)
    if small is not _UNPLAIN:
        return small
    if not lib.proven(type(v)):
        return _UNPLAIN
    d = lib.attrs(v)
    if type(dict.get(d, "_value_")) is str:  # (JoinStyle, CapStyle: an Enum member)
        return dict.get(d, "_value_")
    left = dict.get(d, "_left")
    if (dict.get(d, "_right") is None and dict.get(d, "_op") is None and type(left) is list and left
            and all(_str_keyed(e) for e in left)):
        rows = [{k: _plain_row(x) for k, x in dict.items(e)} for e in left]
        if all(x is not _UNPLAIN for row in rows for x in row.values()):
            return {"cycler": rows}  # (a cycler('color', [...]): its rows)
    return _UNPLAIN


def _plain_row(v: Any) -> Any:
    """A simple value, or a list or tuple of them as a list; else `_UNPLAIN`."""
    if _simple(v):
        return v
    if type(v) is list or type(v) is tuple:
        return list(v) if all(_simple(x) for x in v) else _UNPLAIN
    return _UNPLAIN


def _read_jax(lib: Any) -> Any:
    cfg = lib.mod("jax._src.config")
    config = cfg.get("config")
    if not lib.proven(type(config)):
        return None
    backends = lib.mod("jax._src.xla_bridge").get("_backends")
    if type(backends) is dict and any(type(k) is not str or k != "cpu" for k in dict.keys(backends)):
        return None  # an accelerator backend: the worker's devices are not the kernel's
    holders = lib.attrs(config).get("_value_holders")
    if type(holders) is not dict:
        return None
    out = {}
    for key, h in dict.items(holders):
        if type(key) is not str or any(w in key for w in _JAX_LOCAL):
            continue
        if not lib.proven(type(h)):
            return None
        get = lib.method(type(h), "get_global", None)
        val = lib.call(get, "get_global", h) if get is not None else lib.attr(h, "value")
        if _simple(val):
            out[key] = val
    return out


def _read_tf(lib: Any) -> Any:
    cfg = lib.mod("tensorflow._api.v2.config") or lib.mod("tensorflow.config")
    out = {"run_functions_eagerly": lib.call(cfg.get("functions_run_eagerly"), "functions_run_eagerly"),
           "soft_device_placement": lib.call(cfg.get("get_soft_device_placement"), "get_soft_device_placement")}
    if not all(type(v) is bool for v in out.values()):
        return None
    seed = _read_tf_seed(lib)
    gen = _read_tf_generator(lib)
    return None if seed is None or gen is False else {**out, "seed": seed, "generator": gen}


def _read_tf_generator(lib: Any) -> Any:
    """TensorFlow's global `tf.random.Generator` (`tf.random.get_global_generator()`, made on first use):
    [algorithm, its state as ints] read by the library's own properties (`Generator.state`, `.algorithm`, the
    variable's `numpy`), None when none was made yet; False when it cannot be read so."""
    gen = lib.mod("tensorflow.python.ops.stateful_random_ops").get("global_generator")
    if gen is None:
        return None
    cls = type(gen)
    if not lib.proven(cls):
        return False

    def prop(obj: Any, name: str) -> Any:
        p = lib.method(type(obj), name, None)
        if type(p) is not property:
            raise LookupError(name)
        return lib.call(lib.attr(p, "fget"), name, obj)

    try:
        alg, var = prop(gen, "algorithm"), prop(gen, "state")
        if not lib.proven(type(var)):
            return False
        arr = lib.call(lib.method(type(var), "numpy", None), "numpy", var)
        state = lib.call(lib.method(type(arr), "tolist", None), "tolist", arr)
    except LookupError:
        return False
    if type(alg) is not int or type(state) is not list or not all(type(x) is int for x in state):
        return False
    return [alg, state]


def _read_tf_seed(lib: Any) -> Any:
    """TensorFlow's eager global seed (`tf.random.set_seed`, the context's `_seed`) and the generator its random
    ops draw their operation seeds from (`_rng`, a `random.Random`): [seed, its state], [None, None] when no seed
    was set; None when either is not plain (then TensorFlow's state is unread: a crash in it only likely)."""
    ctx = lib.mod("tensorflow.python.eager.context").get("_context")
    if ctx is None:
        return [None, None]
    if not lib.proven(type(ctx)):
        return None
    d = lib.attrs(ctx)
    seed, rng = d.get("_seed"), d.get("_rng")
    if seed is None and rng is None:
        return [None, None]
    if type(seed) is not int:
        return None
    return [seed, _random_state(lib, rng)] if rng is not None else [seed, None]


def _random_state(lib: Any, inst: Any) -> Any:
    """A `random.Random`'s state as plain lists (`getstate`, the class proven the library's), else None."""
    cls = lib.mod("random").get("Random")
    if cls is None or type(inst) is not cls or not lib.proven(cls):
        return None
    state = lib.call(lib.method(cls, "getstate"), "getstate", inst)
    if type(state) is not tuple or len(state) != 3 or type(state[1]) is not tuple:
        return None
    if not all(type(k) is int for k in state[1]) or not (state[2] is None or type(state[2]) is float):
        return None
    return [state[0], list(state[1]), state[2]]


def _read_keras(lib: Any) -> Any:
    cfg = lib.mod("keras.config") or lib.mod("keras.src.backend.config")
    out = {name: lib.call(cfg.get(name), name) for name in ("floatx", "image_data_format", "epsilon")}
    policy = cfg.get("dtype_policy")
    if policy is not None:
        p = lib.call(policy, "dtype_policy")
        name = lib.attrs(p).get("_name") if lib.proven(type(p)) else None
        if type(name) is not str:
            return None
        out["dtype_policy"] = name
    if not all(_simple(v) for v in out.values()):
        return None
    seed = _read_keras_seed(lib)
    return None if seed is None else {**out, "seed": seed}


def _read_keras_seed(lib: Any) -> Any:
    """Keras's global random state (`keras.utils.set_random_seed`, `keras.random.*` without a seed): the seed it
    recorded and its global `SeedGenerator`'s state variable (the kernel's main thread's: the export runs there),
    [seed, [two ints] or None]; None when not plain or not read by the library's own code."""
    tracker = lib.mod("keras.src.backend.common.global_state").get("GLOBAL_STATE_TRACKER")
    if tracker is None:
        return [None, None]
    if not lib.proven(type(tracker)):
        return None
    d = lib.call(lib.method(type(tracker), "__getattribute__"), "__getattribute__", tracker, "__dict__")
    if not _str_keyed(d):
        return None
    seed, gen = d.get("global_random_seed"), d.get("global_seed_generator")
    if not (seed is None or type(seed) is int):
        return None
    if gen is None:
        return [seed, None]
    cls = lib.mod("keras.src.random.seed_generator").get("SeedGenerator")
    var = lib.attrs(gen).get("state") if type(gen) is cls and lib.proven(cls) else None
    if var is None or not lib.proven(type(var)):
        return None
    arr = lib.call(lib.method(type(var), "numpy", None), "numpy", var)
    values = lib.call(lib.method(type(arr), "tolist"), "tolist", arr)
    if type(values) is not list or len(values) != 2 or not all(type(x) is int for x in values):
        return None
    return [seed, values]


_LOG_MAX = 500  # loggers whose settings differ from the defaults, at most (more: not read)


def _read_logging(lib: Any) -> Any:
    """`logging`'s settings (red team round 18, G1): each logger's level, `disabled` and `propagate` where they differ
    from a fresh logger's (`setLevel`, `basicConfig(level=...)`, `dictConfig`'s disabling, `tf.get_logger()`), by
    name ("" the root), `logging.disable`'s level and `raiseExceptions`. Read from the instance dicts of the loggers
    the manager holds (a `Logger.__reduce__` is `getLogger(name)`: the worker's has the defaults otherwise); a
    logger of a class the notebook defined is passed over (its settings read, its class not the worker's). Not the
    handlers (objects; what they do is output, not an outcome)."""
    lg = lib.mod("logging")
    logger_t, root_t, holder_t, manager_t = (lg.get(n) for n in ("Logger", "RootLogger", "PlaceHolder", "Manager"))
    root = lg.get("root")
    if not all(lib.proven(t) for t in (logger_t, root_t, holder_t, manager_t)) or type(root) is not root_t:
        return None
    manager = lib.method(logger_t, "manager")
    if type(manager) is not manager_t:
        return None
    md = lib.attrs(manager)
    # (`Manager.disable` is a property over `_disable` since Python 3.7)
    loggers, disable, raising = md.get("loggerDict"), md.get("_disable", md.get("disable")), lg.get("raiseExceptions")
    if not _str_keyed(loggers) or type(disable) is not int or not _simple(raising):
        return None
    out: dict = {}
    for name, logger in [("", root), *dict.items(loggers)]:
        t = type(logger)
        if t is holder_t or not (t is logger_t or t is root_t or lib.proven(t)):
            continue
        d = lib.attrs(logger)
        row = [d.get("level"), d.get("disabled"), d.get("propagate")]
        if type(row[0]) is not int or not _simple(row[1]) or not _simple(row[2]):
            return None
        if row != [30 if name == "" else 0, False, True]:
            out[name] = row
            if len(out) > _LOG_MAX:
                return None
    return {"loggers": out, "disable": disable, "raise": raising}


def _read_socket(lib: Any) -> Any:
    """The default timeout of new sockets (`socket.setdefaulttimeout`; red team round 18, G10)."""
    v = lib.call(lib.mod("socket").get("getdefaulttimeout"), "getdefaulttimeout")
    return {"timeout": v} if v is None or type(v) is float else None


def _read_process(lib: Any) -> Any:
    """The process's file-mode mask (`os.umask`; red team round 18, G10: the mode of a file the cell makes), read
    from /proc/self/status (no call of `umask`, which sets it); {} where /proc does not say."""
    status = lib.proc_status()
    for line in status.splitlines():
        if line.startswith("Umask:"):
            return {"umask": int(line.split()[1], 8)}
    return {}


_STANDARD_SIMPLE = ("True", "False", "None")


def _read_builtins(lib: Any) -> Any:
    """Plain values the notebook put in the builtins (`builtins.DEBUG = True`; red team round 18, G10: `if DEBUG:`
    was a certain false NameError in the copy): every public name whose value is a plain builtin (a finite float:
    JSON has no other). (Other values the notebook put there are copied as the cell's names: kernel/export
    `_added_builtins`.)"""
    return {k: v for k, v in dict.items(lib.mod("builtins")) if type(k) is str and not k.startswith("_")
            and k not in _STANDARD_SIMPLE and plain_builtin(v)}


def plain_builtin(v: Any) -> bool:
    """A value `_read_builtins` carries: a plain builtin, a float only where finite (JSON has no other)."""
    return _simple(v) and (type(v) is not float or v - v == 0.0)


# (key, reader, the module whose presence means the library is loaded; "" for always)
_READERS = (("interpreter", _read_interpreter, ""), ("numpy", _read_numpy, "numpy"),
            ("numpy_random", _read_numpy_random, "numpy.random.mtrand"), ("random", _read_random, "random"),
            ("decimal", _read_decimal, "decimal"), ("warnings", _read_warnings, "warnings"),
            ("pandas", _read_pandas, "pandas._config.config"), ("sklearn", _read_sklearn, "sklearn._config"),
            ("matplotlib", _read_matplotlib, "matplotlib"),
            ("jax", _read_jax, "jax._src.config"),
            ("tf", _read_tf, "tensorflow"), ("keras", _read_keras, "keras"),
            ("logging", _read_logging, "logging"), ("socket", _read_socket, "socket"), ("process", _read_process, ""),
            ("builtins", _read_builtins, ""))


# -- apply side (the worker) ---------------------------------------------------------------------------------
def apply_carried(settings: dict) -> list[str]:
    """Apply the kernel's carried state in this (worker) process; the libraries whose state, read back, is not the
    kernel's (or could not be read in the kernel) are returned by name."""
    import sys
    missed: list[str] = [str(k) for k in settings.get("unread") or ()]
    try:
        limit = int(settings.get("recursionlimit") or 0)
        if limit > sys.getrecursionlimit():
            sys.setrecursionlimit(limit)
    except (ValueError, RecursionError):
        pass
    lib = WorkerLib()
    for key, fn, module in _READERS:
        if key not in settings or key in missed:
            continue
        want = settings[key]
        try:
            if module and module not in sys.modules:
                __import__(module)
            _APPLY[key](want)
            if fn(lib) != want:
                missed.append(key)
        except Exception:
            missed.append(key)
    return missed


class WorkerLib:
    """The read side's accessors in the worker: the process is the copy's own, so plain lookups are fine."""

    def mod(self, name: str) -> dict:
        import sys
        m = sys.modules.get(name)
        return vars(m) if m is not None else {}

    def call(self, fn: Any, name: str, *args: Any) -> Any:
        if fn is None:
            raise LookupError(name)
        return fn(*args)

    def method(self, cls: type, name: str, *default: Any) -> Any:
        return getattr(cls, name, *default)

    def attr(self, obj: Any, name: str) -> Any:
        return getattr(obj, name)

    def attrs(self, obj: Any) -> dict:
        return vars(obj) if hasattr(obj, "__dict__") else {}

    def proven(self, cls: Any) -> bool:
        return cls is not None

    def proc_status(self) -> str:
        try:
            with open("/proc/self/status") as f:
                return f.read()
        except OSError:
            return ""

    def class_name(self, cls: Any) -> str | None:
        return f"{cls.__module__}:{cls.__qualname__}" if resolve_class(f"{cls.__module__}:{cls.__qualname__}") is cls \
            else None


def resolve_class(name: str) -> Any:
    """The class a `module:qualname` names in this process (its module already imported), else None."""
    import sys
    mod, _, qual = name.partition(":")
    obj: Any = sys.modules.get(mod)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _loaded(name: str) -> Any:
    """A library the worker imported again (worker/main `_import`), by name (a shared file imports only the
    standard library)."""
    import importlib
    return importlib.import_module(name)


def _apply_interpreter(v: dict) -> None:
    import sys
    if "int_max_str_digits" in v:
        sys.set_int_max_str_digits(int(v["int_max_str_digits"]))


def _apply_numpy(v: dict) -> None:
    np: Any = _loaded("numpy")
    np.seterr(**v["seterr"])
    np.set_printoptions(**v["printoptions"])


def _apply_numpy_random(v: list) -> None:
    np: Any = _loaded("numpy")
    np.random.set_state(("MT19937", np.array(v[0], dtype=np.uint32), v[1], v[2], v[3]))


def _apply_random(v: list) -> None:
    import random
    random.setstate((v[0], tuple(v[1]), v[2]))


def _apply_decimal(v: dict) -> None:
    import decimal
    ctx = decimal.getcontext()
    for f in _DECIMAL_FIELDS:
        setattr(ctx, f, v[f])
    for field in ("traps", "flags"):
        signals = getattr(ctx, field)
        for name, on in v[field].items():
            signals[getattr(decimal, name)] = on


def _apply_warnings(v: list) -> None:
    import warnings
    filters = []
    for action, msg, cat, mod, lineno in v:
        category = resolve_class(cat)
        if category is None:
            raise LookupError(cat)
        filters.append((action, _matcher(msg), category, _matcher(mod), lineno))
    current: Any = warnings.filters
    current[:] = filters
    warnings._filters_mutated()  # type: ignore[attr-defined]


def _matcher(part: list | None) -> Any:
    import re
    if part is None:
        return None
    return part[1] if part[0] == "str" else re.compile(part[1], part[2])


def _apply_pandas(v: dict) -> None:
    pd: Any = _loaded("pandas")
    for key, val in v.items():
        pd.set_option(key, val)


def _apply_sklearn(v: dict) -> None:
    _loaded("sklearn").set_config(**v)


def _apply_matplotlib(v: dict) -> None:
    import warnings
    mpl: Any = _loaded("matplotlib")
    rows = {k: val for k, val in v.items() if type(val) is dict}
    with warnings.catch_warnings():  # (a deprecated key the notebook set warned there already)
        warnings.simplefilter("ignore")
        mpl.rcParams.update({k: val for k, val in v.items() if k not in rows})
        for k, val in rows.items():
            keys = list(val["cycler"][0])
            mpl.rcParams[k] = _loaded("cycler").cycler(**{n: [row[n] for row in val["cycler"]] for n in keys})


def _apply_jax(v: dict) -> None:
    jax: Any = _loaded("jax")
    holders = jax.config._value_holders
    for key, val in v.items():
        h = holders.get(key)
        now = h.get_global() if hasattr(h, "get_global") else getattr(h, "value", None)
        if h is not None and now != val:
            jax.config.update(key, val)


def _apply_tf(v: dict) -> None:
    tf: Any = _loaded("tensorflow")
    tf.config.run_functions_eagerly(v["run_functions_eagerly"])
    tf.config.set_soft_device_placement(v["soft_device_placement"])
    seed, rng = v.get("seed") or (None, None)
    if seed is not None:
        ctx: Any = _loaded("tensorflow.python.eager.context").context()
        ctx._set_global_seed(seed)
        if rng is not None:
            ctx._rng.setstate((rng[0], tuple(rng[1]), rng[2]))
    gen = v.get("generator")
    if gen is not None:  # (none made in the kernel: the worker makes none either, read back as None)
        tf.random.set_global_generator(tf.random.Generator.from_state(gen[1], gen[0]))


def _apply_keras(v: dict) -> None:
    keras: Any = _loaded("keras")
    cfg = keras.config
    cfg.set_floatx(v["floatx"])
    cfg.set_image_data_format(v["image_data_format"])
    cfg.set_epsilon(v["epsilon"])
    if "dtype_policy" in v:
        cfg.set_dtype_policy(v["dtype_policy"])
    seed, state = v.get("seed") or (None, None)
    if seed is not None or state is not None:
        np: Any = _loaded("numpy")
        glob: Any = _loaded("keras.src.backend.common.global_state")
        glob.set_global_attribute("global_random_seed", seed)
        if state is None:
            glob.set_global_attribute("global_seed_generator", None)
        else:
            gen = _loaded("keras.src.random.seed_generator").SeedGenerator(seed=0)  # (draws nothing from `random`)
            gen.state.assign(np.asarray(state, dtype=gen.state.dtype))
            glob.set_global_attribute("global_seed_generator", gen)


def _apply_logging(v: dict) -> None:
    import logging
    want = v["loggers"]
    for name, logger in [("", logging.root), *list(logging.Logger.manager.loggerDict.items())]:
        if isinstance(logger, logging.Logger) and name not in want:  # (one of the worker's own: fresh in the kernel)
            logger.setLevel(logging.WARNING if name == "" else logging.NOTSET)
            logger.disabled, logger.propagate = False, True
    for name, (level, disabled, propagate) in want.items():
        logger = logging.getLogger(name) if name else logging.root
        logger.setLevel(level)
        logger.disabled, logger.propagate = disabled, propagate
    logging.disable(v["disable"])
    logging.raiseExceptions = v["raise"]


def _apply_socket(v: dict) -> None:
    import socket
    socket.setdefaulttimeout(v["timeout"])


def _apply_process(v: dict) -> None:
    import os
    if "umask" in v:
        os.umask(v["umask"])


def _apply_builtins(v: dict) -> None:
    import builtins
    for name, value in v.items():
        setattr(builtins, name, value)


_APPLY: dict[str, Any] = {"interpreter": _apply_interpreter, "numpy": _apply_numpy, "numpy_random": _apply_numpy_random,
          "random": _apply_random, "decimal": _apply_decimal, "warnings": _apply_warnings, "pandas": _apply_pandas,
          "sklearn": _apply_sklearn, "matplotlib": _apply_matplotlib,
          "jax": _apply_jax, "tf": _apply_tf, "keras": _apply_keras, "logging": _apply_logging,
          "socket": _apply_socket, "process": _apply_process, "builtins": _apply_builtins}
