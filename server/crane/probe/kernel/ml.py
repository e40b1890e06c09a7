"""CRANE kernel probe: facts about ML library objects (standard library only).

torch tensors, nn.Module structure, DataLoaders; scikit-learn estimators; Keras models and iterators; tf.data
datasets; scipy sparse matrices. Libraries are reached through `sys.modules` only. Attributes of these objects
are read from instance dicts; library methods are called only on classes defined in the library itself.
"""

from __future__ import annotations

import ast
import math
import sys
import types
from typing import Any

from crane.probe.kernel.common import (  # kernel: strip
    Ctx,  # kernel: strip
    class_dict,  # kernel: strip
    class_lookup,  # kernel: strip
    in_lib,  # kernel: strip
    inst_dict,  # kernel: strip
    isa,  # kernel: strip
    jval,  # kernel: strip
    mod_attr,  # kernel: strip
    mro,  # kernel: strip
    mro_has,  # kernel: strip
    plain_array,  # kernel: strip
    short,  # kernel: strip
    short_tname,  # kernel: strip
    tmodule,  # kernel: strip
    tname,  # kernel: strip
    trunc,  # kernel: strip
)  # kernel: strip
from crane.probe.kernel.data import vector_facts  # kernel: strip

MAX_LAYERS = 30
MAX_MODULES_VISITED = 2000
MAX_NAMES = 50  # feature names kept
MAX_CLASSES = 20
MAX_PARAMS = 30

_FIT_CHECK_LIBS = ("sklearn", "xgboost", "lightgbm", "catboost", "imblearn")
_LEN_LIBS = ("torch", "torchvision", "torchaudio", "torchtext", "datasets")
_KERAS_LIBS = ("keras", "tensorflow", "tf_keras")

# Layers that do not constrain the input shape (skipped when looking for the first shape-defining layer).
_SHAPELESS = frozenset(
    "ReLU ReLU6 LeakyReLU PReLU RReLU ELU SELU CELU GELU SiLU Mish Sigmoid Tanh Hardtanh Hardswish Hardsigmoid "
    "Softplus Softsign Softmax LogSoftmax Identity Dropout Dropout1d Dropout2d Dropout3d AlphaDropout Threshold".split()
)
# Batched input rank expected by the first shape-defining layer (Linear accepts any rank >= 1; 2 is the batched one).
_RANK = {
    "Linear": 2, "Bilinear": 2, "LazyLinear": 2,
    "Conv1d": 3, "ConvTranspose1d": 3, "LazyConv1d": 3, "MaxPool1d": 3, "AvgPool1d": 3, "AdaptiveAvgPool1d": 3,
    "AdaptiveMaxPool1d": 3, "InstanceNorm1d": 3,
    "Conv2d": 4, "ConvTranspose2d": 4, "LazyConv2d": 4, "MaxPool2d": 4, "AvgPool2d": 4, "AdaptiveAvgPool2d": 4,
    "AdaptiveMaxPool2d": 4, "BatchNorm2d": 4, "InstanceNorm2d": 4,
    "Conv3d": 5, "ConvTranspose3d": 5, "MaxPool3d": 5, "AvgPool3d": 5, "BatchNorm3d": 5,
    "RNN": 3, "LSTM": 3, "GRU": 3, "TransformerEncoder": 3, "TransformerEncoderLayer": 3, "MultiheadAttention": 3,
}  # fmt: skip


# -- torch --------------------------------------------------------------------------------------------------------
def tensor_facts(ctx: Ctx, t: Any, out: dict[str, Any]) -> None:
    torch, np = ctx.torch, ctx.np
    out["shape"] = [int(d) for d in t.shape]
    out["dtype"] = str(t.dtype)
    out["device"] = str(t.device)
    out["requires_grad"] = bool(t.requires_grad)
    if t.device.type != "cpu" or t.is_sparse or t.is_quantized or t.layout != torch.strided:
        return  # reading other devices would copy or synchronise
    n = t.numel()
    if n == 0:
        out["value_kind"] = "empty"
        return
    d = t.detach()
    if d.dim() == 0:
        out["value"] = short(jval(d.item(), ctx), ctx)
        return
    exact = ctx.can_scan(n)
    if exact:
        flat = d.reshape(-1)
    elif d.is_contiguous():
        flat = d.reshape(-1)[:: int(math.ceil(n / 20000.0))]
    else:
        k = max(1, int(20000 ** (1.0 / d.dim())))
        flat = d[tuple(slice(None, None, max(1, int(math.ceil(s / float(k))))) for s in d.shape)].reshape(-1)
    if np is not None:
        try:
            if flat.dtype in (torch.bfloat16,):
                flat = flat.float()
            # a new array (and tensor) each call: a pass over it could never be resumed, so it is read whole
            vector_facts(ctx, flat.numpy(), out, exact=exact, resumable=False)
            return
        except Exception:  # numpy unusable from torch: fall back to torch ops
            pass
    if flat.is_floating_point():
        nn = int(torch.isnan(flat).sum())
        if exact:
            out["n_nan"], out["has_nan"] = nn, nn > 0
        elif nn:
            out["has_nan"] = True
        valid = flat[~torch.isnan(flat)]
    else:
        valid = flat
    if not exact:
        out["sampled"] = True
    if valid.numel() and flat.dtype != torch.bool and not flat.is_complex():
        out["value_range"] = [jval(valid.min().item()), jval(valid.max().item())]


def _layer(name: str, m: Any) -> dict[str, Any]:
    d = inst_dict(m) or {}
    lf: dict[str, Any] = {"name": name or "(root)", "type": short_tname(type(m))}
    for key in ("in_features", "out_features", "in_channels", "out_channels", "num_embeddings", "embedding_dim"):
        v = d.get(key)
        if type(v) is int:
            lf[key] = v
    ks = d.get("kernel_size")
    if type(ks) is int:
        lf["kernel_size"] = [ks]
    elif type(ks) is tuple and all(type(k) is int for k in ks):
        lf["kernel_size"] = list(ks)
    if type(d.get("input_size")) is int:  # RNN / LSTM / GRU
        lf["in_features"] = d["input_size"]
        if type(d.get("hidden_size")) is int:
            lf["out_features"] = d["hidden_size"] * (2 if d.get("bidirectional") else 1)
    if type(d.get("num_features")) is int:  # BatchNorm
        lf["in_features"] = lf["out_features"] = d["num_features"]
    return lf


def torch_module_facts(ctx: Ctx, mod: Any, out: dict[str, Any]) -> None:
    tm = {}
    d = inst_dict(mod) or {}
    if type(d.get("training")) is bool:
        tm["training"] = d["training"]
    layers: list = []
    visited, n_leaves = 0, 0
    first_shape = None
    for name, m in mod.named_modules():
        visited += 1
        if visited > MAX_MODULES_VISITED or ctx.over_time():
            tm["truncated"] = True
            break
        md = inst_dict(m) or {}
        if md.get("_modules"):
            continue
        n_leaves += 1
        lf = _layer(name, m)
        if len(layers) < MAX_LAYERS:
            layers.append(lf)
        else:
            tm["truncated"] = True
        if first_shape is None and lf["type"] not in _SHAPELESS:
            first_shape = lf
    tm["layers"] = layers
    if layers:
        tm["first_layer"] = layers[0]["type"]
    if first_shape is not None:
        tm["first_layer"] = first_shape["type"]
        rank = _RANK.get(first_shape["type"])
        if rank is not None:
            tm["expected_input_rank"] = rank
            f = first_shape.get("in_features", first_shape.get("in_channels"))
            if f is not None:
                tm["expected_in_features"] = f
    try:
        total, cut = 0, False
        device, dtypes = None, set()
        for i, p in enumerate(mod.parameters()):
            if i > 10000 or ctx.over_time():
                cut = True
                break
            if device is None:
                device = str(p.device)
            if p.is_floating_point():
                dtypes.add(str(p.dtype))
            total += int(p.numel())
        if not cut:
            tm["n_parameters"] = total
            if len(dtypes) == 1:
                tm["dtype"] = dtypes.pop()
            elif len(dtypes) > 1:
                tm["mixed_dtypes"] = True
        if device is not None:
            tm["device"] = device
    except Exception:  # lazy modules have uninitialized parameters
        pass
    out["torch_module"] = tm


def _dataset_len(ctx: Ctx, ds: Any) -> int | None:
    """len(dataset) only where no user code can run: builtins, arrays, torch's own datasets and libraries."""
    t = type(ds)
    if t in (list, tuple, range):
        return len(ds)
    np, torch = ctx.np, ctx.torch
    if np is not None and isa(ds, np.ndarray):
        shape = plain_array(np, ds).shape
        return int(shape[0]) if len(shape) else None
    if torch is not None and isa(ds, torch.Tensor):
        return int(ds.shape[0]) if len(ds.shape) else None
    d = inst_dict(ds) or {}
    name = short_tname(t)
    if in_lib(t, ("torch",)):
        if name == "TensorDataset" and d.get("tensors"):
            return int(d["tensors"][0].shape[0])
        if name == "Subset":
            idx = d.get("indices")
            return _dataset_len(ctx, idx) if idx is not None else None
        if name == "ConcatDataset" and d.get("cumulative_sizes"):
            return int(d["cumulative_sizes"][-1])
        if name in ("IterableDataset",) or mro_has(t, "torch", ("IterableDataset",)):
            return None
    if in_lib(t, _LEN_LIBS) and class_lookup(t, "__len__", None) is not None and in_lib(
        _owner(t, "__len__"), _LEN_LIBS
    ):
        return len(ds)
    return None


def _owner(t: type, name: str) -> type:
    for k in mro(t):
        if name in class_dict(k):
            return k
    return object


def dataloader_facts(ctx: Ctx, dl: Any, out: dict[str, Any]) -> None:
    d = inst_dict(dl) or {}
    ds = d.get("dataset")
    f: dict[str, Any] = {"dataset_type": tname(type(ds))}
    bs = d.get("batch_size")
    if type(bs) is int:
        f["batch_size"] = bs
    n = _dataset_len(ctx, ds)
    if n is not None:
        f["num_examples"] = n
        if type(bs) is int and bs > 0:
            f["num_batches"] = n // bs if d.get("drop_last") else int(math.ceil(n / float(bs)))
    base = ds
    if in_lib(type(ds), ("torch",)) and short_tname(type(ds)) == "Subset":
        base = (inst_dict(ds) or {}).get("dataset")
    if in_lib(type(base), ("torch",)) and short_tname(type(base)) == "TensorDataset":
        tensors = (inst_dict(base) or {}).get("tensors") or ()
        f["sample_shapes"] = [str([int(s) for s in t.shape[1:]]) for t in tensors[:8]]
        f["sample_dtypes"] = [str(t.dtype) for t in tensors[:8]]
        collate = d.get("collate_fn")
        default = mod_attr("torch.utils.data._utils.collate", "default_collate")
        if type(bs) is int and collate is not None and collate is default:
            f["batch_shapes"] = [str([bs] + [int(s) for s in t.shape[1:]]) for t in tensors[:8]]
    out["dataloader"] = f


# -- scikit-learn and friends ---------------------------------------------------------------------------------------
def is_estimator(v: Any) -> bool:
    t = type(v)
    return (
        not isa(v, type)
        and callable(class_lookup(t, "get_params", None))
        and callable(class_lookup(t, "fit", None))
    )


def _est_fitted(ctx: Ctx, est: Any, depth: int = 0) -> bool:
    t = type(est)
    d = inst_dict(est) or {}
    if in_lib(t, _FIT_CHECK_LIBS) and callable(class_lookup(t, "__sklearn_is_fitted__", None)):
        try:
            return bool(est.__sklearn_is_fitted__())
        except Exception:
            pass
    if in_lib(t, ("sklearn",)) and short_tname(t) == "Pipeline" and depth < 5 and type(d.get("steps")) is list:
        ests = [s[1] for s in d["steps"] if type(s) is tuple and len(s) == 2 and is_estimator(s[1])]
        return _est_fitted(ctx, ests[-1], depth + 1) if ests else True  # a Pipeline is fitted when its last step is
    return any(k.endswith("_") and not k.startswith("__") for k in d)


def estimator_facts(ctx: Ctx, est: Any, out: dict[str, Any]) -> None:
    t = type(est)
    d = inst_dict(est) or {}
    ef = {"class_name": short_tname(t), "module": tmodule(t), "is_fitted": _est_fitted(ctx, est)}
    fitted_attrs = [k for k in d if k.endswith("_") and not k.startswith("__")]
    if fitted_attrs:
        ef["fitted_attributes"] = fitted_attrs[:20]
    src = d
    if in_lib(t, ("sklearn",)) and short_tname(t) == "Pipeline" and type(d.get("steps")) is list and d["steps"]:
        first = d["steps"][0][1] if type(d["steps"][0]) is tuple else None
        src = inst_dict(first) or {} if first is not None else d
    nf = src.get("n_features_in_")
    if nf is not None:
        ef["n_features_in"] = jval(nf, ctx)
    names = src.get("feature_names_in_")
    if names is not None:
        try:
            ef["feature_names_in"] = [str(x)[:40] for x in list(names[:MAX_NAMES])]
        except Exception:
            pass
    classes = d.get("classes_")
    if classes is not None:
        try:
            ef["classes"] = [jval(x, ctx) for x in list(classes[:MAX_CLASSES])]
            ef["n_classes"] = len(classes)
        except Exception:
            pass
    if d.get("n_outputs_") is not None:
        ef["n_outputs"] = jval(d["n_outputs_"], ctx)
    if in_lib(t, ("sklearn",)):
        try:
            params = est.get_params(deep=False)
            ef["params"] = {str(k): short(v, ctx, 40) for k, v in list(params.items())[:MAX_PARAMS]}
        except Exception as exc:
            ctx.error("get_params", exc)
        _validate_params(ctx, est, t, ef)
    out["estimator"] = ef


def _sklearn_class(ns: dict[str, Any], dotted: Any) -> type | None:
    """A scikit-learn estimator class named by `dotted` ("RandomForestClassifier", "ensemble.RandomForestClassifier",
    "sklearn.ensemble.RandomForestClassifier"): from the user's namespace or a loaded module, through module dicts
    only (never imports, never runs a module's __getattr__), or None."""
    parts = str(dotted).split(".")
    obj: Any = ns.get(parts[0], None) if isinstance(ns, dict) else None
    rest = parts[1:]
    if obj is None:
        for i in range(len(parts) - 1, 0, -1):
            m = sys.modules.get(".".join(parts[:i]))
            if m is not None:
                obj, rest = m, parts[i:]
                break
    for attr in rest:
        if type(obj) is not types.ModuleType:
            return None
        obj = mod_attr(obj.__name__, attr)
    if not issubclass(type(obj), type):
        return None
    if not in_lib(obj, ("sklearn",)) or not class_lookup(obj, "_parameter_constraints", None):
        return None
    vp = class_lookup(obj, "_validate_params", None)
    if vp is None or not str(getattr(vp, "__module__", "") or "").startswith("sklearn"):
        return None
    return obj


def construction_errors(ctx: Ctx, ns: dict[str, Any], items: list[Any]) -> dict[str, str]:
    """scikit-learn's own parameter validation of estimators a cell builds with literal keywords
    (`RandomForestClassifier(max_features='auto')`), by the kernel's installed version: [key, callee, {kw: source}]
    items -> {key: the InvalidParameterError's first line}. scikit-learn's constructors only store their
    parameters; the instance is dropped at once."""
    out = {}
    for item in items:
        if ctx.over_time():
            break
        try:
            key, callee, kwargs = item
            cls = _sklearn_class(ns, callee)
            if cls is None or type(kwargs) is not dict:
                continue
            params = {str(k): ast.literal_eval(str(v)) for k, v in kwargs.items()}
            est = cls(**params)
            est._validate_params()
        except Exception as exc:
            if short_tname(type(exc)) == "InvalidParameterError":
                out[str(item[0])] = trunc(str(exc).split("\n")[0], 300)
    return out


def _validate_params(ctx: Ctx, est: Any, t: type, ef: dict[str, Any]) -> None:
    """scikit-learn's own parameter validation (reads the parameters, changes nothing), for its own classes."""
    vp = class_lookup(t, "_validate_params", None)
    if vp is None or not str(getattr(vp, "__module__", "") or "").startswith("sklearn"):
        return
    if not class_lookup(t, "_parameter_constraints", None):
        return
    try:
        est._validate_params()
    except Exception as exc:
        if short_tname(type(exc)) == "InvalidParameterError":
            ef["params_error"] = trunc(str(exc).split("\n")[0], 300)


# -- Keras / TensorFlow -----------------------------------------------------------------------------------------------
def is_keras_model(t: type) -> bool:
    return any(mro_has(t, lib, ("Model", "Functional", "Sequential")) for lib in _KERAS_LIBS)


def _lib_property(ctx: Ctx, obj: Any, name: str) -> Any:
    """Read a property only when the library itself defines it (a user subclass could override it)."""
    prop = class_lookup(type(obj), name, None)
    fget = getattr(prop, "fget", None) if type(prop) is property else None
    if fget is None or not any(
        str(getattr(fget, "__module__", "") or "").startswith(lib) for lib in _KERAS_LIBS
    ):
        return None
    try:
        return fget(obj)
    except Exception:
        return None


def keras_model_facts(ctx: Ctx, m: Any, out: dict[str, Any]) -> None:
    d = inst_dict(m) or {}
    kf: dict[str, Any] = {}
    for key in ("input_shape", "output_shape"):
        v = _lib_property(ctx, m, key)
        if v is not None:
            kf[key] = trunc(str(v), 200)
    layers: Any = d.get("_self_tracked_trackables", d.get("_layers"))
    if isa(layers, list):
        kf["n_layers"] = list.__len__(layers)  # never a subclass's __len__
    if type(d.get("built")) is bool:
        kf["built"] = d["built"]
    loss = d.get("loss", d.get("_loss"))
    if loss is not None:
        kf["loss"] = short(loss, ctx, 60)
    out["keras_model"] = kf


def is_tf_dataset(t: type) -> bool:
    return mro_has(t, "tensorflow", ("DatasetV2",))


def tf_dataset_facts(ctx: Ctx, ds: Any, out: dict[str, Any]) -> None:
    prop = class_lookup(type(ds), "element_spec", None)
    if type(prop) is property and prop.fget is not None and in_lib(type(ds), ("tensorflow",)):
        try:
            out["element_spec"] = trunc(str(prop.fget(ds)), 300)
        except Exception as exc:
            ctx.error("element_spec", exc)


def is_keras_iterator(t: type) -> bool:
    return any(mro_has(t, lib, ("Iterator",)) for lib in _KERAS_LIBS + ("keras_preprocessing",))


def keras_iterator_facts(ctx: Ctx, it: Any, out: dict[str, Any]) -> None:
    d = inst_dict(it) or {}
    f: dict[str, Any] = {"dataset_type": short_tname(type(it))}
    n, bs = d.get("n", d.get("samples")), d.get("batch_size")
    if type(n) is int:
        f["num_examples"] = n
    if type(bs) is int:
        f["batch_size"] = bs
        if type(n) is int and bs > 0:
            f["num_batches"] = int(math.ceil(n / float(bs)))
    if type(d.get("num_classes")) is int:
        f["num_classes"] = d["num_classes"]
    for key in ("image_shape", "target_size"):
        if type(d.get(key)) is tuple:
            f["image_shape"] = str(list(d[key]))
            break
    if type(d.get("class_mode")) is str:
        f["class_mode"] = d["class_mode"]
    out["dataloader"] = f


# -- scipy.sparse -------------------------------------------------------------------------------------------------
def is_sparse(t: type) -> bool:
    return in_lib(t, ("scipy.sparse",)) and class_lookup(t, "nnz", None) is not None


def sparse_facts(ctx: Ctx, m: Any, out: dict[str, Any]) -> None:
    out["shape"] = [int(s) for s in m.shape]
    out["dtype"] = str(m.dtype)
    out["value"] = "nnz=%d" % int(m.nnz)


__all__ = [
    "tensor_facts", "torch_module_facts", "dataloader_facts", "is_estimator", "estimator_facts", "is_keras_model",
    "keras_model_facts", "is_tf_dataset", "tf_dataset_facts", "is_keras_iterator", "keras_iterator_facts",
    "is_sparse", "sparse_facts",
]  # fmt: skip
