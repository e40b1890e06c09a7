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
    _T_MODULE,
    _BuiltinFunctionType,
    _cls_dict,
    _FunctionType,
    _mdict,
    _ModuleType,
)
from crane.sandbox.kernel.environment import kernel_side  # kernel: strip
from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.proof import _is_class  # kernel: strip
from crane.sandbox.shared.own_modules import class_print, code_print  # kernel: strip

_OM_MODULES = 20
_OM_NAMES = 500
_OM_ITEMS = 10_000  # items of the plain containers carried, all modules together
_OM_BYTES = 1 << 20  # bytes of their strings
_OM_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _om_plain(v: Any, depth: int, budget: list) -> bool:
    """`v` is plain data: an exact builtin scalar, or a builtin container of such (depth, items and the bytes of
    its strings bounded by `budget`: [items, bytes]). Containers are read from a snapshot taken in one C call (a
    thread of the notebook's changing one meanwhile changes nothing here)."""
    t = type(v)
    if t is str or t is bytes:
        budget[1] -= len(v)
        return budget[1] >= 0
    if any(t is p for p in _OM_PLAIN):
        return True
    if depth <= 0 or not (t is list or t is tuple or t is dict or t is set or t is frozenset):
        return False
    items = list(dict.items(v)) if t is dict else list(v)
    budget[0] -= len(items)
    if budget[0] < 0:
        return False
    if t is dict:
        return all(_om_plain(k, 0, budget) and _om_plain(x, depth - 1, budget) for k, x in items)
    return all(_om_plain(x, depth - 1, budget) for x in items)


def _om_own(name: str, mod: Any) -> dict | None:
    """The namespace of `mod` when it is the notebook's own module, else None."""
    top = name.partition(".")[0]
    if name == "__main__" or top == "crane" or kernel_side(top):
        return None
    d = _mdict(mod)
    path = dict.get(d, "__file__") if all(type(k) is str for k in dict.keys(d)) else None
    if type(path) is not str or not path.endswith(".py") or is_library(path):
        return None
    return d


def own_modules() -> tuple[dict, dict]:
    """({module: {name: plain value}}, {module: {"names": [...], "code": {name: print}, "own": [...],
    "uncarried": [...]}}) of the notebook's own modules (see the module docstring): `own`, the names the module
    itself defines or holds as data (not what it imported); `uncarried`, its data the copy does not carry (not
    plain, or past the bounds): a cell naming one is only "likely" (transplant.state_doubt). A module that cannot
    be read is reported with `"unread": true` (the worker then says it missed). Never raises."""
    data: dict = {}
    prints: dict = {}
    budget = [_OM_ITEMS, _OM_BYTES]
    for name, mod in list(dict.items(_MODULES)):
        if len(prints) >= _OM_MODULES:
            break
        if type(name) is not str or type(mod) is not _ModuleType:
            continue
        try:
            d = _om_own(name, mod)
            if d is None:
                continue
            prints[name] = {"names": [], "code": {}, "own": [], "uncarried": [], "unread": True}
            values, entry = _om_module(name, d, budget)
        except Exception:  # (a module changed while it was read, a code object too odd to print: not carried)
            continue
        prints[name] = entry
        if values:
            data[name] = values
    return data, prints


def _om_module(name: str, d: dict, budget: list) -> tuple[dict, dict]:
    values: dict = {}
    code: dict = {}
    own: list = []
    uncarried: list = []
    names = [k for k in list(dict.keys(d)) if not (k.startswith("__") and k.endswith("__"))][:_OM_NAMES]
    for k in names:
        v = dict.get(d, k)
        if type(v) is _ModuleType or type(v) is _BuiltinFunctionType:
            continue
        if type(v) is _FunctionType or _is_class(v):
            home = v.__module__ if type(v) is _FunctionType else _T_MODULE.__get__(v, type)
            if type(home) is str and home == name:
                code[k] = code_print(v.__code__) if type(v) is _FunctionType else class_print(_cls_dict(v))
                own.append(k)
            continue
        own.append(k)
        if _om_plain(v, 3, budget):
            values[k] = v
        else:
            uncarried.append(k)
    return values, {"names": names, "code": code, "own": own, "uncarried": uncarried}
