"""Transplant export, kernel side: the notebook's own modules' data and code prints (see shared/own_modules.py).

`own_modules()` reads `sys.modules` as a dict (the interpreter's own table, bound at install): each module of
the notebook's (an exact module object whose `__file__` is not a library's, the standard library's or the
kernel's; not `__main__`) gives its plain data attributes (exact builtin scalars, and lists, tuples, dicts, sets
of them up to `_OM_ITEMS` items and three levels: a planted object is never one) and its code prints (the names
its namespace holds; each function and class it defines, by `__module__`, printed from its code). Only exact types
and C-level readers: nothing of the notebook's runs. At most `_OM_MODULES` modules and `_OM_NAMES` names each.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _MODULES,
    _STDLIB_NAMES,
    _T_MODULE,
    _cls_dict,
    _FunctionType,
    _mdict,
    _ModuleType,
)
from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.proof import _is_class  # kernel: strip
from crane.sandbox.shared.own_modules import class_print, code_print  # kernel: strip

_OM_MODULES = 20
_OM_NAMES = 500
_OM_ITEMS = 10_000
_OM_PLAIN = (int, float, complex, str, bytes, bool, type(None))
_OM_KERNEL = ("ipykernel", "IPython", "jupyter_client", "jupyter_core", "zmq", "tornado", "traitlets", "comm",
              "debugpy", "matplotlib_inline", "crane", "pydev", "_pydev")


def _om_plain(v: Any, depth: int, budget: list) -> bool:
    """`v` is plain data: an exact builtin scalar, or a builtin container of such (depth and items bounded)."""
    t = type(v)
    if any(t is p for p in _OM_PLAIN):
        return True
    if depth <= 0 or not (t is list or t is tuple or t is dict or t is set or t is frozenset):
        return False
    budget[0] -= len(v)
    if budget[0] < 0:
        return False
    if t is dict:
        return all(_om_plain(k, 0, budget) and _om_plain(x, depth - 1, budget) for k, x in dict.items(v))
    return all(_om_plain(x, depth - 1, budget) for x in v)


def _om_own(name: str, mod: Any) -> dict | None:
    """The namespace of `mod` when it is the notebook's own module, else None."""
    top = name.partition(".")[0]
    if name == "__main__" or top in _STDLIB_NAMES or top.startswith("_") or top in _OM_KERNEL:
        return None
    d = _mdict(mod)
    path = dict.get(d, "__file__") if all(type(k) is str for k in dict.keys(d)) else None
    if type(path) is not str or not path.endswith(".py") or is_library(path):
        return None
    return d


def own_modules() -> tuple[dict, dict]:
    """({module: {name: plain value}}, {module: {"names": [...], "code": {name: print}}}) of the notebook's own
    modules (see the module docstring)."""
    data: dict = {}
    prints: dict = {}
    for name, mod in list(dict.items(_MODULES)):
        if len(prints) >= _OM_MODULES:
            break
        if type(name) is not str or type(mod) is not _ModuleType:
            continue
        d = _om_own(name, mod)
        if d is None:
            continue
        values: dict = {}
        code: dict = {}
        names = [k for k in dict.keys(d) if not (k.startswith("__") and k.endswith("__"))][:_OM_NAMES]
        for k in names:
            v = dict.get(d, k)
            if type(v) is _ModuleType:
                continue
            if type(v) is _FunctionType:
                home = v.__module__
                if type(home) is str and home == name:
                    code[k] = code_print(v.__code__)
            elif _is_class(v):
                home = _T_MODULE.__get__(v, type)
                if type(home) is str and home == name:
                    code[k] = class_print(_cls_dict(v))
            elif _om_plain(v, 3, [_OM_ITEMS]):
                values[k] = v
        prints[name] = {"names": names, "code": code}
        if values:
            data[name] = values
    return data, prints
