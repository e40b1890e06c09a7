"""Transplant, kernel side: the entry of the export of what one cell needs from the user's kernel.

Installed privately as `_crane_transplant` (see `crane.sandbox.transplant`) and called through a private
request, like the probe: it binds no name in the user's namespace, leaves RNG states and event callbacks alone,
and runs none of the user's code. `export(args)` takes the daemon's `ExportRequest` as a dict literal (nothing is
parsed in the kernel), checks it at the edge (kernel/export_request.py: every field stated by the daemon, no
default here) and writes into its `dir`:
- `state.pkl` (`state-N.pkl` for a session's N-th export): `{name: object}` for the names the cell reads (found in
  the daemon: the kernel's input transformers are never run), `In`/`Out`/`_`-names included when the cell reads
  them, in ONE pickle (kernel/pickling.py); `buf-N`: its out-of-band buffers;
- `phase`: what it is doing ("shrinking", then "copying"), rewritten as it goes;
- `env.json`: what the worker rebuilds the interpreter from (kernel/environment.py).
The steps, each its own part: every name the export calls is bound at install (kernel/bound.py; the user's
profile/trace hooks are off while it runs: kernel/shield.py); every object is proven before any step touches it
(kernel/proof.py); large values are sized, refused or shrunk before any byte is copied, and the export stops for
the user's cell, its time cap, a cancel, the copy cap or the memory floor (kernel/stops.py); then the proven
objects are pickled (kernel/pickling.py). A stop for a waiting request or the time cap is `transient` in the
answer. A shrunk copy's `state.pkl` also holds, under a key no Python name can have, what the worker needs about
each original for kernel/miniature's `artefact`. What cannot be pickled (open files, sockets, generators, locks,
...) makes the answer `{"ok": False, "reason": "... `name` (type) ..."}`.
"""

from __future__ import annotations

from typing import Any

from crane.kernel_common.ipython_shell import ipython_shell, shell_namespace  # kernel: strip
from crane.sandbox.kernel.bound import (  # kernel: strip
    _EXECUTABLE,
    _T_QUALNAME,
    _THREADING,
    _exists,
    _FunctionType,
    _getprofile,
    _getrecursionlimit,
    _gettrace,
    _join,
    _mdict,
    _module,
    _perf,
    _setprofile,
    _settrace,
    _type_name,
)
from crane.sandbox.kernel.dynamic_reads import dynamic_reads  # kernel: strip
from crane.sandbox.kernel.environment import (  # kernel: strip
    _accessors,
    _carried,
    _facts,
    _Lib,
    _patched_classes,
    _patched_methods,
    _process,
    _settings,
    _traced_models,
)
from crane.sandbox.kernel.export_request import ExportRequestError, check_export_request  # kernel: strip
from crane.sandbox.kernel.finalizers import FinalizerWatch, rebound, runs_python_when_freed  # kernel: strip
from crane.sandbox.kernel.keras_saved import saved_reduce  # kernel: strip
from crane.sandbox.kernel.library_attrs import attr_label, library_attrs  # kernel: strip
from crane.sandbox.kernel.lookups import odd_key  # kernel: strip
from crane.sandbox.kernel.miniature import ShrinkStopped  # kernel: strip
from crane.sandbox.kernel.own_modules import own_modules  # kernel: strip
from crane.sandbox.kernel.pickling import (  # kernel: strip
    _cloudpickle,
    _culprit,
    dump_state,
    lru_reducers,
    torch_reducers,
)
from crane.sandbox.kernel.pristine import _PR_NAMES, _PR_REAL  # kernel: strip
from crane.sandbox.kernel.proof import _patched_builtins, _patched_copyreg, _Proof, _Refused  # kernel: strip
from crane.sandbox.kernel.shield import dumps, free_threaded, private_open  # kernel: strip
from crane.sandbox.kernel.stdlib_own import patched_stdlib  # kernel: strip
from crane.sandbox.kernel.stops import (  # kernel: strip
    _OVER_TIME,
    _QUEUED,
    _Control,
    _copy_cap,
    _memory_room,
    _plan,
    _shrink,
    _shrunk_enough,
    _TooLarge,
    _unreproducible,
)
from crane.sandbox.kernel.transformers import TRANSFORMERS_KEY, shell_transformers, transformers_missed  # kernel: strip
from crane.sandbox.kernel.waiting import shell_watch  # kernel: strip
from crane.sandbox.shared.carry import plain_builtin  # kernel: strip
from crane.sandbox.shared.keras_graph import KERAS_KEY, KerasGraph  # kernel: strip
from crane.sandbox.shared.own_modules import OWN_MODULES_KEY  # kernel: strip
from crane.sandbox.shared.tf_data import tf_data_reducers  # kernel: strip

_SKIP = {"get_ipython", "exit", "quit", "__builtins__", "__builtin__", "__name__", "__doc__", "__spec__", "__loader__",
         "__package__"}


def export(args: Any) -> dict:
    """Write the state the cell reads into the run's private directory (see the module docstring). The user's
    profile/trace hooks are off meanwhile (inline: kernel/shield.py)."""
    saved = (_getprofile(), _gettrace(), _THREADING.get("_profile_hook"),
             _THREADING.get("_trace_hook"))
    _setprofile(None)
    _settrace(None)
    _THREADING["_profile_hook"] = _THREADING["_trace_hook"] = None
    try:
        why = free_threaded()
        if why:
            return {"ok": False, "reason": why}
        resealed: list = []  # (this request's own: the new seal of CRANE's cloudpickle, when this export made one)
        held: list = []  # (what holds the notebook's objects and outlives the export in cycles: released below)
        try:
            out = _export(args, resealed, held)
        finally:
            _release(held)
        if resealed:
            out["cp_seal"] = resealed[0]
        return out
    finally:
        _THREADING["_profile_hook"], _THREADING["_trace_hook"] = saved[2], saved[3]
        _settrace(saved[1])
        _setprofile(saved[0])


def _release(held: list) -> None:
    """Empty what the export's pickler classes hold through their closures — the proof's caches, the reducers'
    table, the finalizer watch — so no object of the notebook stays referenced by the export once it returns: those
    classes are in cycles and live until the kernel's collector runs (kernel/proof._Proof.release, issue 42, fixD)."""
    for h in held:
        if type(h) is dict:
            dict.clear(h)
        else:
            h.release()
    list.clear(held)


def _export(args: Any, resealed: list, held: list) -> dict:
    t0 = _perf()
    try:
        req = check_export_request(args)
    except ExportRequestError as exc:
        return {"ok": False, "reason": f"bad export request: {exc}"}
    if not _exists(_join(req["dir"], "token")):  # (first, by one stat: an export the daemon stopped waiting for,
        # transplant._export's start timeout, runs once the user's cell ends; its token is gone by then)
        return {"ok": False, "reason": "the kernel does not see the daemon's files (another machine or container; "
                                       "or the daemon stopped waiting for this export: no token)"}
    odd = odd_key()  # (first: every step after looks names up in these tables)
    if odd:
        return {"ok": False, "reason": f"the notebook put a key of its own in {odd}: a lookup there would call it in "
                                       "the kernel"}
    patched = _patched_builtins() or _patched_copyreg() or patched_stdlib()  # (before any step: a file's codec)
    if patched:
        return {"ok": False, "reason": f"the notebook replaced {patched}: copying would call it in the kernel"}
    d = req["dir"]
    if not _sees(d, req["token"]):
        return {"ok": False, "reason": "the kernel does not see the daemon's files (another machine or container)"}
    cp = _cloudpickle(resealed)
    if cp is None:
        return {"ok": False, "reason": "CRANE's private cloudpickle is not installed in the kernel"}
    shell = _shell()
    if shell is None:
        return {"ok": False, "reason": "not an IPython kernel"}
    waiting, watch = shell_watch(shell)  # on the main thread, which owns what it watches
    ns = shell_namespace(shell)
    if type(ns) is not dict:
        return {"ok": False, "reason": "the kernel's namespace is not a plain dict"}
    keys = list(dict.keys(ns))
    if not all(type(k) is str for k in keys):  # a str subclass's __eq__/__hash__ would run on every lookup
        return {"ok": False, "reason": "the kernel's namespace has a key that is not a plain string"}
    proof = _Proof()
    held.append(proof)
    # Keras graphs whole, layers of notebook classes rebuilt (shared/keras_graph.py, keras_layers.py; made before any
    # proof: it tells the proof which notebook classes it rebuilds), tf.data pipelines named (shared/tf_data.py)
    graph = KerasGraph(_Lib(proof), saved_reduce)  # (a model's saved bytes reused while unchanged: keras_saved.py)
    limit = req["copy_mb"] << 20
    try:
        room = _memory_room()
        loops = type(req["miniature"]) is dict and bool(dict.get(req["miniature"], "loops"))  # a loop miniature's
        names = req["names"] + (["_ih"] if loops else [])  # worker reads earlier cells' sources (kernel/miniature)
        objs = _cell_objects(ns, names, req["skip"], proof)
        freed = rebound(ns, req["rebinds"], objs, req["skip"], proof)  # (kernel/finalizers.py)
        objs.update(freed)
        # the names read by a string (the cell's, where it reads the namespace so; a notebook function's): a guess,
        # copied where it can be (kernel/dynamic_reads.py), never the export's failure
        by_string = req["strings"] if req["by_string"] else []
        extra, readers, reach, reach_sets = dynamic_reads(ns, names + by_string, req["strings"])
        guessed = _guessed_objects(ns, by_string + extra + _classes_by_name(ns, objs), req["skip"], objs, proof)
        builtins_lost: list = []  # (names the kernel's builtins hold that could not be copied: copy_crash_doubt)
        added = _added_builtins(ns, names + [w for w in reach if type(w) is str], req["skip"], {**objs, **guessed},
                                proof, builtins_lost)
        guessed.update(added)
        added_names = list(added)
        del added
        spec, why, raw = _plan(objs, proof, req["miniature"], limit, room)
        if guessed:  # (taken only where they fit: no shrinking of the cell's own values because of a guess)
            try:
                with_guessed = _plan({**objs, **guessed}, proof, req["miniature"], limit, room)
            except (_Refused, _TooLarge):
                with_guessed = None
            if with_guessed is not None and (with_guessed[0] is None or req["miniature"]):
                spec, why, raw = with_guessed
                objs.update(guessed)
            else:
                guessed = {}
    except (_Refused, _TooLarge) as exc:
        return {"ok": False, "reason": str(exc)}
    # names only from here: a dict of these values held to the end would be one more reference to each, which the
    # finalizer tail counts as the kernel's (the copy then outlived the cell's `del` and its finalizer never ran)
    trials = [*guessed, *freed]
    rebinds = list(freed)
    del guessed, freed
    cap = _copy_cap(limit)
    # one kernel-time budget for the whole export, shrinking included; the same stops from here on
    # where the watch works the copy stops the moment a request waits: it may take `watched_max_s` of kernel time
    max_s = float(req["watched_max_s"] if waiting is not None else req["max_s"])
    ctl = _Control(d, max_s, cap, waiting)
    watched = watch if waiting is not None else None  # what stopped it for a queued request (None: its time cap)
    kept: list = []
    shrink_error = None
    if spec:
        _phase(d, "shrinking")
        try:
            kept, known = _shrink(objs, spec, proof, ctl.check)
        except ShrinkStopped:
            return _stopped(ctl.stop or _OVER_TIME, waiting, watch, watched, t0)
        except Exception as exc:  # copied whole, as if nothing were large
            shrink_error = f"{type(exc).__name__}: {exc}"
        if kept:
            objs["\x00crane-shrunk"] = known
    try:
        _shrunk_enough(raw, cap, kept)
    except _TooLarge as exc:
        return {"ok": False, "reason": str(exc)}
    settings = _settings(proof, _getrecursionlimit())
    accessors = _accessors(proof)
    if accessors:
        objs["\x00crane-accessors"] = accessors
    methods = _patched_methods(proof, objs)
    if methods:
        objs["\x00crane-patched"] = methods
    try:
        lib_attrs, attrs_held = library_attrs(objs, req["attrs"] + [w for w in reach if type(w) is str], proof)
    except Exception:  # (nothing carried: never the export's failure)
        lib_attrs, attrs_held = [], []
    attrs_lost: list = []  # (what an earlier cell set there that the copy could not take: state_doubt)
    copyable: list = []
    for item in lib_attrs:
        (copyable if _copies(item[2], proof) else attrs_lost).append(item)
    attrs_lost = [attr_label(o, n) for o, n, _, _ in attrs_lost]
    lib_attrs = copyable
    del copyable
    tag = f"-{req['tag']}" if req["tag"] else ""  # a session's exports: state-N.pkl, buf-N-i
    _phase(d, "copying")
    ctl.copying()
    reducers = {**torch_reducers(proof), **lru_reducers(proof), **tf_data_reducers(_Lib(proof, fresh=not req["tag"])), **graph.reducers()}
    reducers.update(_shell_reducer(shell))
    held.append(reducers)
    # each guess, and each value the cell rebinds copied for its finalizer, pickles on its own or is left out (a dry
    # run, counted, not written): a rebound connection (3.13's sqlite3.Connection has `__del__`) failed the export
    left_out: list = []  # values the cell rebinds whose freeing runs Python code, left out (kernel/finalizers.py)

    def pickles(part: dict) -> bool:  # (a dry run: counted, not written)
        return dump_state(part, reducers, cp=cp, d=None, tag=tag, ctl=_Control(d, max_s, cap), proof=proof)["ok"]

    for name in trials:
        if not pickles({name: objs[name]}):
            dropped = objs.pop(name, None)
            if name in rebinds and runs_python_when_freed(dropped):
                left_out.append(f"`{name}` ({_type_name(dropped)})")
            dropped = None
    builtins_lost += [n for n in added_names if n not in objs]  # (left out for size, or its dry run failed)
    # what an earlier cell put on library modules and classes (kernel/library_attrs.py), each where it pickles (a dry
    # run: `np.random.default_rng = partial(<the original>)` names a function no longer found under its name)
    if lib_attrs:
        kept_attrs = lib_attrs if pickles({"\x00crane-libattrs": lib_attrs}) else \
            [item for item in lib_attrs if pickles({"\x00crane-libattrs": [item]})]
        attrs_lost += [attr_label(item[0], item[1]) for item in lib_attrs if not any(item is k for k in kept_attrs)]
        if kept_attrs:
            objs["\x00crane-libattrs"] = kept_attrs
        del kept_attrs
    del lib_attrs
    # the notebook's cell transformers (kernel/transformers.py), copied only when they pickle on their own (a dry run:
    # one that does not is missed, never the export's failure)
    transformers, shell_missed = shell_transformers(shell, proof)
    if transformers is not None:
        if pickles({TRANSFORMERS_KEY: transformers}):
            objs[TRANSFORMERS_KEY] = transformers
        else:
            shell_missed = transformers_missed(transformers)
    own_data, own_prints = own_modules()  # the notebook's own modules: their plain data and code prints
    if own_data:
        objs[OWN_MODULES_KEY] = own_data
    graph.scan(objs)  # Sequential models sharing a layer with another copied value: rebuilt from their layers
    objs[KERAS_KEY] = graph.record  # (last: what the worker does once every object is whole)
    # what runs when a copied object is freed (its finalizers, weak callbacks, the kernel's references), pickled after
    # the namespace by the same pickler (kernel/finalizers.py)
    fin_watch = FinalizerWatch(proof)
    held.append(fin_watch)
    out = dump_state(objs, reducers, cp=cp, d=d, tag=tag, ctl=ctl, proof=proof, watch=fin_watch)
    objs.pop(KERAS_KEY, None)
    objs.pop(OWN_MODULES_KEY, None)
    objs.pop("\x00crane-accessors", None)
    objs.pop("\x00crane-patched", None)
    objs.pop("\x00crane-libattrs", None)
    sent_transformers = objs.pop(TRANSFORMERS_KEY, None) is not None
    if not out["ok"]:
        objs.pop("\x00crane-shrunk", None)
        ename, evalue = out["error"] or ("Error", "")
        if ename == "Stopped":
            return _stopped(evalue, waiting, watch, watched, t0)
        return {"ok": False, "reason": _culprit(cp, objs, reducers, ename, evalue, d, waiting, proof.rebuilt), "watch": watched}
    facts = _facts(shell, keys, settings, len(out["buffers"]), shell_missed)
    facts["dynamic_readers"] = readers
    facts["reach"] = reach  # names the notebook functions the cell reaches read (transplant.state_doubt)
    facts["attrs_held"] = attrs_held  # `owner:name` the kernel's library modules and classes hold (copy_crash_doubt)
    facts["builtins_lost"] = builtins_lost[:200]
    facts["attrs_lost"] = attrs_lost[:200]  # what an earlier cell set there that the copy could not take (state_doubt)
    facts["reach_sets"] = reach_sets  # the sets of strings they read where order can show (the same)
    facts["own_modules"] = own_prints
    with private_open(_join(d, "env.json"), "w") as f:
        f.write(dumps(facts))
    objs.pop("\x00crane-shrunk", None)
    return {"ok": True, "copied": [[n, _type_name(o)] for n, o in dict.items(objs)], "bytes": out["bytes"],
            "patched": _patched_classes(proof, objs, methods), "transformers": sent_transformers,
            "traced": _traced_models(objs),
            "kept": kept, "shrunk": why if kept else None, "raw_bytes": raw, "shrink_error": shrink_error,
            "executable": _EXECUTABLE, "modules": facts["modules"], "cuda": bool(facts["torch"].get("cuda")),
            "carried": _carried(settings, facts, proof, {k: v for k, v in dict.items(objs) if not graph.covers(v)}),
            "finalizers_left_out": left_out,
            **_process(), "export_ms": round((_perf() - t0) * 1000.0, 3), "watch": watched}


def _sees(d: str, token: str) -> bool:
    """The kernel sees the daemon's directory `d`: its `token` file holds `token`."""
    try:
        with private_open(_join(d, "token"), "r") as f:
            return bool(f.read() == token)
    except OSError:
        return False


def _cell_objects(ns: dict, names: list, skip: list, proof: _Proof) -> dict:
    """{name: object} of the cell's names in the namespace (`In`/`Out` as plain copies, under either name), each
    proven (`_Proof.check`) and reproducible; `_Refused` naming the first that is not."""
    skipped = set(skip)
    objs: dict = {}
    for name in names:
        if name in _SKIP or name in skipped or name not in ns:
            continue
        obj = _history_value(ns, name) if name in ("In", "_ih", "Out", "_oh") else dict.get(ns, name)
        _check_copyable(name, obj, proof)
        objs[name] = obj
    for pair in (("In", "_ih"), ("Out", "_oh")):  # read under either name: the same object under both
        for a, b in (pair, pair[::-1]):
            if a in objs and b not in objs and b in ns:
                objs[b] = objs[a]
    return objs


def _check_copyable(name: str, obj: Any, proof: _Proof) -> None:
    """`_Refused`, naming `name`, unless `obj` is proven (`_Proof.check`) and reproducible."""
    try:
        proof.check(obj)
    except _Refused as exc:
        raise _Refused(f"`{name}` ({_type_name(obj)}) cannot be copied without running the notebook's code in "
                       f"the kernel: {exc}") from None
    why = _unreproducible(obj)
    if why:
        raise _Refused(f"`{name}` ({_type_name(obj)}) {why}")


def _copies(obj: Any, proof: _Proof) -> bool:
    """`_check_copyable` as a test (a guess's: one that is not copyable is left out)."""
    try:
        _check_copyable("(a guess)", obj, proof)
    except _Refused:
        return False
    return True


def _guessed_objects(ns: dict, names: list, skip: list, objs: dict, proof: _Proof) -> dict:
    """{name: object} of the names read by a string that the namespace holds and `objs` lacks, each `_check_copyable` as
    `_cell_objects` asks; one that is not is left out (a guess: never the export's failure)."""
    skipped = set(skip)
    out: dict = {}
    for name in names:
        if name in _SKIP or name in skipped or name in objs or name in out or name not in ns \
                or name in ("In", "_ih", "Out", "_oh"):
            continue
        obj = dict.get(ns, name)
        if _copies(obj, proof):
            out[name] = obj
    return out


# names the shell and the site module put in the builtins (the worker's shell has its own): never copied
_SHELL_BUILTINS = {"input", "open", "display", "get_ipython", "exit", "quit", "help", "copyright", "credits",
                   "license", "execfile", "runfile", "reload", "dreload", "None", "True", "False", "Ellipsis",
                   "NotImplemented", "WindowsError"}


def _added_builtins(ns: dict, names: list, skip: list, objs: dict, proof: _Proof, lost: list) -> dict:
    """{name: value} of the names the cell (or a notebook function it reaches) reads that the namespace lacks and
    the kernel's builtins hold beyond the interpreter's and the shell's own (`builtins.DEBUG = True`,
    `builtins.log = my_logger`; red team round 18, G10: `if DEBUG:` was a certain false NameError in the copy, a
    fresh worker's builtins lacking them): copied as the cell's names (its lookup finds them before the builtins),
    each `_check_copyable` as `_cell_objects` asks; one that is not is left out (a guess), named in `lost`. The
    builtins are read by their C dict (kernel/pristine.py's `_PR_REAL`), keys by exact type."""
    skipped = set(skip)
    out: dict = {}
    for name in names:
        if type(name) is not str or name.startswith("__") or name in _SKIP or name in _SHELL_BUILTINS \
                or name in _PR_NAMES or name in skipped or name in objs or name in out or name in ns \
                or name not in _PR_REAL:
            continue
        obj = dict.get(_PR_REAL, name)  # (its keys proven exact `str` with every module's: lookups.odd_key)
        if plain_builtin(obj):
            continue  # (a plain value: set on the worker's builtins, shared/carry `_read_builtins`)
        if _copies(obj, proof):
            out[name] = obj
        else:
            lost.append(name)
    return out


_CLASS_ITEMS = 100  # items of a copied plain container whose classes are looked for


def _classes_by_name(ns: dict, objs: dict) -> list:
    """The names the namespace binds to the very classes of the copied values (a value's own, and its first items'
    where it is a plain list, tuple or dict): copied too where they can be (a guess), so the copy holds a class
    under its name as the kernel does and `pickle.dump(p, f)`, `torch.save(model, path)` find `__main__.Point`
    (round 16, F1: a certain false PicklingError, the cell naming only the instance). A class the kernel rebinds
    under that name since (`p` an instance of an older `Point`) is not its own entry there: never bound in its
    place. Names are read from the type's C slot and looked up in the namespace (exact `str` keys, proven)."""
    kinds: dict = {}
    for v in list(dict.values(objs)):
        t = type(v)
        kinds[id(t)] = t
        items = (list.__getitem__(v, slice(0, _CLASS_ITEMS)) if t is list
                 else tuple.__getitem__(v, slice(0, _CLASS_ITEMS)) if t is tuple
                 else list(dict.values(v))[:_CLASS_ITEMS] if t is dict else [])
        for x in items:
            kinds[id(type(x))] = type(x)
    out: list = []
    for k in dict.values(kinds):
        name = _T_QUALNAME.__get__(k, type)
        if type(name) is str and name not in out and dict.get(ns, name) is k:
            out.append(name)
    return out


def _history_value(ns: dict, name: str) -> Any:
    """`In`/`_ih` as a plain list of strings and `Out`/`_oh` as a plain dict (copies: never the user's)."""
    v = dict.get(ns, name)
    if name in ("In", "_ih") and type(v) is list:
        return [x if type(x) is str else "" for x in list.__iter__(v)]
    if name in ("Out", "_oh") and type(v) is dict:
        return dict(dict.items(v))
    return v


def _shell() -> Any:
    """The kernel's InteractiveShell (kernel_common/ipython_shell.py), of a library's class (a shell of a class the
    notebook defined is none)."""
    shell = ipython_shell()
    return shell if shell is not None and _Proof().library_class(type(shell)) else None


_F_GLOBALS = _FunctionType.__dict__["__globals__"].__get__  # (a function's globals: a C member, nothing asked)


def _shell_reducer(shell: Any) -> dict:
    """The kernel's shell, wherever the copied state holds it (`ip = get_ipython()`, a bound method of it, an object
    keeping it), is the worker's shell there, as `get_ipython()` in the worker's cell gives it: pickled as a call of
    IPython's own `get_ipython` (by reference; the object itself, its history database and its kernel, never
    walked: before, any cell using `ip` was `unavailable`, 'cannot pickle sqlite3.Connection'). Only where that
    function is IPython's own (its globals are `IPython.core.getipython`'s namespace): nothing otherwise."""
    md = _mdict(_module("IPython.core.getipython"))
    fn = dict.get(md, "get_ipython")
    if type(fn) is not _FunctionType or _F_GLOBALS(fn) is not md:
        return {}
    return {type(shell): lambda obj: (fn, ()) if obj is shell else NotImplemented}


def _phase(d: str, what: str) -> None:
    """Say in the run's private directory what the export is doing (`phase`: "shrinking", then "copying"): the
    daemon names it when the export outlasts its request."""
    try:
        with private_open(_join(d, "phase"), "w") as f:
            f.write(what)
    except OSError:
        pass


def _stopped(evalue: str, waiting: Any, watch: str, watched: str | None, t0: float) -> dict:
    """The answer for an export stopped while shrinking or pickling. `transient`: stopped for the user's cell or
    by its kernel-time cap (a passing cause: the daemon may try again), not for what the values are."""
    transient = evalue in (_QUEUED, _OVER_TIME)
    if evalue == _OVER_TIME and waiting is None:
        evalue = f"{evalue} (nothing else could stop it for the user's cell: {watch})"
    return {"ok": False, "reason": f"the cell's inputs were not copied: {evalue}", "watch": watched,
            "transient": transient, "export_ms": round((_perf() - t0) * 1000.0, 3)}
