"""Keras layers and models of classes the notebook defined, rebuilt in the copy (issue 42). Both sides: the read side
runs in the kernel (called by shared/keras_graph.py's `KerasGraph` from the export's pickler, part of
`_crane_transplant`), the apply side in the transplant worker (`apply_keras`, part of `_crane_sandbox`). Standard
library only (see the package).

Keras's own pickling saves a layer with Keras's saving code, which calls the class's `get_config`, `build`,
`save_own_variables`, ... : for a class of the notebook's that would run the notebook's code in the kernel, so the
export's proof refused it and the run was `unavailable`. Here nothing of such a class runs in the kernel. The class
travels by value (cloudpickle: its code is carried, never called), and the object as what Keras recorded about it
when it was made and built, read from instance dicts as data (C-level reads; no property, no method of the object):
- its constructor's arguments: `_auto_config`, which Keras's `Operation.__new__` records when every argument is a
  str, int, float, bool or None (nested in lists, tuples, dicts); a layer made with another argument (a layer, an
  array, a function) has none and is refused, named (`TypeError`: the run is `unavailable`);
- the shapes it was built with (`_build_shapes_dict`, as Keras's default `get_build_config` gives them);
- its weights' values, in Keras's `Layer.weights` order (`_trainable_variables`, `_non_trainable_variables`, then
  each of `_layers`, depth first, each variable once), each read by Keras's own `numpy` of a variable class proven
  the library's (`lib.call`);
- its name, trainable flag, compile arguments and optimizer variables (`optimizer_values`, also used for the
  functional and Sequential models keras_graph rebuilds).
In the worker the pickle makes it with `cls.__new__(cls, **kwargs)` (NEWOBJ_EX: Keras's `__new__` sees the
constructor's arguments, as in the kernel); `rebuild_layer`, called by keras_graph's `apply_keras` once every object
is loaded and the kernel's settings applied, runs `__init__(**kwargs)`, gives it the kernel's name, builds it with
Keras's `build_from_config` (a class without a `build` of its own first by running `call` on symbolic inputs, as
Keras's first call did), compares the rebuilt weights' count and shapes with the kernel's and assigns the
values (a difference raises: the copy would not be the kernel's layer, so the run is unavailable, never a guess).
"""

from __future__ import annotations

import abc
from typing import Any

LAYER_KEY = "\x00crane-keras-layer"  # a notebook layer's rebuild spec, in its pickle state (no Python name can be it)
_SUBCLASSES = type.__dict__["__subclasses__"]  # bound at install: C-level reads only
_ABCMETA = abc.ABCMeta
_LIST_ITER = list.__iter__
_VARIABLE_LISTS = ("_trainable_variables", "_non_trainable_variables")
_SCALARS = (bool, int, float, str, type(None))


def notebook_layer_classes(base: type, library_class: Any) -> dict:
    """{id: class} of the subclasses of Keras's `Layer` (`base`) loaded now that are not the library's (a class a
    cell defined, or one of a file of the notebook's), whose metaclass is `type` or `abc.ABCMeta` exactly; walked with
    C-level reads only (`type.__subclasses__`), judged by the export's proof (`library_class`)."""
    out: dict = {}
    seen: set = set()
    stack = list(_SUBCLASSES(base))
    while stack:
        cls = stack.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        meta = type(cls)
        if meta is not type and meta is not _ABCMETA:
            continue
        if not library_class(cls):
            out[id(cls)] = cls
        stack.extend(_SUBCLASSES(cls))
    return out


def items(seq: Any, attrs: Any) -> list | None:
    """A list's items: an exact list's, Keras's tracked list's (a list subclass), or the items TensorFlow's
    `ListWrapper` keeps in its `_storage` (its list part stays empty); C methods only. None when not a list."""
    if seq is None or not issubclass(type(seq), list):
        return None
    if type(seq) is not list:
        storage = dict.get(attrs(seq), "_storage")
        if type(storage) is list:
            return list(_LIST_ITER(storage))
    return list(_LIST_ITER(seq))


def layers_of(layer: Any, attrs: Any) -> list:
    """The layer and its sublayers, depth first (the layer first, then each of `_layers` in order), each once; read
    from instance dicts (`attrs`)."""
    out: list = []
    walked: set = set()

    def walk(obj: Any) -> None:
        if id(obj) in walked:
            return
        walked.add(id(obj))
        out.append(obj)
        for sub in items(dict.get(attrs(obj), "_layers"), attrs) or ():
            walk(sub)

    walk(layer)
    return out


def weights_of(layer: Any, attrs: Any) -> list:
    """The layer's weights in Keras's `Layer.weights` order, read from instance dicts (`attrs`): its own trainable
    then non-trainable variables, then each sublayer's, depth first, each variable once."""
    out: list = []
    seen: set = set()
    for obj in layers_of(layer, attrs):
        d = attrs(obj)
        for key in _VARIABLE_LISTS:
            for v in items(dict.get(d, key), attrs) or ():
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
    return out


def seed_states_of(layer: Any, attrs: Any) -> list:
    """The state variables of the seed generators of the layer and its sublayers (`_seed_generators`, a Dropout's,
    a noise layer's), in `layers_of` order, each once: what draws their next random numbers."""
    out: list = []
    seen: set = set()
    for obj in layers_of(layer, attrs):
        for gen in items(dict.get(attrs(obj), "_seed_generators"), attrs) or ():
            v = dict.get(attrs(gen), "state")
            if v is not None and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


def trainable_flags(layer: Any, attrs: Any) -> tuple:
    """(each sublayer's own `trainable` flag in `layers_of` order, the layer itself left out; each weight's, in
    `weights_of` order): a sublayer frozen after it was made (`block.inner.trainable = False`), a weight frozen
    alone. None where the flag is not a bool."""
    def flag(obj: Any) -> bool | None:
        f = dict.get(attrs(obj), "_trainable")
        return f if type(f) is bool else None

    return [flag(sub) for sub in layers_of(layer, attrs)[1:]], [flag(v) for v in weights_of(layer, attrs)]


_NOT_PLAIN = object()


def plain_copy(v: Any, attrs: Any, depth: int = 0) -> Any:
    """`v` as exact builtin lists, tuples and dicts of scalars (Keras's tracked lists and dicts, TensorFlow's
    `ListWrapper`, read with C methods only), or `_NOT_PLAIN`."""
    t = type(v)
    if any(t is s for s in _SCALARS):
        return v
    if depth > 8:
        return _NOT_PLAIN
    if issubclass(t, list) or issubclass(t, tuple):
        seq = items(v, attrs) if issubclass(t, list) else list(tuple.__iter__(v))
        out = [plain_copy(x, attrs, depth + 1) for x in (seq or [])[:1001]]
        if len(out) > 1000 or any(x is _NOT_PLAIN for x in out):
            return _NOT_PLAIN
        return out if issubclass(t, list) else tuple(out)
    if issubclass(t, dict):
        pairs = list(dict.items(v))
        if len(pairs) > 1000 or not all(type(k) is str for k, _x in pairs):
            return _NOT_PLAIN
        d = {k: plain_copy(x, attrs, depth + 1) for k, x in pairs}
        return _NOT_PLAIN if any(x is _NOT_PLAIN for x in d.values()) else d
    return _NOT_PLAIN


def build_config(shapes: Any, attrs: Any) -> dict | None:
    """What Keras's default `get_build_config` gives for the recorded build shapes (read as plain data:
    `plain_copy`), or None when it was never built or the shapes are not plain."""
    d = plain_copy(shapes, attrs) if shapes is not None and issubclass(type(shapes), dict) else _NOT_PLAIN
    if type(d) is not dict:
        return None
    if len(d) == 1:
        return {"input_shape": next(iter(d.values()))}
    return {"shapes_dict": d}


class LayerReader:
    """The kernel's read side: `spec(obj)` for a layer of a notebook class (TypeError naming why it cannot be
    rebuilt), `values(variables)` and `optimizer_values(d)` for any model keras_graph rebuilds. `lib` is the
    export's `_Lib` (kernel/environment.py): instance dicts, methods from class dicts, calls of functions proven the
    library's own."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def attrs(self, obj: Any) -> dict:
        d = self.lib.attrs(obj)
        return d if type(d) is dict else {}

    def values(self, variables: list, what: str) -> list:
        """Each Keras variable's value as a numpy array, by Keras's own `numpy` (its class proven the library's)."""
        out = []
        for v in variables:
            t = type(v)
            if not self.lib.proven(t):
                raise TypeError(f"{what} holds a {t.__name__} that is not Keras's own variable")
            out.append(self.lib.call(self.lib.method(t, "numpy", None), "numpy", v))
        return out

    def optimizer_values(self, d: dict) -> list | None:
        """A compiled model's built optimizer's variables (iterations, learning rate, slots), as arrays; None when it
        has none built (or its class is not the library's)."""
        opt = dict.get(d, "optimizer") if dict.get(d, "compiled") is True else None
        if opt is None or not self.lib.proven(type(opt)):
            return None
        od = self.attrs(opt)
        if dict.get(od, "built") is not True:
            return None
        return self.values(items(dict.get(od, "_variables"), self.attrs) or [], "its optimizer")

    def compile_config(self, d: dict) -> dict | None:
        """The arguments the notebook gave `compile` (Keras's `_compile_config`), when compiled."""
        compiled = dict.get(d, "_compile_config")
        config = dict.get(self.attrs(compiled), "config") \
            if compiled is not None and dict.get(d, "compiled") is True else None
        return dict(config) if type(config) is dict else None

    def spec(self, obj: Any) -> tuple:
        """(kwargs, rebuild spec) of a notebook layer: what `rebuild_layer` needs; TypeError naming why not."""
        t = type(obj)
        name = t.__name__ if type(t.__name__) is str else "a layer"
        d = self.attrs(obj)
        auto = dict.get(d, "_auto_config")
        config = dict.get(self.attrs(auto), "config") if auto is not None else None
        config = plain_copy(config, self.attrs) if config is not None else None
        if type(config) is not dict:
            raise TypeError(f"a Keras layer of the notebook's class {name}: Keras recorded no constructor arguments "
                            "for it (one is not a str, int, float, bool or None), so the copy cannot rebuild it "
                            "without running its code in the kernel")
        shapes = dict.get(d, "_build_shapes_dict")
        built = dict.get(d, "built") is True
        build = build_config(shapes, self.attrs) if built else None
        if built and build is None and weights_of(obj, self.attrs):
            raise TypeError(f"a Keras layer of the notebook's class {name}: it holds weights but Keras recorded no "
                            "plain shapes it was built with, so the copy cannot rebuild them")
        traced = any(dict.get(d, f) is not None for f in ("train_function", "test_function", "predict_function"))
        opt = dict.get(d, "optimizer")
        if traced and opt is not None and dict.get(self.attrs(opt), "built") is False:
            raise TypeError(f"a Keras model of the notebook's class {name} has a traced training step whose optimizer "
                            "was never built (a failed fit): a rebuilt copy would not fail the way the kernel's does")
        what = f"a Keras layer of the notebook's class {name}"
        values = self.values(weights_of(obj, self.attrs), what)
        seeds = self.values(seed_states_of(obj, self.attrs), what)
        trainable = dict.get(d, "_trainable")
        own_name = dict.get(d, "name")
        return dict(config), (dict(config), own_name if type(own_name) is str else None, build, values,
                              trainable if type(trainable) is bool else None,
                              self.compile_config(d), self.optimizer_values(d),
                              trainable_flags(obj, self.attrs), seeds)


# -- apply side (the worker) ---------------------------------------------------------------------------------
def _attrs(obj: Any) -> dict:
    try:
        d = vars(obj)
    except TypeError:
        return {}
    return d if type(d) is dict else {}


def assign(variables: list, values: list, what: str) -> None:
    """Give each rebuilt variable the kernel's value, after comparing their count and shapes (else ValueError)."""
    if len(variables) != len(values):
        raise ValueError(f"{what} was rebuilt with {len(variables)} weights, the kernel's has {len(values)}")
    for v, x in zip(variables, values, strict=True):
        if tuple(v.shape) != tuple(x.shape):
            raise ValueError(f"{what} was rebuilt with a weight of shape {tuple(v.shape)}, the kernel's is "
                             f"{tuple(x.shape)}")
    for v, x in zip(variables, values, strict=True):
        v.assign(x)


def compile_like(model: Any, config: dict | None, opt_values: list | None) -> bool:
    """Compile `model` with the kernel's arguments and give its optimizer the kernel's variables (iterations, slots):
    True when done as in the kernel, False when not (the Keras state is then "missed": a crash there only likely)."""
    if config is None:
        return True
    try:
        model.compile(**config)
    except Exception:  # noqa: BLE001 - said, not hidden
        return False
    if not opt_values:
        return True
    try:
        opt = model.optimizer
        opt.build(model.trainable_variables)
        assign(list(opt.variables), opt_values, "its optimizer")
    except Exception:  # noqa: BLE001 - a fresh optimizer: said, not hidden
        return False
    return True


def rebuild_layer(obj: Any, spec: tuple, state: dict) -> bool:
    """Finish a notebook layer the pickle made with `cls.__new__(cls, **kwargs)`: its `__init__`, the kernel's
    name, its build, its weights (compared, then assigned), its graph state (`state`: the nodes it was called at),
    compile and optimizer. Raises when it cannot be made the kernel's; returns False when its compile or optimizer
    differs (the Keras state is "missed")."""
    kwargs, name, build, values, trainable, compile_config, opt_values, flags, seeds = spec
    what = f"the notebook's Keras layer {type(obj).__name__}"
    with _KeptRngs():  # its `__init__` may draw seeds (a Dropout's SeedGenerator): the kernel's RNGs stay
        type(obj).__init__(obj, **kwargs)
        if name is not None:
            _attrs(obj)["name"] = name  # before its build: the name scope of its variables, as in the kernel
        if build is not None and not obj.built:
            if getattr(getattr(type(obj), "build", None), "_is_default", False):
                # no `build` of its own: built, as Keras's first call did, by running `call` on symbolic inputs
                if "input_shape" in build:
                    obj._build_by_run_for_single_pos_arg(build["input_shape"])
                else:
                    obj._build_by_run_for_kwargs(build["shapes_dict"])
            obj.build_from_config(build)
    assign(weights_of(obj, _attrs), values, what)
    assign(seed_states_of(obj, _attrs), seeds, f"{what}'s seed generators")
    if trainable is not None and obj.trainable is not trainable:
        obj.trainable = trainable
    set_trainable(obj, flags, what)
    _attrs(obj).update(state)
    return compile_like(obj, compile_config, opt_values)


def set_trainable(obj: Any, flags: tuple, what: str) -> None:
    """Give the rebuilt layer's sublayers, then its weights, the kernel's `trainable` flags (`trainable_flags`):
    each sublayer through Keras's setter, parents before children as the setter reaches down, then each weight's
    own flag. A count that differs raises (ValueError: the copy would not be the kernel's layer)."""
    layer_flags, weight_flags = flags
    subs, weights = layers_of(obj, _attrs)[1:], weights_of(obj, _attrs)
    if len(subs) != len(layer_flags) or len(weights) != len(weight_flags):
        raise ValueError(f"{what} was rebuilt with {len(subs)} sublayers and {len(weights)} weights, the kernel's "
                         f"has {len(layer_flags)} and {len(weight_flags)}")
    for sub, f in zip(subs, layer_flags, strict=True):
        if f is not None and sub.trainable is not f:
            sub.trainable = f
    for v, f in zip(weights, weight_flags, strict=True):
        if f is not None and v.trainable is not f:
            v.trainable = f


class _KeptRngs:
    """Restores the `random` module's and numpy's global generators on exit: what the worker's rebuilding draws
    from them is not the notebook's (the kernel's states were applied before, shared/carry.py)."""

    def __enter__(self) -> None:
        import random
        import sys
        self.saved = random.getstate()
        np = sys.modules.get("numpy")
        self.np_saved = np.random.get_state() if np is not None else None

    def __exit__(self, *exc: Any) -> None:
        import random
        import sys
        random.setstate(self.saved)
        np = sys.modules.get("numpy")
        if np is not None and self.np_saved is not None:
            np.random.set_state(self.np_saved)
