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

from crane.sandbox.shared.keras_layers import (  # kernel: strip
    LAYER_KEY,
    LayerReader,
    build_config,
    compile_like,
    items,
    notebook_layer_classes,
    rebuild_layer,
)

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
_BUILD_KEY = "\x00crane-build"  # a functional model's (inputs, outputs, name, trainable, graph state, compile args,
# optimizer values)
_SEQUENTIAL_KEY = "\x00crane-sequential"  # a Sequential holding a notebook layer: (layers, name, trainable, build
# config, graph state, compile args, optimizer values)
_NEWOBJ_EX = copyreg.__newobj_ex__  # type: ignore[attr-defined]  # (NEWOBJ_EX: `cls.__new__(cls, **kwargs)` in the worker)


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

    def __init__(self, lib: Any, save: Any = None) -> None:
        self.lib = lib
        self.save = save  # (lib, obj, Keras's own __reduce__) -> its value: kernel/keras_saved's `saved_reduce`
        self.record: dict = {"keys": []}
        self.ids: set = set()  # id() of the Keras objects reduced here (kept alive by `record`)
        self.table: dict = {}
        ops = lib.mod("keras.src.ops.operation")
        saveable = lib.mod("keras.src.saving.keras_saveable").get("KerasSaveable")
        self.operation = ops.get("Operation")
        self.functional = lib.mod("keras.src.models.functional").get("Functional")
        self.tensor = lib.mod("keras.src.backend.common.keras_tensor").get("KerasTensor")
        self.history = lib.mod("keras.src.callbacks.history").get("History")
        self.sequential = lib.mod("keras.src.models.sequential").get("Sequential")
        self.own_reduce = lib.method(saveable, "__reduce__", None) if saveable is not None else None
        self.reader = LayerReader(lib)
        self.notebook: dict = {}  # id -> a Layer class of the notebook's, rebuilt in the worker (keras_layers)
        self.shared_in: set = set()  # id() of the Sequential models holding a layer also reached elsewhere (`scan`)
        if self.operation is None or self.own_reduce is None:
            return
        self.table = library_subclasses(self.operation, "keras.", self.reduce)
        layer = lib.mod("keras.src.layers.layer").get("Layer")
        if layer is not None and dict.get(self.table, layer) is not None:
            self.notebook = notebook_layer_classes(layer, lib.proof.library_class)
            lib.proof.rebuilt.update(self.notebook)  # the proof lets them through: their code is never called here
            for cls in self.notebook.values():
                self.table[cls] = self.reduce_notebook

    def reducers(self) -> dict:
        """{exact type: reducer} for the export's pickler (kernel/pickling's `reducers`)."""
        return dict(self.table)

    def _items(self, seq: Any) -> list | None:
        """A node list's items (keras_layers' `items`: C methods only)."""
        return items(seq, self.lib.attrs)

    def _graph_state(self, d: dict) -> dict:
        """What a rebuilt layer would lack of the kernel's graph: the nodes it was called at, an input layer's
        tensor, a fit's history."""
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
        return state

    def _remember(self, obj: Any, d: dict, rebuilt: bool) -> None:
        """Record the object's attribute names and plain values (`apply_keras` compares them; a rebuilt object of
        the notebook's, or a model rebuilt here, gets every plain value of the kernel's)."""
        keys = [k for k in _DICT_KEYS(d) if type(k) is str]
        plain = {k: v for k in keys if _plain(v := dict.get(d, k))}  # given to the copy where it lacks them
        self.record["keys"].append((obj, keys, plain))
        if rebuilt:
            self.record.setdefault("rebuilt", []).append(obj)
        self.ids.add(id(obj))

    def scan(self, objs: dict) -> None:
        """Before pickling: find the Sequential models one of whose layers (`_layers`, nested) is also a copied name's
        value or another model's layer. Keras's own saving would give such a model layers of its own (`left.layers[0]
        is shared` false in the copy): these are rebuilt from their layers in the one pickle instead (`reduce`).
        Instance dicts only; a class is looked up in the table only when its metaclass is `type` or ABCMeta exactly
        (hashing it runs nothing of the notebook's)."""
        if not self.table or self.sequential is None:
            return
        owners: dict = {}
        sequentials: list = []
        seen: set = set()

        def visit(obj: Any, owner: Any, depth: int) -> None:
            t = type(obj)
            meta = type(t)
            if (meta is not type and meta is not _ABCMETA) or dict.get(self.table, t) is None:
                return
            owners.setdefault(id(obj), set()).add(owner)
            if id(obj) in seen or depth > 32:
                return
            seen.add(id(obj))
            if t is self.sequential:
                sequentials.append(obj)
            for sub in self._items(dict.get(self.lib.attrs(obj), "_layers")) or ():
                visit(sub, id(obj), depth + 1)

        for name, value in dict.items(objs):
            t = type(value)
            inner = list(_LIST_ITER(value)) if t is list else list(value) if t is tuple else \
                list(dict.values(value)) if t is dict else [value]
            for i, v in enumerate(inner[:1000]):
                visit(v, (name, i), 0)
        shared = {i for i, o in owners.items() if len(o) > 1}
        for model in sequentials:
            if self._holds(self.lib.attrs(model), shared):
                self.shared_in.add(id(model))

    def _holds(self, d: dict, ids: set, depth: int = 0) -> bool:
        """One of the model's layers (`_layers`, nested) is among `ids`."""
        for sub in self._items(dict.get(d, "_layers")) or ():
            if id(sub) in ids or (depth < 32 and self._holds(self.lib.attrs(sub), ids, depth + 1)):
                return True
        return False

    def _holds_notebook(self, d: dict, depth: int = 0) -> bool:
        """A layer of a notebook class among the model's layers (`_layers`, nested)."""
        for sub in self._items(dict.get(d, "_layers")) or ():
            if self.notebook.get(id(type(sub))) is type(sub) or (
                    depth < 32 and self._holds_notebook(self.lib.attrs(sub), depth + 1)):
                return True
        return False

    def reduce_notebook(self, obj: Any) -> Any:
        """A layer or model of a class the notebook defined: made by `cls.__new__(cls, **kwargs)` in the worker and
        finished there by keras_layers' `rebuild_layer`; never NotImplemented (Keras's own pickling would call its
        code here): a TypeError naming why when it cannot be rebuilt."""
        d = self.lib.attrs(obj)
        if type(d) is not dict:
            raise TypeError(f"a Keras layer of the notebook's class {type(obj).__name__} has no plain instance dict")
        kwargs, spec = self.reader.spec(obj)
        self._remember(obj, d, True)
        return (_NEWOBJ_EX, (type(obj), (), kwargs), {LAYER_KEY: (spec, self._graph_state(d))})

    def reduce(self, obj: Any) -> Any:
        t = type(obj)
        if not self.lib.proven(t):  # a class the notebook patched (or one only named like Keras's): Keras's own
            return NotImplemented
        d = self.lib.attrs(obj)
        if type(d) is not dict:
            return NotImplemented
        state = self._graph_state(d)
        if t is self.functional:
            # made empty here, built in the worker once every object of the graph is whole (`apply_keras`): its
            # inputs' layers may hold a node of this very model (`Model(inp, dec(enc(inp)))` holds enc's)
            trainable = dict.get(d, "_trainable")
            build = (dict.get(d, "_inputs_struct"), dict.get(d, "_outputs_struct"), dict.get(d, "name"),
                     trainable if type(trainable) is bool else None, state,
                     self.reader.compile_config(d), self.reader.optimizer_values(d))
            self._remember(obj, d, False)
            # its graph goes in its own pickle state, so every object the record names is pickled before it
            return (_NEWOBJ, (t,), {_BUILD_KEY: build})
        if t is self.sequential and (id(obj) in self.shared_in or self.notebook and self._holds_notebook(d)):
            # Keras's own saving would call its notebook layers' code, or give it layers of its own where one is
            # shared: made empty here, built in the worker from its layers (each in this pickle) once they are whole
            trainable = dict.get(d, "_trainable")
            shapes = dict.get(d, "_build_shapes_dict")
            made = (self._items(dict.get(d, "_layers")) or [], dict.get(d, "name"),
                    trainable if type(trainable) is bool else None,
                    build_config(shapes, self.lib.attrs) if dict.get(d, "built") is True else None, state,
                    self.reader.compile_config(d), self.reader.optimizer_values(d))
            self._remember(obj, d, True)
            return (_NEWOBJ, (t,), {_SEQUENTIAL_KEY: made})
        if self.lib.method(t, "__reduce__", None) is not self.own_reduce:
            return NotImplemented
        if id(obj) not in self.lib.proof.walked:  # Keras's own saving reaches what pickle does not see: proven first
            self.lib.proof.prewalk(obj)
        # Keras's own saving, or (the export's `save`: kernel/keras_saved.py) its answer kept while proven unchanged
        rv = self.save(self.lib, obj, self.own_reduce) if self.save is not None else \
            self.lib.call(self.own_reduce, "__reduce__", obj)
        if type(rv) is not tuple or len(rv) != 2:
            return NotImplemented
        self._remember(obj, d, False)
        return (rv[0], rv[1], state) if state else rv

    def covers(self, value: Any) -> bool:
        """Was `value` (a copied name's) carried as the kernel's graph: a Keras object reduced here, or a symbolic
        tensor (plain state: its shape, dtype and history, whose layer was reduced here)?"""
        return id(value) in self.ids or (self.tensor is not None and type(value) is self.tensor)


# -- apply side (the worker) ---------------------------------------------------------------------------------
def apply_keras(record: dict | None) -> list[str]:
    """After the state is loaded (and the kernel's settings applied): finish each layer of a notebook class
    (keras_layers' `rebuild_layer`), then build each functional model from its own tensors and each Sequential that
    held a notebook layer from its layers (every object of the graph is whole now), give them back the nodes they
    were called at and compile them as the kernel's were, with the optimizer's variables; then compare each rebuilt
    object's attributes with the kernel's. Returns ["keras"] (shared/carry's key: a crash in Keras is then only
    likely) when one lacks an attribute the kernel's had or could not be compiled as the kernel's, else []. A layer
    or model that cannot be rebuilt raises: the copy would not be the kernel's graph (the run is then unavailable,
    never a guess)."""
    if not record:
        return []
    missed = False
    objs = [obj for obj, _k, _p in record.get("keys") or ()][::-1]  # (reduced outer first: inner ones first here)
    for obj in objs:  # a notebook layer is made from plain arguments: nothing else of the graph is needed first
        spec = vars(obj).pop(LAYER_KEY, None)
        if spec is not None:
            missed = not rebuild_layer(obj, spec[0], spec[1]) or missed
    pending = [(obj, vars(obj).pop(key), key) for obj in objs for key in (_BUILD_KEY, _SEQUENTIAL_KEY)
               if key in vars(obj)]
    for model, spec, key in pending:  # a model called inside another: its nodes there first
        if key == _BUILD_KEY:
            vars(model).update(spec[4])
    while pending:
        failed, error = [], None
        for entry in pending:
            model, spec, key = entry
            try:
                state, config, opt_values = _init_model(model, spec, key)
            except Exception as exc:  # noqa: BLE001 - a model it calls may not be built yet: the next pass
                failed.append(entry)
                error = exc
                continue
            vars(model).update(state)
            missed = not compile_like(model, config, opt_values) or missed
        if len(failed) == len(pending):
            raise RuntimeError(f"a Keras model could not be rebuilt from its graph: {error!r}")
        pending = failed
    rebuilt = {id(obj) for obj in record.get("rebuilt") or ()}
    for obj, keys, plain in record.get("keys") or ():
        own = vars(obj)
        for k in keys:
            if k in plain and (k not in own or id(obj) in rebuilt):
                own[k] = plain[k]  # a flag or a value the notebook set (`stop_predicting`, `model.n_classes = 3`)
            elif k not in own:
                missed = True
    return ["keras"] if missed else []


def _init_model(model: Any, spec: tuple, key: str) -> tuple:
    """`__init__` of a functional model (from its tensors) or of a Sequential (from its layers, then built with
    the kernel's shapes); (graph state, compile arguments, optimizer values)."""
    if key == _BUILD_KEY:
        inputs, outputs, name, trainable, state, config, opt_values = spec
        kwargs = {"trainable": trainable} if trainable is not None else {}
        type(model).__init__(model, inputs, outputs, name=name, **kwargs)
        return state, config, opt_values
    layers, name, trainable, build, state, config, opt_values = spec
    kwargs = {"trainable": trainable} if trainable is not None else {}
    type(model).__init__(model, layers=layers, name=name, **kwargs)
    if build is not None and not model.built:
        model.build_from_config(build)
    return state, config, opt_values
