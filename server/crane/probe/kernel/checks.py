"""CRANE kernel probe: attribute, key, module and path checks; callable signatures (stdlib only).

Attribute lookups are static (the rules of inspect.getattr_static): no property, descriptor `__get__` written in
Python, `__getattr__` or `__getattribute__` of the user runs. Where Python would consult such code, the answer is
`present: None` ("cannot tell"), except for the library hooks whose behaviour is known: torch nn.Module
(`_parameters`/`_buffers`/`_modules`), pandas NDFrame (column access by attribute) and sklearn Bunch (dict keys).
"""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Callable
from typing import Any

from crane.probe.kernel.common import (  # kernel: strip
    Ctx,  # kernel: strip
    _missing,  # kernel: strip
    class_dict,  # kernel: strip
    class_lookup,  # kernel: strip
    in_lib,  # kernel: strip
    inst_dict,  # kernel: strip
    isa,  # kernel: strip
    mod_attr,  # kernel: strip
    mro,  # kernel: strip
    plain_array,  # kernel: strip
    short,  # kernel: strip
    short_tname,  # kernel: strip
    shown_tname,  # kernel: strip
    tmodule,  # kernel: strip
    tname,  # kernel: strip
)  # kernel: strip

MAX_SIG_PARAMS = 60
_object_getattribute = class_dict(object)["__getattribute__"]
_C_BINDABLE = (
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
    types.BuiltinFunctionType,
)
_SAFE_METACLASS_LIBS = ("abc", "builtins", "enum", "typing", "sklearn", "torch", "pandas", "numpy")


# -- signatures ---------------------------------------------------------------------------------------------------
def signature_safe(f: Any) -> bool:
    """inspect.signature runs no user code for functions, methods, C callables and classes with a known metaclass."""
    t = type(f)
    if t in (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
             types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType):  # fmt: skip
        return True
    if t is types.MethodType:
        return signature_safe(f.__func__)
    if isa(f, type):
        return in_lib(t, _SAFE_METACLASS_LIBS)
    if in_lib(t, ("functools",)) and short_tname(t) == "partial":
        return signature_safe(f.func)
    return False


def signature_facts(ctx: Ctx, f: Any) -> list[dict[str, Any]] | None:
    if not signature_safe(f):
        return None
    try:
        sig = inspect.signature(f)
    except Exception:  # many C callables have no signature
        return None
    params = list(sig.parameters.values())
    if len(params) > MAX_SIG_PARAMS:
        return None  # a cut signature would make binding checks wrong
    out = []
    for p in params:
        pf: dict[str, Any] = {"name": p.name, "kind": p.kind.name}
        if p.default is not p.empty:
            pf["has_default"] = True
            pf["default"] = short(p.default, ctx, 30)
        out.append(pf)
    return out


_func_dict = types.FunctionType.__dict__
_func_module = _func_dict["__module__"]
_func_qualname = _func_dict["__qualname__"]
_func_code = _func_dict["__code__"]
_func_fdict = _func_dict["__dict__"]
_builtin_module = types.BuiltinFunctionType.__dict__["__module__"]
_builtin_qualname = types.BuiltinFunctionType.__dict__["__qualname__"]
_method_func = types.MethodType.__dict__["__func__"]
_type_call = class_dict(type)["__call__"]
_object_new = class_dict(object)["__new__"]
_object_init = class_dict(object)["__init__"]


def _plain_function(fn: Any) -> bool:
    """`fn` is a Python function whose signature is its own: no __wrapped__/__signature__ (functools.wraps,
    matplotlib's _api decorators, sklearn's positional-args deprecation) and its code's own qualified name."""
    if type(fn) is not types.FunctionType:
        return False
    try:
        d = _func_fdict.__get__(fn)
        if type(d) is dict and ("__wrapped__" in d or "__signature__" in d):
            return False
        code = _func_code.__get__(fn)
        qn = _func_qualname.__get__(fn)
        co_qn = getattr(code, "co_qualname", qn)
        if type(qn) is not str:
            return False
        # dataclasses' generated methods: compiled in __create_fn__, renamed to Cls.__init__ (signature exact)
        dataclass_made = co_qn == "__create_fn__.<locals>." + code.co_name and code.co_filename == "<string>"
        return co_qn == qn or dataclass_made
    except Exception:
        return False


def _own_signature(f: Any) -> tuple[bool, str | None, int]:
    """(own, name CPython's binding errors use, leading parameters bound) for a callable, or (False, None, 0)."""
    t = type(f)
    if t is types.FunctionType:
        return (True, _func_qualname.__get__(f), 0) if _plain_function(f) else (False, None, 0)
    if t is types.MethodType:
        fn = _method_func.__get__(f)
        return (True, _func_qualname.__get__(fn), 1) if _plain_function(fn) else (False, None, 0)
    if isa(f, type):
        if class_lookup(t, "__call__", None) is not _type_call or class_lookup(t, "__signature__", None) is not None:
            return False, None, 0
        if class_lookup(f, "__signature__", None) is not None or class_lookup(f, "__new__", None) is not _object_new:
            return False, None, 0
        init = class_lookup(f, "__init__", None)
        if init is _object_init or not _plain_function(init):
            return False, None, 0
        return True, _func_qualname.__get__(init), 1
    return False, None, 0


def _str_attr(descr: Any, obj: Any) -> str | None:
    try:
        v = descr.__get__(obj)
        return v if type(v) is str else None
    except Exception:
        return None


def callable_names(f: Any) -> tuple[str | None, str | None]:
    """(`__module__.__qualname__`, shortest public alias) of a class or function, read statically, or (None, None)."""
    if type(f) is types.MethodType:
        f = _method_func.__get__(f)
    t = type(f)
    if t is types.FunctionType:
        mod, qn = _str_attr(_func_module, f), _str_attr(_func_qualname, f)
    elif t is types.BuiltinFunctionType:
        mod, qn = _str_attr(_builtin_module, f), _str_attr(_builtin_qualname, f)
    elif isa(f, type):
        mod, qn = tmodule(f) or None, _str_attr(_type_qualname_descr, f)
    else:
        return None, None
    if not qn:
        return None, None
    if not mod:
        return qn, None
    full = qn if mod == "builtins" else mod + "." + qn
    public = None
    if "." not in qn and "<" not in qn and mod != "builtins":
        parts = mod.split(".")
        for i in range(1, len(parts)):
            cand = ".".join(parts[:i])
            m = sys.modules.get(cand)
            d = inst_dict(m) if m is not None else None
            if d is not None and d.get(qn, _missing) is f:
                public = cand + "." + qn
                break
    return full, public


_type_qualname_descr = class_dict(type)["__qualname__"]


def add_callable_facts(ctx: Ctx, f: Any, out: dict[str, Any]) -> None:
    """signature (+ whether it is the callable's own, the name TypeErrors use, bound leading parameters) and
    qualname / public_name of a function, method or class, into a Facts or AttrCheck dict."""
    try:
        qn, public = callable_names(f)
        if qn:
            out["qualname"] = qn
            if public and public != qn:
                out["public_name"] = public
    except Exception as exc:
        ctx.error("qualname", exc)
    sig = signature_facts(ctx, f)
    if sig is None:
        return
    out["signature"] = sig
    try:
        own, name, bound = _own_signature(f)
    except Exception:
        own = False
    if own and type(name) is str:
        out["signature_own"] = True
        out["signature_name"] = name
        if bound:
            out["signature_bound"] = bound


# -- static attribute lookup --------------------------------------------------------------------------------------
def _is_data_descriptor(x: Any) -> bool:
    tx = type(x)
    return class_lookup(tx, "__set__", None) is not None or class_lookup(tx, "__delete__", None) is not None


def _bind(attr: Any, obj: Any, owner: Any) -> tuple[bool | str, Any]:
    """Bind a class attribute to `obj` without running Python-level descriptor code.
    Returns (status, value): status True (value known) or "opaque" (exists, value not computable statically)."""
    t = type(attr)
    if t is types.FunctionType:
        return True, (types.MethodType(attr, obj) if obj is not None else attr)
    if t is staticmethod:
        return True, attr.__func__
    if t is classmethod:
        return True, types.MethodType(attr.__func__, owner)
    if t in _C_BINDABLE:
        try:
            return True, attr.__get__(obj, owner)
        except Exception:
            return "opaque", None
    if class_lookup(t, "__get__", None) is not None:  # a descriptor written in Python (cached_property, ...)
        return "opaque", None
    return True, attr


def static_attr(ctx: Ctx, obj: Any, name: str) -> tuple[bool | str | None, Any, str | None]:
    """(status, value, where): status True / "opaque" (exists, value unknown) / False (missing) / None (cannot tell)."""
    t = type(obj)
    d: dict[Any, Any] | None  # a module's dict, or an instance dict when there is one
    if isa(obj, types.ModuleType):
        d = inst_dict(obj) or {}
        if name in d:
            return True, d[name], "module"
        if "__getattr__" not in d:
            return False, None, None
        if d.get("__name__") == "numpy":
            return _numpy_getattr(ctx, d, name)
        return None, None, None  # a module-level __getattr__ (lazy submodules, deprecations) decides
    if isa(obj, type):  # a class: its own MRO, then the metaclass
        for k in mro(obj):
            cd = class_dict(k)
            if name in cd:
                st, v = _bind(cd[name], None, obj)
                return st, v, "class"
        meta = class_lookup(t, name)
        if meta is not _missing:
            st, v = _bind(meta, obj, t)
            return st, v, "class"
        return (None if class_lookup(t, "__getattr__", None) is not None else False), None, None
    ga = class_lookup(t, "__getattribute__", None)
    if ga is not _object_getattribute and type(ga) is not types.WrapperDescriptorType:
        return None, None, None  # a Python-level __getattribute__ decides
    cls_attr = class_lookup(t, name)
    if cls_attr is not _missing and _is_data_descriptor(cls_attr):
        if type(cls_attr) is types.MemberDescriptorType:  # __slots__: a plain read
            try:
                return True, cls_attr.__get__(obj, t), "instance"
            except AttributeError:
                cls_attr = _missing
        else:
            return "opaque", None, "descriptor"
    d = inst_dict(obj)
    if cls_attr is not _missing or (d is not None and name in d):
        if d is not None and name in d:
            return True, d[name], "instance"
        st, v = _bind(cls_attr, obj, t)
        return st, v, "class"
    return _getattr_hook(ctx, obj, t, d or {}, name)


_NUMPY_LAZY_SUBMODULES = frozenset(
    "linalg fft dtypes random polynomial ma ctypeslib exceptions matlib f2py typing rec char core strings".split()
)


def _numpy_getattr(ctx: Ctx, d: dict[Any, Any], name: str) -> tuple[bool | str | None, Any, str | None]:
    """numpy's module __getattr__ (1.2x), decided from the tables it consults (without calling it)."""
    for table in ("__expired_functions__", "__deprecated_attrs__"):
        if type(d.get(table)) is dict and name in d[table]:
            return "opaque", None, "module"
    subs: Any = d.get("__numpy_submodules__")
    if (type(subs) in (set, frozenset, list, tuple) and name in subs) or name in _NUMPY_LAZY_SUBMODULES:
        return "opaque", None, "module"  # numpy 2 imports these submodules on first access
    former = d.get("__former_attrs__")
    if type(former) is dict and name in former:
        ctx.attr_message = str(former[name])[:400]
        return False, None, None
    expired = d.get("__expired_attributes__")
    if type(expired) is dict and name in expired:  # numpy 2.0
        ctx.attr_message = ("`np.%s` was removed in the NumPy 2.0 release. %s" % (name, expired[name]))[:400]
        return False, None, None
    if name in ("testing", "Tester"):
        return None, None, None
    return False, None, None


def _getattr_hook(
    ctx: Ctx, obj: Any, t: type, d: dict[Any, Any], name: str
) -> tuple[bool | str | None, Any, str | None]:
    """Not found by the static rules: decide for the library `__getattr__`s we know, else say "cannot tell"."""
    torch_module = mod_attr("torch.nn", "Module")
    if torch_module is not None and isa(obj, torch_module) and in_lib(_getattr_owner(t), ("torch",)):
        for key in ("_parameters", "_buffers", "_modules"):
            sub = d.get(key)
            if type(sub) is dict and name in sub:
                return True, sub[name], "instance"
        return False, None, None
    pd = ctx.pd
    if pd is not None and (isa(obj, pd.DataFrame) or isa(obj, pd.Series)) and in_lib(_getattr_owner(t), ("pandas",)):
        if name.startswith("_"):
            return False, None, None
        try:
            if isa(obj, pd.DataFrame):
                if name in obj.columns:
                    return "column", obj.columns.get_loc(name), "column"
                return False, None, None
            if obj.index._can_hold_identifiers_and_holds_name(name):
                return "opaque", None, "index"
            return False, None, None
        except Exception:
            return None, None, None
    if in_lib(t, ("polars",)) and in_lib(_getattr_owner(t), ("polars",)):
        # polars' DataFrame/LazyFrame/Series __getattr__ only raises (a hint for attributes removed in 2.0, else
        # "'DataFrame' object has no attribute ...": no column access by attribute)
        return False, None, None
    if in_lib(t, ("sklearn",)) and isa(obj, dict) and in_lib(_getattr_owner(t), ("sklearn",)):  # Bunch
        return (True, dict.__getitem__(obj, name), "instance") if dict.__contains__(obj, name) else (False, None, None)
    if class_lookup(t, "__getattr__", None) is not None:
        return None, None, None
    return False, None, None


def _getattr_owner(t: type) -> type:
    for k in mro(t):
        if "__getattr__" in class_dict(k):
            return k
    return object


def _attr_names(ctx: Ctx, obj: Any) -> list[str]:
    """Names an attribute lookup on `obj` could find statically (for "did you mean" suggestions)."""
    names: set[str] = set()
    if not isa(obj, types.ModuleType):
        for k in mro(obj if isa(obj, type) else type(obj)):
            names.update(class_dict(k).keys())
    d = inst_dict(obj)
    if d:
        names.update(k for _, k in zip(range(5000), d, strict=False) if type(k) is str)
        for key in ("_parameters", "_buffers", "_modules"):  # torch nn.Module's own attribute tables
            if type(d.get(key)) is dict:
                names.update(k for _, k in zip(range(2000), d[key], strict=False) if type(k) is str)
    pd = ctx.pd
    if pd is not None and isa(obj, pd.DataFrame):
        names.update(c for c in list(obj.columns[:2000]) if type(c) is str)
    return [n for n in names if not n.startswith("__")]


def _suggest(word: str, candidates: list[str]) -> list[str]:
    """Up to 3 existing names like `word`: same name up to case/surrounding spaces first, then difflib's."""
    try:
        w = str(word)
        cands = [str(c) for c in candidates][:5000]
        norm = w.strip().lower()
        out = [c for c in cands if c != w and c.strip().lower() == norm]
        for c in difflib.get_close_matches(w, cands, n=3, cutoff=0.6):
            if c not in out:
                out.append(c)
        return out[:3]
    except Exception:
        return []


def lookup_name(ns: dict[str, Any], name: str) -> Any:
    if name in ns:
        return ns[name]
    b = sys.modules.get("builtins")
    return b.__dict__.get(name, _missing) if b is not None else _missing


def resolve(ctx: Ctx, ns: dict[str, Any], expr: Any) -> tuple[bool | None, Any]:
    """Value of a name or attribute chain, statically: (True, value) or (status, None) when it cannot be known."""
    parts = str(expr).split(".")
    obj = lookup_name(ns, parts[0])
    if obj is _missing:
        return None, None
    for attr in parts[1:]:
        st, v, where = static_attr(ctx, obj, attr)
        if st is not True:
            return (False if st is False else None), None
        obj = v
    return True, obj


def check_attr(
    ctx: Ctx,
    ns: dict[str, Any],
    expr: Any,
    summarize: Callable[..., dict[str, Any]],
    fit: Callable[[Ctx, dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """AttrCheck for an attribute chain such as "model.feature_importances_" or "plt.scatter"."""
    parts = str(expr).split(".")
    res = {"expr": expr, "present": None}
    obj = lookup_name(ns, parts[0])
    if obj is _missing or len(parts) < 2:
        if obj is not _missing:
            res["present"] = True
        return res
    where = None
    for i, attr in enumerate(parts[1:]):
        last = i == len(parts) - 2
        res["owner_type"] = tname(type(obj))
        st, v, where = static_attr(ctx, obj, attr)
        if st is False:
            res["present"] = False
            res["owner_shown"] = shown_tname(type(obj))
            if ctx.attr_message:
                res["message"] = ctx.attr_message
                ctx.attr_message = None
            sugg = _suggest(attr, _attr_names(ctx, obj))
            if sugg:
                res["suggestions"] = sugg
            return res
        if st is None or (st != True and not last):  # noqa: E712 (st may be a str)
            return res  # cannot tell, or the chain crosses a property
        if st == "column":
            res["present"] = True
            if type(v) is int:
                res["facts"] = fit(ctx, summarize(ctx, obj, expr, column=v))
            return res
        if st == "opaque":
            res["present"] = True
            return res
        obj = v
    res["present"] = True
    if callable(obj):
        add_callable_facts(ctx, obj, res)
    if where in ("instance", "module") and not _is_plain(obj) and not isa(obj, types.ModuleType):
        res["facts"] = fit(ctx, summarize(ctx, obj, expr))
    return res


def _is_plain(obj: Any) -> bool:
    return type(obj) in (types.FunctionType, types.BuiltinFunctionType, types.MethodType) or isa(obj, type)


# -- keys ---------------------------------------------------------------------------------------------------------
def _as_key(k: Any) -> Any:
    if type(k) is list:
        return tuple(_as_key(x) for x in k)
    return k


def check_key(ctx: Ctx, ns: dict[str, Any], item: list[Any]) -> dict[str, Any]:
    """KeyCheck for [expr, key, axis]: membership in dict keys / DataFrame columns / index labels; int bounds."""
    expr, key, axis = item[0], item[1], (item[2] if len(item) > 2 and item[2] else "key")
    res = {"expr": str(expr), "key": key, "axis": axis, "present": None}
    st, obj = resolve(ctx, ns, expr)
    if st is not True:
        return res
    k = _as_key(key)
    pd, np, torch = ctx.pd, ctx.np, ctx.torch
    labels = None
    try:
        if pd is not None and isa(obj, pd.DataFrame):
            labels = obj.index if axis == "index" else obj.columns
        elif pd is not None and isa(obj, pd.Series):
            labels = obj.index
        if labels is not None:
            res["present"] = bool(k in labels)
            if not res["present"] and type(k) is str:
                sugg = _suggest(k, [x for x in list(labels[:5000]) if type(x) is str])
                if sugg:
                    res["suggestions"] = sugg
        elif isa(obj, dict):
            t = type(obj)
            if class_lookup(t, "__getitem__") is not class_dict(dict)["__getitem__"] and not in_lib(
                t, ("collections", "sklearn")
            ):
                return res  # a user-defined __getitem__ decides
            res["present"] = bool(dict.__contains__(obj, k))
            if class_lookup(t, "__missing__", None) is not None:
                res["missing_ok"] = True
            if not res["present"] and type(k) is str:
                sugg = _suggest(k, [x for _, x in zip(range(5000), dict.keys(obj), strict=False) if type(x) is str])
                if sugg:
                    res["suggestions"] = sugg
        elif type(k) is int and axis in ("key", "index"):
            n = None
            if type(obj) in (list, tuple, str, bytes, range):
                n = len(obj)
            elif np is not None and isa(obj, np.ndarray):
                shape = plain_array(np, obj).shape
                n = int(shape[0]) if len(shape) else None
            elif torch is not None and isa(obj, torch.Tensor):
                n = int(obj.shape[0]) if len(obj.shape) else None
            if n is not None:
                res["present"] = -n <= k < n
                res["length"] = n
    except Exception as exc:  # unhashable key, odd index types
        ctx.error("key %s[%r]" % (expr, key), exc)
        res["present"] = None
    return res


# -- modules and paths --------------------------------------------------------------------------------------------
def _module_spec(m: Any) -> importlib.machinery.ModuleSpec | None:
    try:
        return object.__getattribute__(m, "__dict__").get("__spec__")
    except Exception:
        return None


def module_found(name: str) -> bool:
    """Can `import name` find the module? importlib.util.find_spec on the top level (never imports), then
    PathFinder inside the package's search locations for dotted names."""
    if name in sys.modules:
        return True
    parts = name.split(".")
    top = parts[0]
    spec = _module_spec(sys.modules[top]) if top in sys.modules else importlib.util.find_spec(top)
    for i in range(1, len(parts)):
        full = ".".join(parts[: i + 1])
        if full in sys.modules:
            spec = _module_spec(sys.modules[full])
            continue
        locs = getattr(spec, "submodule_search_locations", None) if spec is not None else None
        if not locs:
            return False
        spec = importlib.machinery.PathFinder.find_spec(full, list(locs))
        if spec is None:
            return False
    return spec is not None


def path_suggestions(path: str) -> list[str]:
    """Entries of the nearest existing parent folder that resemble the missing path's name (bounded listing)."""
    head, base = os.path.split(path)
    if not base or not (head == "" or os.path.isdir(head)):
        return []
    names = []
    try:
        with os.scandir(head or ".") as it:
            for i, e in enumerate(it):
                if i >= 2000:
                    break
                names.append(e.name)
    except OSError:
        return []
    return [os.path.join(head, n) for n in difflib.get_close_matches(base, names, n=3, cutoff=0.6)]

