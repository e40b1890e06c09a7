"""CRANE kernel probe: the entry points `run(request_json)` and `history()` (standard library only).

Installed once per kernel as the private module `_crane_probe` (see collect.py) and called through a silent
request's `user_expressions`; it binds no names in the user's namespace. `run` summarises only the names the
target cell uses and answers its attribute/key/module/path checks, within a size cap per variable and in total
and a time budget. It never prints and never raises: failures are reported in `errors`.

Facts of names, attribute checks and key checks are reused while the kernel's state is unchanged (kernel/cache:
keyed on the execution marker and the identity of the values), unless the call that computed them was cut short
by what it spent earlier (then they depend on the request's order). Module and path checks are always redone:
installed packages and files change without any execution.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
import warnings
from collections.abc import Callable
from typing import Any

from crane.kernel_common.ipython_shell import ipython_shell, shell_namespace, shell_value  # kernel: strip
from crane.probe.kernel.cache import _MODULE_DICT, _MODULE_TYPE, begin, recall, remember  # kernel: strip
from crane.probe.kernel.checks import (  # kernel: strip
    add_callable_facts,  # kernel: strip
    check_attr,  # kernel: strip
    check_key,  # kernel: strip
    lookup_name,  # kernel: strip
    module_found,  # kernel: strip
    path_suggestions,  # kernel: strip
)  # kernel: strip
from crane.probe.kernel.common import (  # kernel: strip
    _SCALARS,  # kernel: strip
    Ctx,  # kernel: strip
    _missing,  # kernel: strip
    dumps,  # kernel: strip
    inst_dict,  # kernel: strip
    isa,  # kernel: strip
    jval,  # kernel: strip
    mod_attr,  # kernel: strip
    plain_array,  # kernel: strip
    short,  # kernel: strip
    size_of,  # kernel: strip
    tmodule,  # kernel: strip
    tname,  # kernel: strip
)  # kernel: strip
from crane.probe.kernel.data import (  # kernel: strip
    index_facts,  # kernel: strip
    label_str,  # kernel: strip
    ndarray_facts,  # kernel: strip
    series_facts,  # kernel: strip
)  # kernel: strip
from crane.probe.kernel.dl import (  # kernel: strip
    boosting_features,  # kernel: strip
    boosting_params,  # kernel: strip
    is_jax_array,  # kernel: strip
    is_jit_function,  # kernel: strip
    is_keras_history,  # kernel: strip
    is_tf_tensor,  # kernel: strip
    jax_array_facts,  # kernel: strip
    jit_facts,  # kernel: strip
    keras_extra_facts,  # kernel: strip
    keras_history_facts,  # kernel: strip
    polars_facts,  # kernel: strip
    polars_kind,  # kernel: strip
    tf_dataset_batched,  # kernel: strip
    tf_tensor_facts,  # kernel: strip
)  # kernel: strip
from crane.probe.kernel.frame import column_facts, dataframe_facts  # kernel: strip
from crane.probe.kernel.ml import (  # kernel: strip
    construction_errors,  # kernel: strip
    dataloader_facts,  # kernel: strip
    estimator_facts,  # kernel: strip
    is_estimator,  # kernel: strip
    is_keras_iterator,  # kernel: strip
    is_keras_model,  # kernel: strip
    is_sparse,  # kernel: strip
    is_tf_dataset,  # kernel: strip
    keras_iterator_facts,  # kernel: strip
    keras_model_facts,  # kernel: strip
    sparse_facts,  # kernel: strip
    tensor_facts,  # kernel: strip
    tf_dataset_facts,  # kernel: strip
    torch_module_facts,  # kernel: strip
)  # kernel: strip

MAX_VAR_BYTES = 4096
MAX_TOTAL_BYTES = 32768
TIME_BUDGET_MS = 50.0
MAX_REQUEST_ITEMS = 200
MAX_KEYS = 30
MAX_CONSTRUCTIONS = 8
LIST_STATS_N = 10000
# CRANE's own JSON, bound when the module is installed: a `json.loads`/`json.dumps` the notebook replaced is not called
_decode = json.JSONDecoder().decode
_encode = json.JSONEncoder().encode

_LIBRARIES = (
    "numpy", "pandas", "sklearn", "scipy", "torch", "torchvision", "tensorflow", "keras", "matplotlib", "seaborn",
    "statsmodels", "xgboost", "lightgbm", "catboost", "transformers", "plotly", "cv2", "PIL", "nltk", "imblearn",
    "polars", "pyarrow", "jax", "jaxlib", "tf_keras",
)  # fmt: skip
_FUNCTION_TYPES = (
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
    types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType,
)  # fmt: skip
_CONTAINER_KIND: dict[type, str] = {list: "list", tuple: "tuple", set: "set", frozenset: "set"}


# -- one value ----------------------------------------------------------------------------------------------------
def summarize(ctx: Ctx, v: Any, name: str, column: int | None = None) -> dict[str, Any]:
    """Facts (as a dict) about one value; `column`: summarise that column of DataFrame `v` as a Series."""
    t = type(v)
    out: dict[str, Any] = {"name": name, "type": tname(t), "kind": "other"}
    try:
        if column is not None:  # the same value facts as the frame's own listing of the column (computed once)
            label = v.columns[column]
            c = column_facts(ctx, v, column, label, True)
            n = int(v.shape[0])
            out.update(type=tname(mod_attr("pandas", "Series") or t), kind="series", dtype=c.pop("dtype"))
            out["length"] = n
            out["shape"] = [n]
            out["value"] = "column %s" % label_str(label, ctx)
            out["series_name"], out["has_name"] = c.pop("name"), True
            if "kind" in c:
                out["value_kind"] = c.pop("kind")
            out.update(c)
            out["index"] = index_facts(ctx, v.index)
        elif t in _SCALARS:
            out["kind"] = "scalar"
            out["value"] = short(v, ctx, 100)
        elif t is str or t is bytes:
            out["kind"] = "str"
            out["length"] = len(v)
            out["value"] = short(v, ctx, 200)
        elif t in _CONTAINER_KIND:
            _sequence(ctx, v, out, _CONTAINER_KIND[t])
        elif t is range:
            out.update(kind="list", length=len(v), value=repr(v))
        elif isa(v, dict):
            _dict(ctx, v, out)
        elif isa(v, types.ModuleType):
            out["kind"] = "module"
            d = inst_dict(v) or {}
            out["module_name"] = str(d.get("__name__", "?"))
        elif isa(v, type):
            out["kind"] = "class"
            _signature(ctx, v, out)
        elif t in _FUNCTION_TYPES or (tname(t) == "functools.partial"):
            out["kind"] = "function"
            _signature(ctx, v, out)
        else:
            _library(ctx, v, t, out)
    except Exception as exc:
        ctx.error(name, exc)
    return out


def _library(ctx: Ctx, v: Any, t: type, out: dict[str, Any]) -> None:
    np, pd, torch = ctx.np, ctx.pd, ctx.torch
    if np is not None and isa(v, np.ndarray):
        out["kind"] = "ndarray"
        ndarray_facts(ctx, plain_array(np, v), out)
    elif np is not None and isa(v, np.generic):
        out.update(kind="scalar", value=short(v, ctx, 100), dtype=str(v.dtype))
    elif pd is not None and isa(v, pd.DataFrame):
        out["kind"] = "dataframe"
        dataframe_facts(ctx, v, out)
    elif pd is not None and isa(v, pd.Series):
        out["kind"] = "series"
        series_facts(ctx, v, out)
    elif pd is not None and isa(v, pd.Index):
        out.update(kind="index", length=len(v), dtype=str(v.dtype), index=index_facts(ctx, v))
    elif pd is not None and (isa(v, pd.Timestamp) or isa(v, pd.Timedelta)):
        out.update(kind="scalar", value=str(v))
    elif torch is not None and isa(v, torch.Tensor):
        out["kind"] = "tensor"
        tensor_facts(ctx, v, out)
    elif torch is not None and isa(v, mod_attr("torch.nn", "Module")):
        out["kind"] = "torch_module"
        torch_module_facts(ctx, v, out)
    elif torch is not None and isa(v, mod_attr("torch.utils.data", "DataLoader")):
        out["kind"] = "dataloader"
        dataloader_facts(ctx, v, out)
    elif polars_kind(t) is not None:
        polars_facts(ctx, v, polars_kind(t), out)  # type: ignore[arg-type]  # not None: the branch's test
    elif is_tf_tensor(t):
        tf_tensor_facts(ctx, v, out)
    elif is_jax_array(t):
        jax_array_facts(ctx, v, out)
    elif is_jit_function(t):
        jit_facts(ctx, v, out)
    elif is_estimator(v):
        out["kind"] = "estimator"
        estimator_facts(ctx, v, out)
        if "params" not in out["estimator"]:
            boosting_params(ctx, v, out["estimator"])
        if out["estimator"].get("is_fitted") and "n_features_in" not in out["estimator"]:
            boosting_features(ctx, v, out["estimator"])
    elif is_keras_model(t):
        out["kind"] = "keras_model"
        keras_model_facts(ctx, v, out)
        keras_extra_facts(ctx, v, out["keras_model"])
    elif is_tf_dataset(t):
        out["kind"] = "tf_dataset"
        tf_dataset_facts(ctx, v, out)
        b = tf_dataset_batched(v)
        if b is not None:
            out["batched"] = b
    elif is_keras_history(t):
        keras_history_facts(ctx, v, out)
    elif is_keras_iterator(t):
        out["kind"] = "dataloader"
        keras_iterator_facts(ctx, v, out)
    elif is_sparse(t):
        out["kind"] = "sparse"
        sparse_facts(ctx, v, out)
    elif tmodule(t) in ("datetime", "decimal", "fractions", "pathlib"):
        out.update(kind="scalar", value=short(v, ctx, 100))


def _signature(ctx: Ctx, f: Any, out: dict[str, Any]) -> None:
    add_callable_facts(ctx, f, out)


def _sequence(ctx: Ctx, v: Any, out: dict[str, Any], kind: str) -> None:
    n = len(v)  # exact builtin types only
    out["kind"] = kind
    out["length"] = n
    first = list(v[:5]) if kind in ("list", "tuple") else [x for _, x in zip(range(5), v, strict=False)]
    out["element_types"] = [tname(type(x)) for x in first]
    if n <= 20:
        out["value"] = short(v, ctx, 300)
    if 0 < n <= LIST_STATS_N and kind != "set":
        items = v
        if all(type(x) in (int, float, bool) for x in items):
            nums = [x for x in items if not (type(x) is float and x != x)]
            out["n_nan"] = n - len(nums)
            out["has_nan"] = out["n_nan"] > 0
            if nums:
                uniq = set(nums)
                out["num_unique"] = len(uniq)
                out["value_range"] = [jval(min(nums)), jval(max(nums))]
                out["value_kind"] = "binary" if len(uniq) == 2 else ("categorical" if len(uniq) <= 10 else "continuous")
                if len(uniq) <= 5:
                    out["unique_values"] = sorted(jval(x) for x in uniq)


def _dict(ctx: Ctx, v: Any, out: dict[str, Any]) -> None:
    out["kind"] = "dict"
    n = dict.__len__(v)
    out["length"] = n
    keys = []
    for i, k in enumerate(dict.keys(v)):
        if i >= MAX_KEYS:
            break
        keys.append(k if type(k) is str else short(k, ctx, 40))
    out["keys"] = keys
    preview = {}
    for i, (k, x) in enumerate(dict.items(v)):
        if i >= 5:
            break
        preview[k if type(k) is str else short(k, ctx, 40)] = short(x, ctx, 50)
    out["preview"] = preview


# -- size caps ----------------------------------------------------------------------------------------------------
def _shrink_steps(f: dict[str, Any]) -> list[Callable[[], None] | str]:
    """Ever more drastic ways of making one variable's facts smaller."""

    def drop_col_fields(fields: tuple[str, ...]) -> Callable[[], None]:
        def step() -> None:
            for c in f.get("columns") or ():
                for k in fields:
                    c.pop(k, None)

        return step

    def cut(key: str, n: int) -> Callable[[], None]:
        def step() -> None:
            v = f.get(key)
            if type(v) is list and len(v) > n:
                del v[n:]
                if key == "columns":
                    f["columns_truncated"] = True
            elif type(v) is dict and len(v) > n:
                for k in list(v)[n:]:
                    del v[k]

        return step

    def cut_layers() -> None:
        tm = f.get("torch_module")
        if tm and len(tm.get("layers") or ()) > 8:
            del tm["layers"][8:]
            tm["truncated"] = True

    def drop(*keys: str) -> Callable[[], None]:
        def step() -> None:
            for k in keys:
                f.pop(k, None)
            if f.get("estimator"):
                f["estimator"].pop("params", None)
                f["estimator"].pop("feature_names_in", None)

        return step

    return [
        drop_col_fields(("example_values",)),
        drop_col_fields(("unique_values", "non_numeric_example", "non_numeric_position")),
        cut("preview", 2), cut("keys", 10), cut_layers, drop("example_values", "element_types"),
        drop_col_fields(("value_range", "num_unique", "kind", "numeric_parse")),
        "columns",  # keep as many (name, dtype, n_nan) columns as fit
        drop("preview", "signature", "value", "unique_values"), cut("keys", 3),
    ]  # fmt: skip


def fit_var(ctx: Ctx, f: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """Shrink one variable's facts below `max_bytes`, marking `truncated`; at worst keep its identity and shape."""
    if size_of(f) <= max_bytes:
        return f
    f["truncated"] = True
    steps = _shrink_steps(f)
    cut = steps.index("columns")
    if _columns_alone_too_big(f, max_bytes):  # every step before "columns" would be measured in vain
        for step in steps[:cut]:
            step()  # type: ignore[operator]  # the steps before the "columns" marker are functions
        steps = steps[cut:]
    for step in steps:
        if step == "columns":
            _fit_columns(f, max_bytes)
        else:
            step()  # type: ignore[operator]  # every step but the "columns" marker is a function
        if size_of(f) <= max_bytes:
            return f
    keep = ("name", "type", "kind", "shape", "length", "dtype", "truncated", "defined_in", "module_name", "qualname",
            "public_name", "series_name", "has_name")
    return {k: f[k] for k in keep if k in f}


def _columns_alone_too_big(f: dict[str, Any], max_bytes: int) -> bool:
    """Would the column list exceed `max_bytes` even with each column cut to its name and dtype (a lower bound of
    its JSON: `{"name":"…","dtype":"…"}`, 22 characters and the texts, and a comma)? Then the list has to be cut."""
    cols = f.get("columns")
    if not cols or len(cols) * 23 - 1 <= max_bytes:
        return False
    n = -1  # no comma before the first
    for c in cols:
        name, dtype = c.get("name"), c.get("dtype")
        n += 23 + (len(name) if type(name) is str else 0) + (len(dtype) if type(dtype) is str else 0)
        if n > max_bytes:
            return True
    return False


def _fit_columns(f: dict[str, Any], max_bytes: int) -> None:
    """Keep the longest prefix of the column list that fits (each column encoded once; `,` between them)."""
    cols = f.get("columns")
    if not cols or size_of(f) <= max_bytes:
        return
    f["columns"] = []
    f["columns_truncated"] = True
    used = size_of(f)
    keep = 0
    for c in cols:
        used += size_of(c) + (1 if keep else 0)
        if used > max_bytes:
            break
        keep += 1
    f["columns"] = cols[:keep]


# -- entry points -------------------------------------------------------------------------------------------------
def user_namespace() -> dict[str, Any]:
    """The notebook's namespace: the shell's `user_ns` (IPython 8: an instance attribute; 9: a property over
    `_user_ns`), read from the instance's own dict (no property of a shell subclass runs), an exact dict."""
    ns = shell_namespace(ipython_shell())
    if ns is not None:
        return ns
    main = dict.get(sys.modules, "__main__")
    return _MODULE_DICT.__get__(main) if type(main) is _MODULE_TYPE else {}


def user_names(ns: dict[str, Any], limit: int) -> list[str]:
    """The user's variables, sorted, at most `limit`: the namespace's str names, not private (`_`), not hidden by
    IPython (`In`, `Out`, `get_ipython`, `exit`: its `user_ns_hidden`). Read by dict's and str's own C methods: no
    method of the notebook's runs (a name's hash and compare are str's: only exact str keys are kept)."""
    hidden: Any = shell_value(ipython_shell(), "user_ns_hidden")
    # its exact `str` keys, as a set of our own (a key the notebook planted there is never compared)
    skip = {k for k in list(dict.keys(hidden)) if type(k) is str} if type(hidden) is dict else set()
    keys = dict.keys(ns) if isa(ns, dict) else ()
    out = [k for k in list(keys) if type(k) is str and not str.startswith(k, "_") and k not in skip]
    out.sort()
    return out[:limit]


def _libraries() -> dict[str, str]:
    libs = {"python": sys.version.split()[0]}
    for name in _LIBRARIES:
        m = sys.modules.get(name)
        d = inst_dict(m) if m is not None else None
        v: Any = d.get("__version__") if d else None
        if isa(v, str):  # torch's is a str subclass
            libs[name] = str.__getitem__(v, slice(0, 40))
    return libs


def _items(req: dict[str, Any], key: str) -> list[Any]:
    v = req.get(key) or []
    return v[:MAX_REQUEST_ITEMS] if type(v) is list else []


def _run(ctx: Ctx, req: dict[str, Any], ns: dict[str, Any], max_var: int, max_total: int) -> dict[str, Any]:
    res: dict[str, Any] = {"cwd": os.getcwd(), "libraries": _libraries()}
    total = size_of(res) + 200
    fit = lambda c, f: fit_var(c, f, max_var)  # noqa: E731
    undefined = []
    for name in _items(req, "names"):
        if type(name) is str and lookup_name(ns, name) is _missing:
            undefined.append(name)
    res["undefined"] = undefined
    listed = req.get("user_names")
    if type(listed) is int and listed > 0:
        res["user_names"] = user_names(ns, min(listed, 10000))
    mods, imported = {}, []
    for m in _items(req, "modules"):
        if type(m) is not str or not m:
            continue
        if m in sys.modules:
            imported.append(m)
        try:
            mods[m] = bool(module_found(m))
        except Exception as exc:
            ctx.error("module %s" % m, exc)
    res["modules"], res["imported_modules"] = mods, imported
    paths, sugg = {}, {}
    for p in _items(req, "paths"):
        if type(p) is not str or not p or len(p) > 4096 or "://" in p:
            continue
        try:
            paths[p] = os.path.exists(p)
            if not paths[p]:
                s = path_suggestions(p)
                if s:
                    sugg[p] = s
        except Exception as exc:
            ctx.error("path %s" % p, exc)
    res["paths"] = paths
    if sugg:
        res["path_suggestions"] = sugg
    constructions = [c for c in _items(req, "constructions")[:MAX_CONSTRUCTIONS] if type(c) is list and len(c) == 3]
    if constructions:
        errs = construction_errors(ctx, ns, constructions)
        if errs:
            res["param_errors"] = errs
            total += size_of(errs)
    total += size_of([undefined, mods, imported, paths, sugg])
    wanted = frozenset(ctx.wanted) if ctx.wanted is not None else None
    reused = 0
    n: int | None  # the encoded size of a check's or a name's facts (None: not measured yet)
    for key, check in (("attrs", lambda e: check_attr(ctx, ns, e, summarize, fit)),
                       ("keys", lambda k: check_key(ctx, ns, k))):  # fmt: skip
        out = []
        for item in _items(req, key):
            if key == "keys" and (type(item) is not list or len(item) < 2):
                continue
            try:
                memo = _check_key(ns, key, item, max_var, wanted if key == "attrs" else None)
                r, n, hit = _reusable(ctx, memo, lambda check=check, item=item: check(item))
            except Exception as exc:
                ctx.error("%s %s" % (key, item), exc)
                continue
            if total + n > max_total:
                res["truncated"] = True
                break
            reused += hit
            total += n
            out.append(r)
        res[key] = out
    facts = {}
    for name in _items(req, "names"):
        if type(name) is not str or name in undefined or name in facts:
            continue
        v = lookup_name(ns, name)
        if ctx.over_time():
            f, n, hit = fit_var(ctx, _cheap(v, name), max_var), None, 0
        else:
            memo = ("name", name, id(v), id(type(v)), max_var, wanted if _is_frame(ctx, v) else None)
            f, n, hit = _reusable(ctx, memo, lambda v=v, name=name: fit_var(ctx, summarize(ctx, v, name), max_var))
        n = (n if n is not None else size_of(f)) + len(name) + 4
        if total + n > max_total:
            res["truncated"] = True
            f = fit_var(ctx, f, 0)
            n = size_of(f) + len(name) + 4
            if total + n > max_total:
                continue
        reused += hit
        total += n
        facts[name] = f
    res["facts"] = facts
    if reused:
        res["cached"] = reused
    return res


def _reusable(
    ctx: Ctx, memo: tuple[Any, ...] | None, compute: Callable[..., dict[str, Any]]
) -> tuple[dict[str, Any], int, int]:
    """(facts dict, its encoded size, 1 if it was reused else 0): from kernel/cache under `memo`, else computed and
    remembered — unless this call's budgets cut the work short (then the facts depend on the request's order)."""
    text = recall(memo) if memo is not None else None
    if text is not None:
        return _decode(text), len(text), 1
    cuts = ctx.cuts
    r = compute()
    text = dumps(r)
    if memo is not None and ctx.cuts == cuts:
        remember(memo, text)
    return r, len(text), 0


def _check_key(
    ns: dict[str, Any], kind: str, item: Any, max_var: int, wanted: frozenset[str | int] | None
) -> tuple[Any, ...] | None:
    """The memo key of an attribute or key check: the expression and the identity of the value it starts from."""
    expr = item if kind == "attrs" else item[0]
    if type(expr) is not str:
        return None
    root = lookup_name(ns, expr.split(".", 1)[0])
    if root is _missing:
        return None
    try:
        return (kind, dumps(item), id(root), id(type(root)), max_var, wanted)
    except Exception:
        return None


def _is_frame(ctx: Ctx, v: Any) -> bool:
    return ctx.pd is not None and isa(v, ctx.pd.DataFrame)


def _wanted(req: dict[str, Any]) -> set[str | int] | None:
    """The column labels the cell mentions (str and int only), or None: detail every column."""
    v = req.get("columns")
    if type(v) is not list:
        return None
    return set(x for x in v[:MAX_REQUEST_ITEMS] if type(x) is str or type(x) is int)


def _cheap(v: Any, name: str) -> dict[str, Any]:
    return {"name": name, "type": tname(type(v)), "kind": "other", "truncated": True}


def run(request_json: str, ns: dict[str, Any] | None = None) -> str:
    """Answer one ProbeRequest (JSON) with a ProbeResult (JSON). Never raises, never prints. The user's
    profile/trace hooks are off meanwhile (turned off inline, as every kernel-side entry point of CRANE's does:
    sandbox/kernel/shield.py), and its JSON is CRANE's own (`_decode`/`_encode`, bound at install)."""
    saved = (sys.getprofile(), sys.gettrace())
    sys.setprofile(None)
    sys.settrace(None)
    try:
        return _answer(request_json, ns)
    finally:
        sys.settrace(saved[1])
        sys.setprofile(saved[0])


def _answer(request_json: str, ns: dict[str, Any] | None = None) -> str:
    t0 = time.perf_counter()
    res = {}
    try:
        req = _decode(request_json)
        if type(req) is not dict:
            raise ValueError("the request must be a JSON object")
        max_var = int(req.get("max_var_bytes") or MAX_VAR_BYTES)
        max_total = int(req.get("max_total_bytes") or MAX_TOTAL_BYTES)
        slice_ms: Any = req.get("scan_slice_ms")
        ctx = Ctx(float(req.get("time_budget_ms") or TIME_BUDGET_MS), wanted=_wanted(req),
                  slice_ms=float(slice_ms) if type(slice_ms) in (int, float) else None)  # fmt: skip
        begin(req.get("epoch"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            errstate = getattr(ctx.np, "errstate", None) if ctx.np is not None else None
            if errstate is not None:
                with errstate(all="ignore"):
                    res = _run(ctx, req, ns if ns is not None else user_namespace(), max_var, max_total)
            else:
                res = _run(ctx, req, ns if ns is not None else user_namespace(), max_var, max_total)
        if ctx.errors:
            res["errors"] = ctx.errors
        if ctx.time_capped:
            res["time_capped"] = True
        if ctx.unfinished:
            res["resumable"] = True
        if ctx.scanned:
            res["scanned"] = ctx.scanned
    except Exception as exc:
        res = {"errors": ["probe failed: %s: %s" % (type(exc).__name__, str(exc)[:200])]}
    res["elapsed_ms"] = round((time.perf_counter() - t0) * 1000.0, 3)
    try:
        text = dumps(res)
    except Exception as exc:
        text = dumps({"errors": ["probe output not encodable: %s" % exc]})
    n = len(text) + len(',"payload_bytes":')
    n += len(str(n + 6))  # the digits themselves (payloads are far below a million bytes)
    return text[:-1] + ',"payload_bytes":%d}' % n


def history(limit: int = 500, max_chars: int = 262144) -> str:
    """The kernel's input history (see `_history`), the user's profile/trace hooks off meanwhile."""
    saved = (sys.getprofile(), sys.gettrace())
    sys.setprofile(None)
    sys.settrace(None)
    try:
        return _history(limit, max_chars)
    finally:
        sys.settrace(saved[1])
        sys.setprofile(saved[0])


def _history(limit: int = 500, max_chars: int = 262144) -> str:
    """The kernel's stored cell sources as JSON [[execution_count, source], ...]: the newest first kept, bounded."""
    try:
        ip = ipython_shell()
        raw = ip.history_manager.input_hist_raw if ip is not None else []
        out: list = []
        total = 0
        for n in range(len(raw) - 1, 0, -1):
            src = raw[n]
            if type(src) is not str or len(out) >= limit or total + len(src) > max_chars:
                break
            out.append([n, src])
            total += len(src)
        out.reverse()
        return _encode(out)
    except Exception:
        return "[]"
