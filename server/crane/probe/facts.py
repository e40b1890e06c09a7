"""Runtime facts about the kernel's state, as decoded on the daemon side.

The kernel-side probe (`kernel/entry.py`, standard library only) emits JSON in exactly these shapes; it is
decoded and validated here with msgspec (`decode_probe_result`). Every field is optional except the name
and type: the probe emits what it can learn cheaply and safely, and nothing else. Field coverage is a
superset of CRANE-LLM's extractor (../shared/notes/crane-llm-study.md §1.1) plus per-column NaN counts,
nn.Module / Keras structure, undefined names, module availability and file existence.
"""

from __future__ import annotations

from typing import Any

import msgspec


class ColumnFacts(msgspec.Struct, omit_defaults=True):
    """One DataFrame column."""

    name: str  # repr of the label for non-str labels
    dtype: str
    n_nan: int = 0
    kind: str | None = None  # "binary" | "categorical" | "continuous" | "text" | "datetime" | "empty" | "other"
    num_unique: int | None = None
    value_range: list[Any] | None = None  # [min, max] for numeric/datetime columns
    unique_values: list[Any] | None = None  # all uniques when there are at most 5
    example_values: list[str] | None = None  # up to 5 short reprs
    # For object/string columns: do all non-null values parse as numbers?
    # "all" | "some" | "none"; with the first value that does not parse.
    numeric_parse: str | None = None
    non_numeric_example: str | None = None  # repr of the value, as Python's error message shows it
    # its row (0-based, missing values counted): the "at position N" of pd.to_numeric's error; only when every
    # row was looked at and no value before it is one pandas' parser rejects but float() takes ("1_000")
    non_numeric_position: int | None = None
    # Large columns: value facts come from a strided sample. Then n_nan is not a count (left 0) and has_nan is
    # True when NaNs were seen in the sample, None when none were.
    sampled: bool = False
    has_nan: bool | None = None
    # pandas StringDtype columns (pandas 3's `str`, "string"): storage ("pyarrow" | "python") and the dtype's repr.
    string_storage: str | None = None
    dtype_repr: str | None = None


class IndexFacts(msgspec.Struct, omit_defaults=True):
    type: str  # e.g. "RangeIndex", "Index"
    dtype: str
    length: int
    start: Any = None  # RangeIndex start/stop/step, or min/max of a numeric index
    stop: Any = None
    step: Any = None
    min: Any = None
    max: Any = None
    unique: bool | None = None
    # Level names (one per level; None for an unnamed level; non-str names as reprs). None: not read.
    names: list[str | None] | None = None


class ParamFacts(msgspec.Struct, omit_defaults=True):
    """One parameter of a callable's signature (inspect.Parameter)."""

    name: str
    kind: str  # POSITIONAL_ONLY | POSITIONAL_OR_KEYWORD | VAR_POSITIONAL | KEYWORD_ONLY | VAR_KEYWORD
    has_default: bool = False
    default: str | None = None  # short repr


class EstimatorFacts(msgspec.Struct, omit_defaults=True):
    """A scikit-learn estimator (anything with get_params and fit)."""

    class_name: str
    module: str
    is_fitted: bool
    n_features_in: int | None = None
    feature_names_in: list[str] | None = None
    classes: list[Any] | None = None
    n_outputs: int | None = None
    params: dict[str, str] = {}  # get_params(deep=False), short reprs
    fitted_attributes: list[str] | None = None  # instance attributes ending in "_" (bounded)
    n_classes: int | None = None  # len(classes_) (classes itself is bounded)
    # scikit-learn's own `_validate_params` in the kernel (its installed version) rejected the parameters: the
    # first line of its InvalidParameterError
    params_error: str | None = None


class LayerFacts(msgspec.Struct, omit_defaults=True):
    name: str
    type: str
    in_features: int | None = None
    out_features: int | None = None
    in_channels: int | None = None
    out_channels: int | None = None
    kernel_size: list[int] | None = None
    num_embeddings: int | None = None
    embedding_dim: int | None = None


class TorchModuleFacts(msgspec.Struct, omit_defaults=True):
    """A torch nn.Module: its leaf layers in registration order (bounded) and what input it expects."""

    layers: list[LayerFacts] = []
    n_parameters: int | None = None
    training: bool | None = None
    device: str | None = None
    first_layer: str | None = None
    expected_input_rank: int | None = None  # 2 for Linear-first, 4 for Conv2d-first, ...
    expected_in_features: int | None = None  # in_features / in_channels of the first layer
    truncated: bool = False
    # dtype shared by every floating-point parameter ("torch.float32"); None when unknown, none or mixed
    dtype: str | None = None
    mixed_dtypes: bool = False  # floating parameters of more than one dtype


class KerasLayerFacts(msgspec.Struct, omit_defaults=True):
    """One layer of a Keras model (instance-dict reads)."""

    name: str
    type: str  # class name: "Dense", "Conv2D", ...
    units: int | None = None
    filters: int | None = None
    activation: str | None = None  # "relu", "softmax", "linear" (None: the layer has no activation)
    ndim: int | None = None  # the layer's InputSpec: exact input rank (batch axis included) ...
    min_ndim: int | None = None  # ... or the least rank (Conv2D: 4)
    from_logits: bool | None = None


class KerasModelFacts(msgspec.Struct, omit_defaults=True):
    input_shape: str | None = None
    output_shape: str | None = None
    n_layers: int | None = None
    loss: str | None = None
    built: bool | None = None
    # Keras 3 (all read from instance dicts): compile() was called; its optimizer, losses (strings as given,
    # functions by name, Loss objects by class) and metrics; the shapes of the inputs/outputs of a built
    # functional/sequential model (-1: any size, the batch axis included); the layers in order.
    compiled: bool | None = None
    optimizer: str | None = None
    losses: list[str] | None = None
    from_logits: bool | None = None  # of a Loss object given to compile
    metrics: list[str] | None = None
    inputs: list[list[int]] | None = None
    outputs: list[list[int]] | None = None
    layers: list[KerasLayerFacts] | None = None
    layers_truncated: bool = False
    sequential: bool | None = None


class JitFacts(msgspec.Struct, omit_defaults=True):
    """A jax.jit-wrapped function: the wrapped function, its static arguments and (from linecache) its source and
    the sources of the plain Python functions it names as globals (two levels, bounded)."""

    function: str
    params: list[str] | None = None
    static_argnums: list[int] = []
    static_argnames: list[str] = []
    source: str | None = None
    callees: dict[str, str] | None = None


class DataLoaderFacts(msgspec.Struct, omit_defaults=True):
    batch_size: int | None = None
    num_batches: int | None = None
    num_examples: int | None = None
    dataset_type: str | None = None
    sample_shapes: list[str] | None = None  # shapes of the fields of dataset[0] (tensor datasets only)
    sample_dtypes: list[str] | None = None
    batch_shapes: list[str] | None = None  # [batch_size, *sample shape] per field (default collate only)
    num_classes: int | None = None  # Keras DirectoryIterator / DataFrameIterator
    image_shape: str | None = None
    class_mode: str | None = None


class Facts(msgspec.Struct, omit_defaults=True):
    """Everything the probe learned about one name in the user's namespace."""

    name: str
    type: str  # qualified type name, e.g. "pandas.core.frame.DataFrame"
    kind: str = "other"  # dataframe | series | ndarray | tensor | scalar | str | list | tuple | dict | set |
    #                      estimator | torch_module | keras_model | dataloader | module | function | class | other
    #                      | index (pandas Index) | sparse (scipy.sparse) | tf_dataset | keras_history
    #                      | polars_frame | polars_lazy | polars_series (columns: polars dtypes, n_nan: nulls)
    #                      ("tensor" also for TensorFlow tensors/variables and jax arrays: dtype "float32")
    defined_in: int | None = None  # execution count of the cell that last assigned it (filled daemon-side)
    value: str | None = None  # short repr for scalars / short strings / small containers
    length: int | None = None
    shape: list[int] | None = None
    dtype: str | None = None
    has_nan: bool | None = None
    n_nan: int | None = None
    value_range: list[Any] | None = None
    num_unique: int | None = None
    unique_values: list[Any] | None = None
    example_values: list[str] | None = None
    numeric_parse: str | None = None  # as in ColumnFacts, for object arrays / Series
    non_numeric_example: str | None = None
    non_numeric_position: int | None = None  # as in ColumnFacts
    columns: list[ColumnFacts] | None = None
    columns_truncated: bool = False
    index: IndexFacts | None = None
    keys: list[str] | None = None  # dict keys (reprs, bounded)
    preview: dict[str, str] | None = None  # dict: first items, key repr -> short value repr
    element_types: list[str] | None = None  # list/tuple: types of the first elements
    device: str | None = None
    requires_grad: bool | None = None
    estimator: EstimatorFacts | None = None
    torch_module: TorchModuleFacts | None = None
    keras_model: KerasModelFacts | None = None
    dataloader: DataLoaderFacts | None = None
    signature: list[ParamFacts] | None = None  # callables (bounded)
    module_name: str | None = None  # for modules: __name__
    truncated: bool = False  # the per-variable size cap cut something
    # Added fields (all optional):
    value_kind: str | None = None  # kind of the values, as ColumnFacts.kind (binary | categorical | continuous ...)
    sampled: bool = False  # value facts come from a bounded strided sample (n_nan then absent; has_nan True or None)
    element_spec: str | None = None  # tf.data datasets
    # Classes and functions: `__module__.__qualname__`, read statically ("sklearn.linear_model._base.
    # LinearRegression"), and the shortest public path of a loaded parent module whose dict holds the same
    # object ("sklearn.linear_model.LinearRegression"), when it differs.
    qualname: str | None = None
    public_name: str | None = None
    # The signature is the callable's own: a plain Python function (or a bound method of one, or a class built
    # by type.__call__ + object.__new__ + such an __init__) with no __wrapped__ / __signature__ and its code's
    # own name, so binding errors are exactly what `signature` says. False: a decorator, C code or a partial may
    # accept other forms (only "multiple values" can be judged).
    signature_own: bool = False
    signature_name: str | None = None  # the name CPython's binding TypeErrors use: "f", "A.m", "Model.__init__"
    signature_bound: int = 0  # leading parameters already bound (self of a bound method / __init__), not listed
    # Series: the `.name` label (repr when not a str) and whether it has one (False: name is None).
    series_name: str | None = None
    has_name: bool | None = None
    # Today's libraries: why no value facts were read (a tensor on another device, sparse or ragged data), a jax
    # array's committed flag, a jitted function, whether a tf.data pipeline batches.
    value_skipped: str | None = None
    committed: bool | None = None
    jit: JitFacts | None = None
    batched: bool | None = None
    # pandas StringDtype Series: as in ColumnFacts.
    string_storage: str | None = None
    dtype_repr: str | None = None


class AttrCheck(msgspec.Struct, omit_defaults=True):
    """Static attribute lookup (inspect.getattr_static): never runs properties or __getattr__."""

    expr: str  # "model.feature_importances_"
    present: bool | None  # None: cannot tell statically (e.g. the type defines __getattr__)
    owner_type: str | None = None  # type of the object the attribute was looked up on
    owner_shown: str | None = None  # that type's name as CPython's messages show it (its tp_name), when absent
    facts: Facts | None = None  # facts of the attribute's value, when it is plain data in an instance dict
    signature: list[ParamFacts] | None = None  # when the attribute is a callable
    suggestions: list[str] | None = None  # close names that do exist, when present is False
    message: str | None = None  # the library's own AttributeError text, when it has one (e.g. numpy's np.float)
    qualname: str | None = None  # as Facts.qualname, when the attribute is a class or function
    public_name: str | None = None
    signature_own: bool = False  # as Facts.signature_own / signature_name / signature_bound
    signature_name: str | None = None
    signature_bound: int = 0


class KeyCheck(msgspec.Struct, omit_defaults=True):
    """Membership of a literal key in a live container (dict keys, DataFrame columns, index labels)."""

    expr: str  # name or attribute chain the key is applied to
    key: Any
    axis: str  # "key" (dict / columns / Series index) | "columns" | "index"
    present: bool | None
    missing_ok: bool = False  # the dict supplies missing keys (defaultdict, __missing__)
    length: int | None = None  # for an int key on a list/tuple/str/array: the length it was checked against
    suggestions: list[str] | None = None  # close keys that do exist, when present is False


RESUME_ROUNDS = 64  # requests after a `resumable` answer, at most, to complete its exact passes


class ProbeRequest(msgspec.Struct, omit_defaults=True):
    """What the daemon asks the probe about one target cell (all derived from static analysis)."""

    names: list[str] = []
    user_names: int = 0  # list the user's variables (at most this many; 0: none): ProbeResult.user_names
    attrs: list[str] = []  # attribute chains, e.g. "model.feature_importances_", "plt.scatter"
    keys: list[list[Any]] = []  # [expr, key, axis]
    modules: list[str] = []  # top-level module names to look up with importlib.util.find_spec
    paths: list[str] = []  # literal file paths, relative to the kernel's cwd
    max_var_bytes: int | None = None  # per-variable cap (default 4096)
    max_total_bytes: int | None = None  # total cap (default 32768)
    time_budget_ms: float | None = None  # expensive work stops past this (default 50)
    # Time exact passes over large values may spend reading in one call (default 2 % of the time budget:
    # 1 ms): a pass still running then stops, and the next request while nothing runs goes on from there.
    # Every pass reads at least one chunk per call (0: exactly one).
    scan_slice_ms: float | None = None
    # Column labels the cell mentions (string constants, attribute names, integer subscripts): DataFrames give
    # value facts (kind, uniques, range, examples) only for these columns, and name, dtype, NaN count and
    # numeric_parse for the others. None: value facts for every column (up to 60).
    columns: list[str | int] | None = None
    # The daemon's view of the kernel's activity (what its iopub watcher saw other clients send): facts the
    # probe remembers from a call with another epoch are not reused (see kernel/cache).
    epoch: str | None = None
    # Estimators the cell builds with literal keywords, validated by the kernel's own scikit-learn:
    # [key (the call's text), callee (dotted, the cell's imports resolved), {keyword: literal source}].
    constructions: list[list[Any]] = []


class ProbeResult(msgspec.Struct, omit_defaults=True):
    facts: dict[str, Facts] = {}
    undefined: list[str] = []  # requested names bound neither in the user namespace nor in builtins
    # the user's variables (ProbeRequest.user_names): not private, not hidden by IPython (In, Out, exit...), sorted
    user_names: list[str] = []
    attrs: list[AttrCheck] = []
    keys: list[KeyCheck] = []
    modules: dict[str, bool] = {}  # module -> can be found (importlib.util.find_spec, no import)
    imported_modules: list[str] = []  # requested modules already imported in the kernel
    paths: dict[str, bool] = {}  # literal path -> exists relative to the kernel's cwd
    cwd: str | None = None
    libraries: dict[str, str] = {}  # versions of loaded ML libraries: {"sklearn": "1.2.2", ...}
    elapsed_ms: float = 0.0
    payload_bytes: int = 0
    truncated: bool = False  # the total size cap cut something
    errors: list[str] = []  # facts the probe could not compute (it never raises)
    path_suggestions: dict[str, list[str]] = {}  # missing path -> similar existing entries of its folder
    time_capped: bool = False  # the time budget ran out: later variables got cheaper facts
    # Exact passes this call left unfinished (their values' facts are a sample's, `sampled`): asking again while
    # nothing runs continues them, until an answer without it.
    resumable: bool = False
    cached: int = 0  # facts and checks reused from an earlier call (the kernel's state had not changed)
    scanned: int = 0  # elements this call read exactly (scan-budget units: a Python object counts 16)
    # ProbeRequest.constructions the kernel's scikit-learn rejects: key -> the InvalidParameterError's first line.
    param_errors: dict[str, str] = {}


_decoder = msgspec.json.Decoder(ProbeResult)


def decode_probe_result(data: bytes | str) -> ProbeResult:
    """Decode and validate the probe's JSON output (raises msgspec.ValidationError/DecodeError)."""
    return _decoder.decode(data)
