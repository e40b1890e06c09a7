"""Transplant export, kernel side: the kernel names a notebook function reads by a string (issue 42: the copy misses
nothing it can know of).

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py calls `dynamic_reads`). The daemon finds the
names a cell reads (sandbox/cell_names.py), with a string's identifiers where the cell itself reads the namespace by
a string. A notebook function the cell calls may do it instead (`def f(): return globals()['x']`, `eval('x + 1')`,
`'model' in vars()`, `get_ipython().user_ns.get('x')`): its code is here, not in the cell. From the cell's names,
this follows the notebook's functions and classes the namespace holds (by the names their code loads, as the pickler
will), and for every function whose code reads the namespace dynamically (`_DR_DYNAMIC` among its names) adds the
identifiers of its string constants that the namespace holds, and names the function (`readers`) where what it loads
reaches the namespace itself (`_DR_WHOLE`): a crash in a copy lacking other kernel names is then only likely
(transplant._namespace_unseen).
Reads code objects and class dicts through C descriptors only: nothing of the notebook's runs; bounded work.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import _T_MODULE, _cls_dict, _CodeType, _FunctionType, _mro  # kernel: strip
from crane.sandbox.kernel.proof import _is_class  # kernel: strip

# names whose load in a function's code means it may read its namespace by a string (as
# sandbox/cell_names.DYNAMIC_READ, for a cell's text): its strings' identifiers are copied (a superset)
_DR_DYNAMIC = frozenset({"globals", "vars", "locals", "eval", "exec", "get_ipython", "__main__", "modules",
                         "user_ns", "user_global_ns", "__dict__"})
# of those, the ones that reach the namespace itself from a function (`globals()`, the shell's `user_ns`, `__main__`,
# `eval`/`exec` in its globals): the function is named a reader. Not `vars(obj)`/`locals()` (in a function: the
# object's dict, its own frame), `self.__dict__`, `sys.modules[name]`: common in honest classes, no namespace read
_DR_WHOLE = frozenset({"globals", "eval", "exec", "__main__", "user_ns", "user_global_ns"})
_DR_CODE = _FunctionType.__dict__["__code__"].__get__
_DR_MAX_CODES = 20000  # code objects looked at, at most (a namespace of many functions: the rest not followed)
_DR_MAX_NAMES = 2000  # names added, at most


def _dr_idents(text: str, out: list) -> None:
    """The ASCII identifiers in `text`, appended to `out`."""
    start = -1
    for i, ch in enumerate(str.__iter__(text)):
        word = ch == "_" or "a" <= ch <= "z" or "A" <= ch <= "Z" or (start >= 0 and "0" <= ch <= "9")
        if word and start < 0:
            start = i
        elif not word and start >= 0:
            out.append(text[start:i])
            start = -1
    if start >= 0:
        out.append(text[start:])


def _dr_functions(v: Any) -> list:
    """The notebook functions `v` carries with it: itself (a function), or the functions of its class dicts (a class
    of the notebook, or an instance of one: methods, static and class methods, properties' accessors)."""
    if type(v) is _FunctionType:
        return [v]
    cls = v if _is_class(v) else type(v)
    out: list = []
    for k in _mro(cls):
        mod = _T_MODULE.__get__(k, type)
        if type(mod) is not str or mod != "__main__":
            continue
        for x in _cls_dict(k).values():
            if type(x) is staticmethod or type(x) is classmethod:
                x = x.__func__
            elif type(x) is property:
                out.extend(f for f in (x.fget, x.fset, x.fdel) if type(f) is _FunctionType)
                continue
            if type(x) is _FunctionType:
                out.append(x)
    return out


def dynamic_reads(ns: dict, names: list) -> tuple[list, list]:
    """(names to copy besides `names`: identifiers in the string constants of dynamically reading functions that
    `ns` holds; the qualified names of those functions). `ns`: the kernel's namespace, a plain dict of exact `str`
    keys (kernel/export.py proved it)."""
    seen_names = set(names)
    todo = [n for n in names if type(n) is str]
    seen_codes: set = set()
    extra: list = []
    readers: list = []
    codes = 0
    while todo and codes < _DR_MAX_CODES:
        v = dict.get(ns, todo.pop())
        if v is None:
            continue
        for fn in _dr_functions(v):
            stack = [_DR_CODE(fn)]
            dynamic = whole = False
            words: list[str] = []
            loads: list[str] = []
            while stack and codes < _DR_MAX_CODES:
                code = stack.pop()
                if type(code) is not _CodeType or id(code) in seen_codes:
                    continue
                seen_codes.add(id(code))
                codes += 1
                for n in code.co_names:
                    loads.append(n)
                    dynamic = dynamic or n in _DR_DYNAMIC
                    whole = whole or n in _DR_WHOLE
                for c in code.co_consts:
                    if type(c) is str:
                        _dr_idents(c, words)
                    elif type(c) is _CodeType:
                        stack.append(c)
            if whole:
                readers.append(getattr(_DR_CODE(fn), "co_qualname", None) or _DR_CODE(fn).co_name)
            if dynamic:
                loads.extend(words)
                for w in words:
                    if w not in seen_names and w in ns and len(extra) < _DR_MAX_NAMES:
                        extra.append(w)
            for n in loads:  # what the pickler will carry with the function: followed too
                if type(n) is str and n not in seen_names and n in ns:
                    seen_names.add(n)
                    todo.append(n)
    return extra, readers
