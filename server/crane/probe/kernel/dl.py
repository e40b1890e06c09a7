"""CRANE kernel probe: today's deep-learning and tabular libraries (standard library only).

TensorFlow tensors/variables/ragged/sparse tensors, jax arrays and jitted functions, Keras 3 models (compiled or
not, optimizer, losses, layers), Keras History, tf.data batching, polars DataFrame/LazyFrame/Series. Libraries are
reached through `sys.modules` only; methods and properties are called only on the library's own classes (the exact
type lives in the library), never on user subclasses. Values are read only from host memory: a tensor or array on
another device gets its shape, dtype and device, and `value_skipped` says why no value facts.
"""

from __future__ import annotations

import linecache
from typing import Any

from crane.probe.kernel.common import (  # kernel: strip
    Ctx,  # kernel: strip
    class_dict,  # kernel: strip
    class_lookup,  # kernel: strip
    in_lib,  # kernel: strip
    inst_dict,  # kernel: strip
    isa,  # kernel: strip
    jval,  # kernel: strip
    mro,  # kernel: strip
    mro_has,  # kernel: strip
    short,  # kernel: strip
    short_tname,  # kernel: strip
)  # kernel: strip
from crane.probe.kernel.data import vector_facts  # kernel: strip

DL_MAX_LAYERS = 40
DL_MAX_SOURCE = 4000  # characters of a jitted function's (or a callee's) source
DL_MAX_CALLEES = 8
DL_MAX_POLARS_COLUMNS = 200
# Values of these libraries are read whole in one call (their passes cannot be resumed: each call sees a new view),
# so above DL_EXACT_N elements a strided sample of DL_SAMPLE_N is read instead (NaN/null counts of polars columns
# stay exact: they come from metadata).
DL_EXACT_N = 200_000
DL_SAMPLE_N = 20000


def _dl_own(t: type, libs: tuple[str, ...]) -> bool:
    """The exact type is the library's own (so its methods and properties are the library's)."""
    return in_lib(t, libs)


# -- TensorFlow -----------------------------------------------------------------------------------------------------
_TF_TENSOR_NAMES = ("EagerTensor", "ResourceVariable", "UninitializedVariable", "RaggedTensor", "SparseTensor")


def is_tf_tensor(t: type) -> bool:
    return _dl_own(t, ("tensorflow",)) and short_tname(t) in _TF_TENSOR_NAMES


def _dims(shape: Any) -> list[int]:
    out = []
    for d in shape:
        out.append(-1 if d is None else int(d))
    return out


def tf_tensor_facts(ctx: Ctx, x: Any, out: dict[str, Any]) -> None:
    t = type(x)
    name = short_tname(t)
    out["kind"] = "tensor"
    if name == "SparseTensor":
        out["shape"] = [int(d) for d in x.dense_shape.numpy()]
        out["dtype"] = x.dtype.name
        out["value_skipped"] = "sparse"
        return
    if name == "RaggedTensor":
        out["shape"] = _dims(x.shape.as_list())  # ragged dimensions are -1
        out["dtype"] = x.dtype.name
        out["value_skipped"] = "ragged"
        return
    out["shape"] = _dims(x.shape.as_list())
    out["dtype"] = x.dtype.name
    try:
        dev = str(x.device)
    except Exception:
        dev = ""
    out["device"] = dev or None
    if name in ("ResourceVariable", "UninitializedVariable"):
        out["requires_grad"] = bool(x.trainable)
    if "CPU" not in dev.upper():
        out["value_skipped"] = "device"
        return
    if name == "UninitializedVariable":
        return
    # EagerTensor._numpy: a read-only view of the host buffer (`numpy()` copies it); a variable's value is a tensor
    val = x.value() if name == "ResourceVariable" else x
    raw = class_lookup(type(val), "_numpy", None)
    _host_values(ctx, raw(val) if raw is not None and _dl_own(type(val), ("tensorflow",)) else val.numpy(), out)


def _host_values(ctx: Ctx, arr: Any, out: dict[str, Any]) -> None:
    """Value facts of a host ndarray (a zero-copy view of the tensor's memory where the library allows)."""
    np = ctx.np
    if np is None or not isa(arr, np.ndarray):
        return
    if arr.ndim == 0:
        out["value"] = short(jval(arr.item(), ctx), ctx)
        return
    if arr.dtype.kind not in "biuf":
        return
    flat = arr.reshape(-1)
    n = len(flat)
    if n <= DL_EXACT_N and ctx.can_scan(n):
        vector_facts(ctx, flat, out, exact=True, resumable=False)
    else:  # a pass could not be resumed (a new view each call): a strided sample keeps the call within budget
        vector_facts(ctx, flat[:: max(1, n // DL_SAMPLE_N)], out, exact=False, resumable=False)


# -- jax ------------------------------------------------------------------------------------------------------------
def is_jax_array(t: type) -> bool:
    return _dl_own(t, ("jaxlib", "jax")) and short_tname(t) in ("ArrayImpl", "Array")


def jax_array_facts(ctx: Ctx, x: Any, out: dict[str, Any]) -> None:
    out["kind"] = "tensor"
    out["shape"] = [int(d) for d in x.shape]
    out["dtype"] = str(x.dtype)
    try:
        devs = sorted(str(d) for d in x.devices())
        out["device"] = ",".join(devs)[:100]
        out["committed"] = bool(x.committed)
        cpu = all(d.platform == "cpu" for d in x.devices())
    except Exception:
        cpu = False
    if not cpu:
        out["value_skipped"] = "device"
        return
    if x.is_deleted():
        out["value_skipped"] = "deleted"
        return
    np = ctx.np
    if np is not None:
        _host_values(ctx, np.asarray(x), out)  # CPU: a view of the buffer, no transfer


def is_jit_function(t: type) -> bool:
    return _dl_own(t, ("jaxlib", "jax")) and short_tname(t) == "PjitFunction"


def _source_of(fn: Any) -> str | None:
    """The source text of a plain Python function, from linecache (IPython keeps every cell there): no user code."""
    code = getattr(fn, "__code__", None)
    if code is None or type(fn).__name__ != "function":
        return None
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    start = code.co_firstlineno - 1
    if start < 0 or start >= len(lines):
        return None
    # the def (with its decorators) and every following line indented deeper than it
    first = lines[start]
    indent = len(first) - len(first.lstrip())
    body = [first]
    while first.lstrip().startswith("@") and start + 1 < len(lines):
        start += 1
        first = lines[start]
        body.append(first)
    for ln in lines[start + 1 :]:
        stripped = ln.strip()
        if stripped and (len(ln) - len(ln.lstrip())) <= indent and not stripped.startswith(("#", ")", "]", "}")):
            break
        body.append(ln)
    text = "".join(body)
    return text if len(text) <= DL_MAX_SOURCE else None


def _callees(fn: Any, depth: int = 0, seen: dict[str, str] | None = None) -> dict[str, str]:
    """Sources of the plain Python functions a function names as globals (two levels)."""
    seen = seen if seen is not None else {}
    code = getattr(fn, "__code__", None)
    g = getattr(fn, "__globals__", None)
    if code is None or type(g) is not dict:
        return seen
    for nm in code.co_names:
        if len(seen) >= DL_MAX_CALLEES or nm in seen:
            continue
        f = g.get(nm)
        if type(f).__name__ == "function":
            src = _source_of(f)
            if src is not None:
                seen[nm] = src
                if depth < 1:
                    _callees(f, depth + 1, seen)
    return seen


def jit_facts(ctx: Ctx, f: Any, out: dict[str, Any]) -> None:
    out["kind"] = "function"
    info = f._jit_info
    wrapped = f.__wrapped__
    jf: dict[str, Any] = {
        "function": str(getattr(wrapped, "__qualname__", "?"))[:80],
        "static_argnums": [int(i) for i in info.static_argnums],
        "static_argnames": [str(n) for n in info.static_argnames],
    }
    sig = info.fun_signature
    if sig is not None:
        jf["params"] = [str(p) for p in list(sig.parameters)[:30]]
    src = _source_of(wrapped)
    if src is not None:
        jf["source"] = src
        callees = _callees(wrapped)
        callees.pop(jf["function"], None)
        if callees:
            jf["callees"] = callees
    out["jit"] = jf


# -- Keras 3 --------------------------------------------------------------------------------------------------------
def _kname(obj: Any) -> str | None:
    """A Keras object's name: a string as is, a loss/metric/activation function's __name__, else its class name."""
    if obj is None:
        return None
    if type(obj) is str:
        return obj
    n = getattr(obj, "__name__", None) if type(obj).__name__ == "function" else None
    if type(n) is str:
        return n
    return short_tname(type(obj))


def _layer_facts(layer: Any) -> dict[str, Any]:
    d = inst_dict(layer) or {}
    lf: dict[str, Any] = {"name": str(d.get("name", "?"))[:60], "type": short_tname(type(layer))}
    for key in ("units", "filters"):
        if type(d.get(key)) is int:
            lf[key] = d[key]
    act = d.get("activation")
    if act is not None:
        lf["activation"] = _kname(act)
    spec = d.get("_input_spec", d.get("input_spec"))
    if spec is not None and not isa(spec, list):
        sd = inst_dict(spec) or {}
        for key in ("ndim", "min_ndim"):
            if type(sd.get(key)) is int:
                lf[key] = sd[key]
    if type(d.get("from_logits")) is bool:
        lf["from_logits"] = d["from_logits"]
    return lf


def keras_extra_facts(ctx: Ctx, m: Any, kf: dict[str, Any]) -> None:
    """Compiled or not, optimizer, losses, metrics, inputs/outputs and layers of a Keras 3 model (instance dicts)."""
    d = inst_dict(m) or {}
    if type(d.get("compiled")) is bool:
        kf["compiled"] = d["compiled"]
    if d.get("optimizer") is not None and d.get("compiled"):
        kf["optimizer"] = _kname(d["optimizer"])
    loss = d.get("loss")
    if loss is not None:
        if type(loss) in (list, tuple):
            kf["losses"] = [str(_kname(x)) for x in loss[:10]]
        elif type(loss) is dict:
            kf["losses"] = [str(_kname(x)) for x in list(loss.values())[:10]]
        else:
            kf["losses"] = [str(_kname(loss))]
            if type(loss) is not str:
                ld = inst_dict(loss) or {}
                if type(ld.get("from_logits")) is bool:
                    kf["from_logits"] = ld["from_logits"]
                fn = ld.get("fn")
                if fn is not None and type(ld.get("_fn_kwargs")) is dict:
                    fl = ld["_fn_kwargs"].get("from_logits")
                    if type(fl) is bool:
                        kf["from_logits"] = fl
    cfg = d.get("_compile_config")
    cd = inst_dict(cfg) if cfg is not None else None
    conf = cd.get("config") if cd else None
    if type(conf) is dict and conf.get("metrics") is not None:
        mets = conf["metrics"]
        if type(mets) in (list, tuple):
            kf["metrics"] = [str(_kname(x))[:40] for x in mets[:10]]
    fd = d
    if d.get("_functional") is not None and "_inputs" not in d:  # a built Sequential keeps a Functional
        fd = inst_dict(d["_functional"]) or {}
    for key, attr in (("inputs", "_inputs"), ("outputs", "_outputs")):
        ts: Any = fd.get(attr)
        if isa(ts, list):
            shapes = []
            for x in ts[:10]:
                xd = inst_dict(x) or {}
                shp = xd.get("_shape", xd.get("shape"))
                if type(shp) is tuple:
                    shapes.append([-1 if s is None else int(s) for s in shp])
            if shapes:
                kf[key] = shapes
    layers: Any = d.get("_layers")
    if isa(layers, list):
        layers = [x for x in list.__iter__(layers) if short_tname(type(x)) != "InputLayer"]
        out_layers = []
        for layer in layers[:DL_MAX_LAYERS]:
            if _dl_own(type(layer), ("keras", "tf_keras")):
                out_layers.append(_layer_facts(layer))
            else:
                out_layers.append({"name": "?", "type": short_tname(type(layer))})
        kf["layers"] = out_layers
        if len(layers) > DL_MAX_LAYERS:
            kf["layers_truncated"] = True
    sequential = mro_has(type(m), "keras", ("Sequential",))
    kf["sequential"] = bool(sequential)


def is_keras_history(t: type) -> bool:
    return mro_has(t, "keras", ("History",)) and in_lib(t, ("keras", "tf_keras"))


def keras_history_facts(ctx: Ctx, h: Any, out: dict[str, Any]) -> None:
    d = inst_dict(h) or {}
    out["kind"] = "keras_history"
    hist = d.get("history")
    if type(hist) is dict:
        out["keys"] = [str(k)[:40] for k in list(hist)[:30]]
    ep = d.get("epoch")
    if type(ep) is list:
        out["length"] = len(ep)


def tf_dataset_batched(ds: Any) -> bool | None:
    """Whether a tf.data pipeline batches (a batch-like dataset on its chain of `_input_dataset`s), or None."""
    cur = ds
    for _ in range(50):
        name = short_tname(type(cur))
        if "Batch" in name:
            return True
        d = inst_dict(cur) or {}
        nxt = d.get("_input_dataset")
        if nxt is None:
            return False
        cur = nxt
    return None


# -- polars ---------------------------------------------------------------------------------------------------------
def polars_kind(t: type) -> str | None:
    if not _dl_own(t, ("polars",)):
        return None
    name = short_tname(t)
    return {"DataFrame": "polars_frame", "LazyFrame": "polars_lazy", "Series": "polars_series"}.get(name)


def _pl_column(ctx: Ctx, s: Any, name: Any, wanted: bool) -> dict[str, Any]:
    col: dict[str, Any] = {"name": str(name)[:80], "dtype": str(s.dtype)}
    try:
        nn = int(s.null_count())  # metadata: no scan
        col["n_nan"] = nn
    except Exception:
        pass
    if wanted and ctx.np is not None and not ctx.over_time():
        try:
            kind = str(s.dtype)
            if kind.startswith(("Int", "UInt", "Float", "Boolean")):
                n = int(s.len())
                exact = n <= DL_EXACT_N and ctx.can_scan(n)
                src = s if exact else s.gather_every(max(1, n // DL_SAMPLE_N))  # a strided sample, not a copy of all
                arr = (src.drop_nulls() if nn else src).to_numpy()  # no nulls: a view of the buffer
                vector_facts(ctx, arr, col, exact=exact, kind_key="kind", resumable=False)
                col["n_nan"], col["has_nan"] = nn, nn > 0
            elif kind in ("String", "Categorical") and s.len() <= 200000:
                vals = s.drop_nulls().head(5).to_list()
                col["example_values"] = [short(v, ctx, 40) for v in vals]
        except Exception as exc:
            ctx.error("polars column %s" % name, exc)
    return col


def polars_facts(ctx: Ctx, v: Any, kind: str, out: dict[str, Any]) -> None:
    out["kind"] = kind
    if kind == "polars_lazy":
        schema = v.collect_schema()  # resolves the plan's schema; collects nothing
        cols = [{"name": str(k)[:80], "dtype": str(dt)} for k, dt in list(schema.items())[:DL_MAX_POLARS_COLUMNS]]
        out["columns"] = cols
        out["columns_truncated"] = len(schema) > DL_MAX_POLARS_COLUMNS
        return
    if kind == "polars_series":
        n = int(v.len())
        out["length"] = n
        out["shape"] = [n]
        out["dtype"] = str(v.dtype)
        out["series_name"] = str(v.name)[:80]
        c = _pl_column(ctx, v, v.name, True)
        out["n_nan"] = c.get("n_nan")
        for key in ("num_unique", "value_range", "unique_values", "example_values"):
            if key in c:
                out[key] = c[key]
        if "kind" in c:
            out["value_kind"] = c["kind"]
        return
    h, w = int(v.height), int(v.width)
    out["length"] = h
    out["shape"] = [h, w]
    wanted = ctx.wanted
    cols = []
    for i, s in enumerate(v.get_columns()[:DL_MAX_POLARS_COLUMNS]):
        nm = s.name
        cols.append(_pl_column(ctx, s, nm, wanted is None and i < 20 or (wanted is not None and nm in wanted)))
    out["columns"] = cols
    out["columns_truncated"] = w > DL_MAX_POLARS_COLUMNS


# -- gradient boosting ----------------------------------------------------------------------------------------------
_BOOST_LIBS = ("xgboost", "lightgbm", "catboost")


def boosting_params(ctx: Ctx, est: Any, ef: dict[str, Any]) -> None:
    """get_params of xgboost/lightgbm/catboost estimators (the library's own method), as short reprs."""
    t = type(est)
    gp = class_lookup(t, "get_params", None)
    owner = None
    for k in mro(t):
        if "get_params" in class_dict(k):
            owner = k
            break
    if gp is None or owner is None or not in_lib(owner, _BOOST_LIBS + ("sklearn",)) or not in_lib(t, _BOOST_LIBS):
        return
    try:
        params = est.get_params(deep=False)
    except TypeError:
        params = est.get_params()
    except Exception as exc:
        ctx.error("get_params", exc)
        return
    ef["params"] = {str(k): short(v, ctx, 40) for k, v in list(params.items())[:60]}


def boosting_features(ctx: Ctx, est: Any, ef: dict[str, Any]) -> None:
    """The feature count (and, for xgboost, names) a fitted xgboost/LightGBM model was trained on: LightGBM's
    `_n_features` (instance dict), xgboost's Booster `num_features()` / `feature_names` (the library's own)."""
    t = type(est)
    d = inst_dict(est) or {}
    try:
        if in_lib(t, ("lightgbm",)):
            n = d.get("_n_features")
            if type(n) is int and n > 0:
                ef["n_features_in"] = n
        elif in_lib(t, ("xgboost",)):
            b = d.get("_Booster")
            if b is None or not in_lib(type(b), ("xgboost",)):
                return
            n = b.num_features()
            if type(n) is int and n > 0:
                ef["n_features_in"] = n
            names = b.feature_names
            if type(names) is list and len(names) <= 200 and all(type(x) is str for x in names):
                ef["feature_names_in"] = [x[:80] for x in names]
    except Exception as exc:
        ctx.error("boosting features", exc)


__all__ = [
    "is_tf_tensor", "tf_tensor_facts", "is_jax_array", "jax_array_facts", "is_jit_function", "jit_facts",
    "keras_extra_facts", "is_keras_history", "keras_history_facts", "tf_dataset_batched", "polars_kind",
    "polars_facts", "boosting_params", "boosting_features",
]  # fmt: skip
