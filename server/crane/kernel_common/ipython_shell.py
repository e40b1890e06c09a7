"""The kernel's IPython shell and its namespace, found without running anything of the notebook's.

Runs in the user's kernel: a part of the probe's, the fork sandbox's and the transplant export's private modules
(one finder for the three; standard library only).
- `ipython_shell()`: traitlets' singleton slot `InteractiveShell._instance` (the object `get_ipython()` returns),
  read from the own `__dict__` of `IPython.core.interactiveshell.InteractiveShell` as the interpreter's module table
  holds it, taken when that class is in the object's type's MRO (compared by identity). Never `IPython.get_ipython()`
  (looked up on a shared module: a notebook may wrap or replace it) nor a class's `instance()`.
- `instance_dict(obj)`: an object's own dict, read so (below).
- `shell_namespace(shell)`: the shell's `user_ns` (IPython 8: an instance attribute; 9: `_user_ns` behind a
  property), read from the instance's own dict through the C `__dict__` descriptor of a class in its MRO (a
  `__dict__` or `user_ns` property of a class of the notebook's is never called).
Every dict is read by a scan that compares exact `str` keys only (`_kc_find`): a key the notebook planted (in
`sys.modules`, a module's or class's dict, the shell's instance dict) is passed over, its `__hash__`/`__eq__` never
run, where a lookup would compare it with the name asked for.
"""

from __future__ import annotations

import sys
from typing import Any

_KC_MODULES: Any = sys.modules if type(sys.modules) is dict else {}  # the interpreter's own table at install
_KC_TYPE_DICT = type.__dict__["__dict__"].__get__
_KC_TYPE_MRO = type.__dict__["__mro__"].__get__
_KC_MODULE_TYPE = type(sys)
_KC_MODULE_DICT = _KC_TYPE_DICT(_KC_MODULE_TYPE)["__dict__"].__get__
_KC_GETSET = type(_KC_TYPE_DICT(type)["__dict__"])  # getset_descriptor: a Python class's `__dict__` entry's type
_KC_PROXY_ITEMS = type(_KC_TYPE_DICT(type)).items  # a class namespace's (mappingproxy over its dict: C)


def _kc_find(items: Any, name: str) -> Any:
    """The value of the exact `str` key `name` among `items` (pairs), None if none: other keys are skipped by
    their type, never hashed or compared."""
    for k, v in items:
        if type(k) is str and k == name:
            return v
    return None


_KC_CLASS: list = []  # InteractiveShell once found (the module table is scanned once, not at every request)


def _kc_class() -> Any:
    if _KC_CLASS:
        return _KC_CLASS[0]
    mod = _kc_find(list(dict.items(_KC_MODULES)), "IPython.core.interactiveshell")
    if type(mod) is not _KC_MODULE_TYPE:
        return None
    md = _KC_MODULE_DICT(mod)
    cls = _kc_find(list(dict.items(md)), "InteractiveShell") if type(md) is dict else None
    if not any(k is type for k in _KC_TYPE_MRO(type(cls))):
        return None
    _KC_CLASS.append(cls)
    return cls


def ipython_shell() -> Any:
    """The kernel's InteractiveShell (None without an initialised one)."""
    try:
        cls = _kc_class()
        if cls is None:
            return None
        shell = _kc_find(list(_KC_PROXY_ITEMS(_KC_TYPE_DICT(cls))), "_instance")
        for k in _KC_TYPE_MRO(type(shell)):
            if k is cls:
                return shell
    except Exception:
        pass
    return None


def instance_dict(obj: Any) -> Any:
    """The object's instance dict through the C `__dict__` descriptor of the first class of its MRO that defines
    one; None where that entry is anything else (a property of the notebook's) or the object has none. (The one
    reader of instance dicts in the kernel: kernel/waiting.own_dict, kernel/fork_threads.)"""
    for k in _KC_TYPE_MRO(type(obj)):
        desc = _kc_find(list(_KC_PROXY_ITEMS(_KC_TYPE_DICT(k))), "__dict__")
        if desc is not None:
            if type(desc) is not _KC_GETSET:
                return None
            d = desc.__get__(obj, type(obj))
            return d if type(d) is dict else None
    return None


def shell_value(shell: Any, name: str) -> Any:
    """`name` of the shell's instance dict (`user_ns_hidden`, ...), None where it has none."""
    try:
        d = instance_dict(shell) if shell is not None else None
        return _kc_find(list(dict.items(d)), name) if d is not None else None
    except Exception:
        return None


def shell_namespace(shell: Any) -> Any:
    """The shell's namespace (an exact dict), None where it has none or it is not an exact dict."""
    try:
        d = instance_dict(shell) if shell is not None else None
        if d is None:
            return None
        items = list(dict.items(d))
        ns = _kc_find(items, "_user_ns")
        if ns is None:
            ns = _kc_find(items, "user_ns")
        return ns if type(ns) is dict else None
    except Exception:
        return None
