"""Keras graphs in the copy: symbolic tensors, shared layers and functional models travel as one graph, in the
export's ONE pickle, so identity survives (`model.layers[2] is shared`, `keras.Model(inp_a, shared(inp_a))` on
copied tensors). Read side (the kernel: kernel/export.py's reducers, part of `_crane_transplant`) beside the apply
side (the transplant worker: worker/main.py, part of its `_crane_sandbox`). Standard library only (see the package).

Keras 3's own pickling (`KerasSaveable.__reduce__`) saves each object on its own (its configuration and weights),
so a layer copied beside the model that holds it became a second layer, and a symbolic tensor's layer came back
without the nodes it was called at: `keras.Model(inp, shared(inp))` in the copy raised a false IndexError. Here:
- a layer (any Keras `Operation` of a library class but a functional model) is still rebuilt by Keras's own
  pickling (configuration and weights: nothing of the kernel's object runs but the library's saving code, as
  before), and its graph state — the nodes it was called at (`_inbound_nodes`, `_outbound_nodes`) and an input
  layer's tensor — goes with it as pickle state, set on the rebuilt layer as plain instance attributes;
- a functional model (`keras.src.models.functional.Functional`, exactly) is rebuilt from its own input and output
  tensors, `Functional(inputs, outputs, name)`, so its layers are the copy's layers, shared with every other copied
  value; its compile arguments (the kernel's `_compile_config`, as the notebook gave them) are recorded and given
  to `compile` in the worker (`apply_keras`); its optimizer starts fresh (the optimizer's own slots are not carried);
- a fit's `history` (when a History) goes with the model; every rebuilt object's instance-dict keys are recorded in
  the kernel, with the values that are plain builtins (a flag such as `stop_predicting`, `model.n_classes = 3`),
  and compared in the worker: an attribute the copy lacks is given the kernel's plain value, and one it lacks that
  was not plain makes the Keras state "missed" (a crash in Keras is then only likely:
  crane.sandbox.transplant.crash_certain), never a silent difference.
Read side: only what `lib` (kernel/environment's `_Lib`) gives — modules' namespaces as dicts, methods from class
dicts, calls of functions proven the library's own and named as expected, instance dicts; containers read with
the C methods bound below. A class the notebook defined or patched gets no graph reducer (Keras's own pickling, as
proven by the export, or a refusal there).
"""

from __future__ import annotations

import abc
import copyreg
from typing import Any

KERAS_KEY = "\x00crane-keras"  # the state pickle's entry for the record (no Python name can be it)
_NEWOBJ = copyreg.__newobj__  # type: ignore[attr-defined]  # (the C pickler writes NEWOBJ for it: the class's own __new__ in the worker)
_SUBCLASSES = type.__dict__["__subclasses__"]  # bound at install: C-level reads only
_CLASS_MODULE = type.__dict__["__module__"]
_ABCMETA = abc.ABCMeta
_LIST_ITER = list.__iter__
_DICT_KEYS = dict.keys
_GRAPH_ATTRS = ("_inbound_nodes", "_outbound_nodes")
_TRAINING_ATTRS = ("history", "_eval_epoch_iterator")  # carried when None or a History (its epochs and losses)
_MISSING = object()
_BUILD_KEY = "\x00crane-build"  # a functional model's (inputs, outputs, name, trainable, graph state, compile args)


def _plain(v: Any) -> bool:
    """A value the record may carry as it is: a builtin scalar, or a short list/tuple/dict of them (exact types)."""
    t = type(v)
    if t is bool or t is int or t is float or t is str or v is None:
        return True
    if t is list or t is tuple:
        return len(v) <= 1000 and all(_plain_scalar(x) for x in v)
    if t is dict:
        return len(v) <= 1000 and all(_plain_scalar(k) and _plain_scalar(x) for k, x in dict.items(v))
    return False


def _plain_scalar(v: Any) -> bool:
    t = type(v)
    return t is bool or t is int or t is float or t is str or v is None


def library_subclasses(base: type, prefix: str, reducer: Any) -> dict:
    """{cls: reducer} for `base` and its subclasses loaded now whose module starts with `prefix` and whose metaclass
    is `type` or `abc.ABCMeta` exactly (so hashing them runs nothing of the notebook's); C-level reads only, no proof
    (each reducer proves its object's class before it reads anything)."""
    table: dict = {}
    stack = [base]
    while stack:
        cls = stack.pop()
        meta = type(cls)
        if meta is not type and meta is not _ABCMETA:
            continue
        mod = _CLASS_MODULE.__get__(cls, type)
        if type(mod) is not str or not mod.startswith(prefix) or cls in table:
            continue
        table[cls] = reducer
        stack.extend(_SUBCLASSES(cls))
    return table


# -- read side (the kernel) ----------------------------------------------------------------------------------
class KerasGraph:
    """One export's Keras graph reducers and the record the worker applies (`record`, pickled last)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.record: dict = {"keys": []}
        self.ids: set = set()  # id() of the Keras objects reduced here (kept alive by `record`)
        self.table: dict = {}
        ops = lib.mod("keras.src.ops.operation")
        saveable = lib.mod("keras.src.saving.keras_saveable").get("KerasSaveable")
        self.operation = ops.get("Operation")
        self.functional = lib.mod("keras.src.models.functional").get("Functional")
        self.tensor = lib.mod("keras.src.backend.common.keras_tensor").get("KerasTensor")
        self.history = lib.mod("keras.src.callbacks.history").get("History")
        self.own_reduce = lib.method(saveable, "__reduce__", None) if saveable is not None else None
        if self.operation is None or self.own_reduce is None:
            return
        self.table = library_subclasses(self.operation, "keras.", self.reduce)

    def reducers(self) -> dict:
        """{exact type: reducer} for the export's pickler (kernel/pickling's `reducers`)."""
        return dict(self.table)

    def _items(self, seq: Any) -> list | None:
        """A node list's items: an exact list's, Keras's tracked list's (a list subclass), or the items TensorFlow's
        `ListWrapper` keeps in its `_storage` (its list part stays empty); read with C methods only."""
        if seq is None or not issubclass(type(seq), list):
            return None
        if type(seq) is not list:
            storage = dict.get(self.lib.attrs(seq), "_storage")
            if type(storage) is list:
                return list(_LIST_ITER(storage))
        return list(_LIST_ITER(seq))

    def reduce(self, obj: Any) -> Any:
        t = type(obj)
        if not self.lib.proven(t):  # a class the notebook patched (or one only named like Keras's): Keras's own
            return NotImplemented
        d = self.lib.attrs(obj)
        if type(d) is not dict:
            return NotImplemented
        state: dict = {}
        for k in _GRAPH_ATTRS:
            nodes = self._items(dict.get(d, k))
            if nodes is not None:
                state[k] = nodes
        for k in _TRAINING_ATTRS:  # what a fit leaves on a model that its rebuilt copy would lack
            v = dict.get(d, k, _MISSING)
            if v is None or (v is not _MISSING and type(v) is self.history):
                state[k] = v
        held = dict.get(d, "_input_tensor")
        if held is not None and type(held) is self.tensor:
            state["_input_tensor"] = held
        keys = [k for k in _DICT_KEYS(d) if type(k) is str]
        plain = {k: v for k in keys if _plain(v := dict.get(d, k))}  # given to the copy where it lacks them
        if t is self.functional:
            # made empty here, built in the worker once every object of the graph is whole (`apply_keras`): its
            # inputs' layers may hold a node of this very model (`Model(inp, dec(enc(inp)))` holds enc's)
            compiled = dict.get(d, "_compile_config")
            config = dict.get(self.lib.attrs(compiled), "config") \
                if compiled is not None and dict.get(d, "compiled") is True else None
            trainable = dict.get(d, "_trainable")
            build = (dict.get(d, "_inputs_struct"), dict.get(d, "_outputs_struct"), dict.get(d, "name"),
                     trainable if type(trainable) is bool else None, state,
                     dict(config) if type(config) is dict else None)
            self.record["keys"].append((obj, keys, plain))
            self.ids.add(id(obj))
            # its graph goes in its own pickle state, so every object the record names is pickled before it
            return (_NEWOBJ, (t,), {_BUILD_KEY: build})
        if self.lib.method(t, "__reduce__", None) is not self.own_reduce:
            return NotImplemented
        rv = self.lib.call(self.own_reduce, "__reduce__", obj)
        if type(rv) is not tuple or len(rv) != 2:
            return NotImplemented
        self.record["keys"].append((obj, keys, plain))
        self.ids.add(id(obj))
        return (rv[0], rv[1], state) if state else rv

    def covers(self, value: Any) -> bool:
        """Was `value` (a copied name's) carried as the kernel's graph: a Keras object reduced here, or a symbolic
        tensor (plain state: its shape, dtype and history, whose layer was reduced here)?"""
        return id(value) in self.ids or (self.tensor is not None and type(value) is self.tensor)


# -- apply side (the worker) ---------------------------------------------------------------------------------
def apply_keras(record: dict | None) -> list[str]:
    """After the state is loaded: build each functional model from its own tensors (every object of the graph is
    whole now), give it back the nodes it was called at and compile it as the kernel's was; then compare each
    rebuilt object's attributes with the kernel's. Returns ["keras"] (shared/carry's key: a crash in Keras is then
    only likely) when one lacks an attribute the kernel's had or could not be compiled, else []. A model that cannot
    be built raises: the copy would not be the kernel's graph (the run is then unavailable, never a guess)."""
    if not record:
        return []
    missed = False
    pending = [(obj, vars(obj).pop(_BUILD_KEY)) for obj, _k, _p in record.get("keys") or () if _BUILD_KEY in vars(obj)]
    for model, (_i, _o, _n, _t, state, _c) in pending:  # a model called inside another: its nodes there first
        vars(model).update(state)
    while pending:
        failed, error = [], None
        for entry in pending:
            model, (inputs, outputs, name, trainable, state, config) = entry
            try:
                kwargs = {"trainable": trainable} if trainable is not None else {}
                type(model).__init__(model, inputs, outputs, name=name, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a model it calls may not be built yet: the next pass
                failed.append(entry)
                error = exc
                continue
            vars(model).update(state)
            if config is not None:
                try:
                    model.compile(**config)
                except Exception:  # noqa: BLE001 - the copy is not compiled as the kernel's was: said, not hidden
                    missed = True
        if len(failed) == len(pending):
            raise RuntimeError(f"a Keras functional model could not be rebuilt from its graph: {error!r}")
        pending = failed
    for obj, keys, plain in record.get("keys") or ():
        own = vars(obj)
        for k in keys:
            if k not in own:
                if k not in plain:
                    missed = True
                    continue
                own[k] = plain[k]  # a flag or a value the notebook set (`stop_predicting`, `model.n_classes = 3`)
    return ["keras"] if missed else []
