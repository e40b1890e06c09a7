"""tf.data pipelines in the copy: rebuilt in the worker stage by stage from what each stage recorded, or named,
never guessed. Read side only (the kernel: kernel/export.py's reducers, part of `_crane_transplant`); the worker
runs nothing of CRANE's for it (each stage's reduce is a tf.data method, pickled by reference). Standard library
only (see the package).

A `tf.data.Dataset` is a graph of TensorFlow ops held by the runtime of the kernel's process: TensorFlow's own
pickling fails deep inside its variant tensors. But each stage of a pipeline records, as plain instance attributes,
the arguments it was made from: `from_tensor_slices`/`from_tensors` their tensors and element structure, `batch`
its size and remainder flag, `map`/`filter` the notebook's function, `shuffle` its buffer and seeds, ... So a
pipeline is pickled as the calls that make it again — `DatasetV2.from_tensor_slices(element)`, then
`DatasetV2.batch(that, 32, False)`, ... — with the values read from instance dicts (C-level reads), tensors read by
TensorFlow's own `numpy` of a class proven the library's, the notebook's functions carried like any other (by value,
never called in the kernel). In the worker the same library calls make the same pipeline; a `map` traces the
notebook's function there. A stage is rebuilt only when its record makes it the kernel's stage exactly:
- sources: `from_tensor_slices` and `from_tensors` of dense tensors in tuples and dicts (`TensorSpec` leaves);
- `batch` (plain and parallel), `map` (plain and parallel; TF 2's cardinality-preserving map), `filter`, `prefetch`,
  `repeat`, `take`, `skip`, `unbatch`, `cache` in memory;
- `shuffle` when its seeds do not come from TensorFlow's global seed (none was set when it was made, and none is
  set now — or one is set now but the copy is one run's, whose worker rebuilds the pipelines before it applies the
  kernel's global seed: dl-fresh's `tf_data_unbatched_fit`, a `shuffle(512, seed=0)` before
  `keras.utils.set_random_seed(3)`): its order is then the kernel's (the same seeds; a shuffle made without any
  seed is random in both).
A crash in TensorFlow's frames over a pipeline rebuilt so is certain (kernel/environment's `_carried` counts a
rebuilt dataset as the kernel's, not as a value TensorFlow's saving rebuilt), unless a stage was made again only
approximately (an unseeded shuffle: its order random in both), which keeps it "likely".
Anything else is refused, naming the stage and why (a TypeError the export names with the value's name and type:
the run is `unavailable`, the rules decide the cell): a file or generator source (its reads live in the kernel's
process), a shuffle seeded from the global seed, a ragged or sparse element, a stage this module does not know.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.shared.keras_graph import library_subclasses  # kernel: strip

TF_DATA_REFUSAL = ("a tf.data pipeline: its ops and their state live in the kernel's TensorFlow runtime, which a "
                   "copy cannot carry")
_CLASS_NAME = type.__dict__["__name__"]  # bound at install: C-level reads only
_DATASETS = "tensorflow.python.data.ops.dataset_ops"
_DEFAULT_GRAPH_SEED = 87654321  # tensorflow.python.framework.random_seed: an op seed given without a global seed
_DETERMINISTIC = {"default": None, "true": True, "false": False}
_UNARY = {"_BatchDataset": "batch", "_ParallelBatchDataset": "batch", "_MapDataset": "map",
          "_ParallelMapDataset": "map", "_FilterDataset": "filter", "_PrefetchDataset": "prefetch",
          "_RepeatDataset": "repeat", "_TakeDataset": "take", "_SkipDataset": "skip", "_UnbatchDataset": "unbatch",
          "CacheDataset": "cache", "_ShuffleDataset": "shuffle"}
_SOURCES = {"_TensorSliceDataset": "from_tensor_slices", "_TensorDataset": "from_tensors"}


def tf_data_reducers(lib: Any) -> dict:
    """{exact type: reducer} for tf.data's `DatasetV2` and its subclasses loaded now (shared/keras_graph's
    `library_subclasses`): the reducer gives the library call that makes the stage again (`TfData.reduce`), or
    refuses the copy naming why (TypeError)."""
    base = lib.mod(_DATASETS).get("DatasetV2")
    if base is None:
        return {}
    return library_subclasses(base, "tensorflow.", TfData(lib, base).reduce)


class TfData:
    """One export's tf.data reducer: `reduce(ds)` -> (a `DatasetV2` method, its arguments), read as data."""

    def __init__(self, lib: Any, base: type) -> None:
        self.lib = lib
        self.base = base
        self.tensor_spec = lib.mod("tensorflow.python.framework.tensor").get("TensorSpec")

    def refuse(self, why: str) -> TypeError:
        return TypeError(f"{TF_DATA_REFUSAL} ({why})")

    def method(self, name: str) -> Any:
        """`DatasetV2.<name>` from the class dict (a staticmethod's function), when `DatasetV2` is the library's
        own, unpatched (so the worker's lookup by reference finds the same function)."""
        if not self.lib.proven(self.base):
            raise self.refuse("the notebook changed tf.data's Dataset class")
        fn = self.lib.method(self.base, name, None)
        if fn is not None and type(fn) is staticmethod:
            fn = self.lib.attr(fn, "__func__")
        if fn is None:
            raise self.refuse(f"tf.data has no Dataset.{name} here")
        return fn

    def value(self, t: Any, what: str) -> Any:
        """An EagerTensor's value as numpy (TensorFlow's own `numpy`, the tensor's class proven the library's)."""
        cls = type(t)
        if not self.lib.proven(cls):
            raise self.refuse(f"{what} is not a TensorFlow tensor")
        return self.lib.call(self.lib.method(cls, "numpy", None), "numpy", t)

    def scalar(self, t: Any, what: str) -> Any:
        """A scalar tensor (or plain value) as a Python scalar."""
        if t is None or type(t) in (bool, int, float, str):
            return t
        arr = self.value(t, what)
        if type(arr) in (bool, int, float, str, bytes):
            return arr
        get = self.lib.method(type(arr), "tolist", None)  # (a numpy scalar's or 0-d array's value)
        out = self.lib.call(get, "tolist", arr) if get is not None else None
        if type(out) not in (bool, int, float, str, bytes):
            raise self.refuse(f"{what} is not a plain scalar ({_CLASS_NAME.__get__(type(arr), type)})")
        return out

    def function(self, wrapper: Any, what: str) -> Any:
        """The notebook's function a `map`/`filter` stage traced (its `StructuredFunctionWrapper`'s `_func`)."""
        if wrapper is None or not self.lib.proven(type(wrapper)):
            raise self.refuse(f"the {what} stage's function is not recorded")
        fn = self.lib.attrs(wrapper).get("_func")
        if fn is None:
            raise self.refuse(f"the {what} stage's function is not recorded")
        return fn

    def element(self, structure: Any, tensors: Any) -> Any:
        """The source's element again: its structure (tuples and str-keyed dicts of `TensorSpec`) filled with the
        tensors' values in `tf.nest`'s order (a dict's keys sorted)."""
        if type(tensors) is not list:
            raise self.refuse("its source's tensors are not recorded")
        flat = list(tensors)
        it = iter(range(len(flat)))

        def fill(node: Any, depth: int) -> Any:
            t = type(node)
            if depth > 16:
                raise self.refuse("its element is nested too deeply")
            if t is tuple:
                return tuple(fill(x, depth + 1) for x in tuple.__iter__(node))
            if t is dict:
                keys = list(dict.keys(node))
                if not all(type(k) is str for k in keys):
                    raise self.refuse("its element is a dict with keys that are not strings")
                return {k: fill(dict.__getitem__(node, k), depth + 1) for k in sorted(keys)}
            if t is not self.tensor_spec or t is None:
                raise self.refuse(f"its element holds a {_CLASS_NAME.__get__(t, type)}, not a dense tensor")
            i = next(it, None)
            if i is None:
                raise self.refuse("its source's tensors do not match its element")
            return self.value(flat[i], "a source tensor")

        out = fill(structure, 0)
        if next(it, None) is not None:
            raise self.refuse("its source's tensors do not match its element")
        return out

    def reduce(self, ds: Any) -> Any:
        out = self.stage(ds)
        proof = getattr(self.lib, "proof", None)  # (kernel/environment's `_Lib`: the export's proof)
        if proof is not None:
            proof.tf_data[id(ds)] = ds
        return out

    def stage(self, ds: Any) -> Any:
        cls = type(ds)
        name = _CLASS_NAME.__get__(cls, type)
        if not self.lib.proven(cls):
            raise self.refuse(f"the notebook changed its class {name}")
        d = self.lib.attrs(ds)
        if name in _SOURCES:
            return self.method(_SOURCES[name]), (self.element(d.get("_structure"), d.get("_tensors")),)
        stage = _UNARY.get(name)
        if stage is None:
            raise self.refuse(f"a {name} stage, which the copy does not rebuild")
        source = d.get("_input_dataset")
        if source is None:
            raise self.refuse(f"its {stage} stage records no input")
        if stage == "unbatch":
            source = self.normalized_input(source)
        return self.method(stage), (source, *self.arguments(stage, name, d))

    def normalized_input(self, ds: Any) -> Any:
        """`unbatch` made its input dense first (dataset_ops' `normalize_to_dense`: a map of its own `normalize`,
        restructured): the dataset the notebook unbatched is that map's input."""
        def named(obj: Any, name: str) -> dict:
            t = type(obj)
            if _CLASS_NAME.__get__(t, type) != name or not self.lib.proven(t):
                raise self.refuse("its unbatch stage's input is not recorded as tf.data makes it")
            return self.lib.attrs(obj)

        mapped = named(named(ds, "_RestructuredDataset").get("_input_dataset"), "_MapDataset")
        fn = self.function(mapped.get("_map_func"), "unbatch")
        if self.lib.attr(fn, "__qualname__") != "normalize_to_dense.<locals>.normalize":
            raise self.refuse("its unbatch stage's input is not recorded as tf.data makes it")
        return mapped.get("_input_dataset")

    def arguments(self, stage: str, name: str, d: dict) -> tuple:
        """The arguments after the input dataset that make this stage again."""
        if stage == "batch":
            args: tuple = (self.scalar(d.get("_batch_size"), "the batch size"),
                           self.scalar(d.get("_drop_remainder"), "drop_remainder"))
            if name == "_ParallelBatchDataset":
                args += (self.scalar(d.get("_num_parallel_calls"), "num_parallel_calls"),
                         self.deterministic(d))
            return args
        if stage == "map":
            if d.get("_preserve_cardinality") is not True:
                raise self.refuse("a TF 1 map stage (cardinality not preserved)")
            fn = self.function(d.get("_map_func"), "map")
            if name == "_ParallelMapDataset":
                return fn, self.scalar(d.get("_num_parallel_calls"), "num_parallel_calls"), self.deterministic(d)
            return (fn,)
        if stage == "filter":
            return (self.function(d.get("_predicate"), "filter"),)
        if stage == "prefetch":
            return (self.scalar(d.get("_buffer_size"), "the prefetch buffer"),)
        if stage in ("repeat", "take", "skip"):
            return (self.scalar(d.get("_count"), f"the {stage} count"),)
        if stage == "cache":
            filename = self.scalar(d.get("_filename"), "the cache's file")
            if filename not in ("", b""):
                raise self.refuse("a cache in a file, which lives outside the copy")
            return ("",)
        if stage == "shuffle":
            return self.shuffle(d)
        return ()  # unbatch

    def deterministic(self, d: dict) -> Any:
        det = d.get("_deterministic")
        if type(det) is not str or det not in _DETERMINISTIC:
            raise self.refuse("its deterministic flag is not recorded")
        return _DETERMINISTIC[det]

    def shuffle(self, d: dict) -> tuple:
        """(buffer, op seed, reshuffle) when the worker's `shuffle` gets the kernel's seeds: seeds (0, 0) (no seed at
        all: random in both) or (the default graph seed, op seed) (an op seed without a global seed), with
        no global seed in the kernel now (the worker applies the kernel's global seed: its pipelines are made
        while it has none, or the kernel's)."""
        seed, seed2 = self.scalar(d.get("_seed"), "the shuffle's seed"), self.scalar(d.get("_seed2"), "its op seed")
        reshuffle = d.get("_reshuffle_each_iteration")
        if not (reshuffle is None or type(reshuffle) is bool):
            reshuffle = self.scalar(reshuffle, "reshuffle_each_iteration")
        ctx = self.lib.mod("tensorflow.python.eager.context").get("_context")
        global_now = self.lib.attrs(ctx).get("_seed") if ctx is not None and self.lib.proven(type(ctx)) else None
        # a global seed set since does not matter to a one-run copy (`_Lib.fresh`): its worker makes the pipelines
        # again before it applies the kernel's global seed, so with none, as the kernel made this one
        unseeded_now = global_now is None or getattr(self.lib, "fresh", False) is True
        if unseeded_now and seed in (None, 0) and seed2 in (None, 0):  # (tf.data's (0, 0): no seed at all)
            op_seed = None
            proof = getattr(self.lib, "proof", None)
            if proof is not None:  # random in both: the copy's order is not the kernel's next one
                proof.tf_data_approximate.append("a shuffle without a seed")
        elif unseeded_now and seed == _DEFAULT_GRAPH_SEED and type(seed2) is int:
            op_seed = seed2
        else:
            raise self.refuse("a shuffle seeded from TensorFlow's global seed, whose order the copy cannot repeat")
        return self.scalar(d.get("_buffer_size"), "the shuffle buffer"), op_seed, reshuffle
