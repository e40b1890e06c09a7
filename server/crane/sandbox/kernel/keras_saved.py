"""Transplant export, kernel side: a Keras model's saved bytes kept between exports while its content is unchanged.

Runs in the user's kernel (part of `_crane_transplant`, called by shared/keras_graph.py's `KerasGraph.reduce` where a
model or layer is pickled by Keras's own `__reduce__`). That reduce saves the whole object with Keras's saving code
(its configuration, an h5 file of its variables in a zip, a temporary folder) at every verdict, though a notebook
mostly asks verdicts on a model it has not changed since the last one, and Keras's saving makes reference objects
(a Layer, an Optimizer and its variables: `get_attr_skipset`) in the user's kernel each time.

Here Keras's answer (`__reduce__`'s value, holding the saved bytes) is kept with a content key, and given again to
the next export only while the key computed afresh, BEFORE anything is pickled, is equal (never trusted blindly):
- the configuration Keras's saving writes (`serialize_keras_object(model)`, with each value's exact builtin type);
- every Keras variable reachable from the object through instance dicts, lists, tuples and dicts (a superset of
  what Keras's saving walk writes: layers, sublayers, the optimizer, metrics, seed generators), in the walk's order,
  each with its shape, dtype and a BLAKE2b digest of its value (`Variable.numpy()`, Keras's own method; the
  interpreter's `_blake2` type, bound at install: an immutable C type, which Python code cannot make);
- no object reached whose class saves anything but its variables: a class with `save_assets` (lookup tables,
  text vectorisation), or a `save_own_variables` other than Keras's own of `_KS_VARIABLES_ONLY` (each writes its
  object's variables, or values computed from them and its configuration), makes the key None: saved anew each time.
The key is computed before the save: a value changed meanwhile (a cell running beside the export) gives a key that
differs at the next export. Kept only up to `_KS_KEPT_BYTES` of variables per object and `_KS_KEPT_ALL` in all (the
kept bytes live in the user's kernel; a larger model is saved anew, unhashed) and for `_KS_KEPT_MAX` objects, by the
object's id: nothing of the user's object is held or marked (no reference, not even a weak one), and an id reused by
another object is harmless, as Keras's saved bytes are a function of what the key covers (the configuration names
the class). `forget_saved()` drops them. A key that cannot be made (any error, a refusal of `_Lib`) leaves the save
as it was before this module. Everything read follows kernel/environment's `_Lib`: instance dicts and containers
through C methods, C attributes, functions proven the library's own and named as expected; classes compared by
identity and cached by id (no metaclass `__eq__` or `__hash__` runs).
"""

from __future__ import annotations

import abc
import sys
from typing import Any

_KS_KEPT_BYTES = 64 << 20  # variables' bytes at most for a model's saved answer to be kept
_KS_KEPT_ALL = 128 << 20  # variables' bytes of all kept answers at most (then the others are dropped)
_KS_KEPT_MAX = 16  # objects kept at most (then all are dropped)
_KS_WALK_MAX = 200_000  # objects walked at most for a key (the export's pre-walk has the same bound)
_KERAS_SAVED: dict = {}  # id(obj) -> (content key, Keras's __reduce__ value, its variables' bytes)
KERAS_SAVES: dict = {"saved": 0, "reused": 0, "unkeyed": 0, "why": ""}  # since the install (tests, benches; why:
# the last object's reason for no key)
_KS_VARIABLES_ONLY = frozenset((  # Keras's own `save_own_variables` that write only what the key covers
    ("keras.src.layers.layer", "Layer.save_own_variables"),
    ("keras.src.layers.core.dense", "Dense.save_own_variables"),
    ("keras.src.layers.core.einsum_dense", "EinsumDense.save_own_variables"),
    ("keras.src.layers.core.embedding", "Embedding.save_own_variables"),
    ("keras.src.layers.convolutional.base_conv", "BaseConv.save_own_variables"),
    ("keras.src.optimizers.base_optimizer", "BaseOptimizer.save_own_variables"),
))
_KS_MRO = type.__dict__["__mro__"]
_KS_CLS_DICT = type.__dict__["__dict__"]
_KS_FLAGS = type.__dict__["__flags__"]
_KS_MODULE = type.__dict__["__module__"]
_KS_NAME = type.__dict__["__name__"]
_KS_ABCMETA = abc.ABCMeta
_KS_FUNCTION = type(lambda: None)
_KS_SCALARS = (str, int, float, bool, type(None), bytes, complex)  # (compared by identity: no metaclass `__eq__`)
_KS_MODULE_TYPE = type(sys)


def _ks_blake2b() -> Any:
    """The interpreter's `_blake2.blake2b` as it is at install: an immutable C type (Python code cannot make one:
    no class of the notebook's can stand in for it), or None (no key: nothing kept)."""
    mods = sys.modules
    m = dict.get(mods, "_blake2") if type(mods) is dict else None
    try:
        t = object.__getattribute__(m, "__dict__").get("blake2b") if m is not None else None
    except Exception:
        return None
    if type(t) is not type or not _KS_FLAGS.__get__(t, type) & (1 << 8):  # Py_TPFLAGS_IMMUTABLETYPE
        return None
    return t if _KS_MODULE.__get__(t, type) == "_blake2" and _KS_NAME.__get__(t, type) == "blake2b" else None


_KS_B2 = _ks_blake2b()
_KS_B2_UPDATE = _KS_CLS_DICT.__get__(_KS_B2, type).get("update") if _KS_B2 is not None else None
_KS_B2_DIGEST = _KS_CLS_DICT.__get__(_KS_B2, type).get("digest") if _KS_B2 is not None else None


class _KsNoKey(Exception):
    """The object's content cannot be keyed: it is saved anew."""


def saved_reduce(lib: Any, obj: Any, own_reduce: Any) -> Any:
    """Keras's `own_reduce(obj)` (its saved bytes), or the one kept from an earlier export while `obj`'s content key is
    equal (module docstring). `lib`: the export's kernel/environment `_Lib` (`obj` pre-walked by its proof)."""
    try:
        key, size = _ks_key(lib, obj)
    except Exception as exc:  # noqa: BLE001 - no key (a refusal or Keras's error included): Keras saves it as before
        key, size = None, 0
        KERAS_SAVES["why"] = f"{type(exc).__name__}: {exc}"
    kept = dict.get(_KERAS_SAVED, id(obj))
    if key is not None and kept is not None and kept[0] == key:
        KERAS_SAVES["reused"] += 1
        return kept[1]
    rv = lib.call(own_reduce, "__reduce__", obj)
    KERAS_SAVES["saved"] += 1
    dict.pop(_KERAS_SAVED, id(obj), None)
    if key is None:
        KERAS_SAVES["unkeyed"] += 1
    elif type(rv) is tuple:
        if len(_KERAS_SAVED) >= _KS_KEPT_MAX or size + sum(e[2] for e in dict.values(_KERAS_SAVED)) > _KS_KEPT_ALL:
            _KERAS_SAVED.clear()
        _KERAS_SAVED[id(obj)] = (key, rv, size)
    return rv


def forget_saved() -> int:
    """Drop every kept saved answer (the next export saves every model again); how many there were."""
    n = len(_KERAS_SAVED)
    _KERAS_SAVED.clear()
    return n


def _ks_key(lib: Any, obj: Any) -> tuple[tuple, int]:
    """(content key, bytes of the variables) of a Keras object (module docstring); `_KsNoKey` when it has none."""
    if _KS_B2 is None or _KS_B2_UPDATE is None or _KS_B2_DIGEST is None:
        raise _KsNoKey("no BLAKE2b")
    serialize = lib.mod("keras.src.saving.serialization_lib").get("serialize_keras_object")
    variable = lib.mod("keras.src.backend.common.variables").get("Variable")
    ndarray, generic = lib.mod("numpy").get("ndarray"), lib.mod("numpy").get("generic")
    if serialize is None or type(variable) is not _KS_ABCMETA and type(variable) is not type or ndarray is None \
            or type(generic) is not type:
        raise _KsNoKey("not Keras 3")
    config = _ks_frozen(lib.call(serialize, "serialize_keras_object", obj), 0)
    h = _KS_B2()
    shapes: list = []
    size = 0
    for v in _ks_variables(lib, obj, variable):
        fn = lib.method(type(v), "numpy", None)
        if fn is None:
            raise _KsNoKey("a variable without numpy()")
        arr = lib.call(fn, "numpy", v)  # (a 0-d variable's: a numpy scalar, TensorFlow's `numpy()`)
        if type(arr) is not ndarray and not any(k is generic for k in _KS_MRO.__get__(type(arr), type)):
            raise _KsNoKey("a variable's value is not an array")
        dt = lib.attr(lib.attr(arr, "dtype"), "str")
        if type(dt) is not str or "O" in dt:
            raise _KsNoKey("an object array")
        shapes.append((lib.attr(arr, "shape"), dt))
        size += int(lib.attr(arr, "nbytes"))
        if size > _KS_KEPT_BYTES:  # (not hashed further: it would not be kept)
            raise _KsNoKey("its variables are too large to keep")
        try:
            _KS_B2_UPDATE(h, arr)
        except (BufferError, TypeError, ValueError):
            raise _KsNoKey("a variable's value is not one buffer") from None
    return (config, tuple(shapes), _KS_B2_DIGEST(h)), size


def _ks_frozen(v: Any, depth: int) -> Any:
    """A configuration as nested tuples with each value's exact builtin type (so `True` and `1` differ); `_KsNoKey`
    for anything but str, int, float, bool, None, list, tuple and dict (with str keys)."""
    t = type(v)
    if depth > 200:
        raise _KsNoKey("a configuration too deep")
    if t is str or t is int or t is float or t is bool or v is None:
        return (t, v)
    if t is list or t is tuple:
        return (t, tuple(_ks_frozen(x, depth + 1) for x in (list.__iter__(v) if t is list else tuple.__iter__(v))))
    if t is dict:
        out = []
        for k, x in dict.items(v):
            if type(k) is not str:
                raise _KsNoKey("a configuration key that is not a string")
            out.append((k, _ks_frozen(x, depth + 1)))
        return (t, tuple(out))
    raise _KsNoKey("a configuration value that is not plain")


def _ks_variables(lib: Any, obj: Any, variable: type) -> list:
    """The Keras variables reachable from `obj` through instance dicts, lists, tuples and dicts (not through
    modules, classes or functions, which Keras's saving does not follow to variables), in a fixed order; `_KsNoKey`
    where a class reached saves more than its variables (module docstring)."""
    kinds: dict = {}  # id(class) -> 0 walk on, 1 a Keras variable
    out: list = []
    seen: set = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if len(seen) > _KS_WALK_MAX:
            raise _KsNoKey("too many objects")
        t = type(o)
        if t is _KS_FUNCTION or t is type or t is _KS_MODULE_TYPE or any(t is s for s in _KS_SCALARS):
            continue
        if t is dict:
            stack.extend(reversed(list(dict.values(o))))
            continue
        if t is list or t is tuple:
            stack.extend(reversed(list(o)))
            continue
        kind = dict.get(kinds, id(t))
        if kind is None:
            kind = kinds[id(t)] = _ks_kind(lib, t, variable)
        if kind == 1:
            out.append(o)
            continue
        try:
            d = lib.attrs(o)
        except Exception:
            d = None
        if type(d) is dict:
            stack.extend(reversed(list(dict.values(d))))
    return out


def _ks_kind(lib: Any, t: type, variable: type) -> int:
    """1: `t` is a Keras variable class; 0: walk its instances on; `_KsNoKey` where its saving writes more than its
    variables."""
    mro = _KS_MRO.__get__(t, type)
    if type(mro) is not tuple:
        return 0
    for k in mro:
        if k is variable:
            return 1
    if lib.method(t, "save_assets", None) is not None:
        raise _KsNoKey("a class that saves assets")
    own = lib.method(t, "save_own_variables", None)
    if own is None:
        return 0
    if type(own) is not _KS_FUNCTION or (own.__module__, own.__qualname__) not in _KS_VARIABLES_ONLY:
        raise _KsNoKey("a class that saves more than its variables")
    return 0
