"""Transplant export, kernel side: the kernel names a notebook function reads by a string (issue 42: the copy misses
nothing it can know of).

Runs in the user's kernel (part of `_crane_transplant`; kernel/export.py calls `dynamic_reads` once CRANE's private
cloudpickle is set up). The daemon finds the names a cell reads (sandbox/cell_names.py), with a string's identifiers
where the cell itself reads the namespace by a string. A notebook function the cell calls may do it instead
(`def f(): return globals()['x']`, `eval('x + 1')`, `'model' in dir()`, `get_ipython().user_ns.get('x')`): its code
is here, not in the cell. From the cell's names, this follows the notebook's functions (those whose globals are the
namespace) and the methods of its classes (plain classes of `__main__`, reached as classes or through instances), by
the global names their code loads (the pickler's own walk, kernel/pickling._global_walker: an attribute named
`eval` is no global load). For every function whose code may read the namespace by a string (`_DR_GLOBALS` loaded
as globals, `_DR_ATTRS` as any name) it adds the identifiers of its string constants that the namespace holds; one
whose code reaches the namespace itself (`_DR_WHOLE`) is named (`readers`), and then the cell's own strings'
identifiers are added too (`getv('x')` with `def getv(n): return globals()[n]`): a crash in a copy lacking other
kernel names is only likely (transplant._namespace_unseen). The names added are a guess: the export copies those it
can, and leaves the rest out (kernel/export.py). The same walk also says what the reached functions read (`reach`:
their global loads and attribute names) and which of the namespace's sets of strings they read where the order
can show (`reach_sets`): env.json's facts, for transplant.state_doubt (a helper the cell calls counts as the cell).
Reads code objects (exact types), function globals and class dicts through C descriptors; a class is read only
once its MRO's dicts hold exact `str` keys (`_plain_class`); nothing of the notebook's runs; bounded work.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import _T_MODULE, _cls_dict, _CodeType, _FunctionType, _mro  # kernel: strip
from crane.sandbox.kernel.pickling import _WALKER  # kernel: strip
from crane.sandbox.kernel.proof import _is_class, _plain_class  # kernel: strip
from crane.sandbox.shared.carry import REACH_ID_CALL, str_set  # kernel: strip

# global names whose load means a function may read its namespace by a string; `_DR_ATTRS`: attribute (or any)
# names that do (the shell's namespace, a frame's or module's dict, `sys.modules`); their strings' names are copied
_DR_GLOBALS = frozenset({"globals", "vars", "locals", "dir", "eval", "exec", "get_ipython", "__main__"})
_DR_ATTRS = frozenset({"user_ns", "user_global_ns", "f_globals", "__dict__", "modules"})
# of those, what reaches the namespace itself from a function: the function is named a reader. Not `vars(obj)`,
# `locals()`/`dir(obj)` (in a function: the object's, its own frame's), `self.__dict__`, `sys.modules[name]`
_DR_WHOLE = frozenset({"globals", "eval", "exec", "__main__", "user_ns", "user_global_ns", "f_globals"})
_DR_CODE = _FunctionType.__dict__["__code__"].__get__
_DR_FGLOBALS = _FunctionType.__dict__["__globals__"].__get__
_DR_MAX_CODES = 20000  # code objects looked at, at most (a namespace of many functions: the rest not followed)
_DR_MAX_NAMES = 2000  # names added, at most
_DR_MAX_TEXT = 10000  # characters of a string constant read for names, at most


def _dr_idents(text: str, out: list) -> None:
    """The ASCII identifiers in `text` (its first `_DR_MAX_TEXT` characters), appended to `out`."""
    text = text[:_DR_MAX_TEXT]
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


def _dr_functions(v: Any, ns: dict) -> list:
    """The notebook functions `v` carries: itself (a function whose globals are the namespace), or the functions of
    its class dicts (a plain class of the notebook's, or an instance of one: methods, static and class methods,
    properties' accessors; its notebook bases' too)."""
    if type(v) is _FunctionType:
        return [v] if _DR_FGLOBALS(v) is ns else []
    cls = v if _is_class(v) else type(v)
    if not _plain_class(cls):  # (a key of the notebook's in a class dict: nothing looked up there)
        return []
    out: list = []
    for k in _mro(cls):
        try:
            mod = _T_MODULE.__get__(k, type)
        except Exception:  # (a heap type with no `__module__`)
            continue
        if type(mod) is not str or mod != "__main__":
            continue
        for x in _cls_dict(k).values():
            if type(x) is staticmethod or type(x) is classmethod:
                x = x.__func__
            elif type(x) is property:
                out.extend(f for f in (x.fget, x.fset, x.fdel) if type(f) is _FunctionType and _DR_FGLOBALS(f) is ns)
                continue
            if type(x) is _FunctionType and _DR_FGLOBALS(x) is ns:
                out.append(x)
    return out


def dynamic_reads(ns: dict, names: list, strings: list) -> tuple[list, list, list, list]:
    """(names to copy besides `names`: identifiers in the string constants of functions that read the namespace by
    a string, and `strings` — the cell's own — where one reads the namespace itself, each held by `ns`; the qualified
    names of those readers; the names the notebook functions the cell reaches load or read as attributes, beyond
    `names`: what a helper reads that the cell's text does not name, for transplant.state_doubt, at most
    `_DR_MAX_NAMES`; the namespace's sets of strings those functions read other than by a membership test, whose
    order in a copy may show: round 17h's F8 through a helper). `ns`: the kernel's namespace, a plain dict of exact
    `str` keys (kernel/export.py proved it). ([], [], [], []) before CRANE's cloudpickle is set up (no walk of its
    own)."""
    if len(_WALKER) != 2:
        return [], [], [], []
    walk, untested = _WALKER
    seen_names = set(names)
    todo = [n for n in names if type(n) is str]
    seen_codes: set = set()
    extra: list = []
    readers: list = []
    reach: dict = {}  # (insertion-ordered: the first names met are kept when there are too many)
    iterated: dict = {}  # global names a reached function loads other than as a membership test's set
    codes = 0

    def add(words: list) -> None:
        for w in words:
            if w not in seen_names and w in ns and len(extra) < _DR_MAX_NAMES:
                seen_names.add(w)
                extra.append(w)
                todo.append(w)

    while todo and codes < _DR_MAX_CODES:
        v = dict.get(ns, todo.pop())
        if v is None:
            continue
        for fn in _dr_functions(v, ns):
            stack = [_DR_CODE(fn)]
            dynamic = whole = False
            texts: list = []
            loads: list = []
            while stack and codes < _DR_MAX_CODES:
                code = stack.pop()
                if type(code) is not _CodeType or id(code) in seen_codes:
                    continue
                seen_codes.add(id(code))
                codes += 1
                for n in untested(code):
                    if len(iterated) < _DR_MAX_NAMES:
                        iterated[n] = None
                for n in walk(code):
                    loads.append(n)
                    if n == "id" and len(reach) < _DR_MAX_NAMES:
                        reach[REACH_ID_CALL] = None
                    if n in _DR_GLOBALS:
                        dynamic = True
                        whole = whole or n in _DR_WHOLE
                for n in code.co_names:
                    if type(n) is str and len(reach) < _DR_MAX_NAMES:
                        reach[n] = None
                    if n in _DR_ATTRS:
                        dynamic = True
                        whole = whole or n in _DR_WHOLE
                for c in code.co_consts:
                    if type(c) is str:
                        texts.append(c)
                    elif type(c) is _CodeType:
                        stack.append(c)
            if dynamic:
                words: list = []
                for t in texts:
                    _dr_idents(t, words)
                add(words)
            if whole:
                readers.append(getattr(_DR_CODE(fn), "co_qualname", None) or _DR_CODE(fn).co_name)
            for n in loads:  # what the pickler will carry with the function: followed too
                if type(n) is str and n not in seen_names and n in ns:
                    seen_names.add(n)
                    todo.append(n)
    if readers:
        add([s for s in strings if type(s) is str])
    given = set(names)
    sets = [n for n in iterated if type(n) is str and str_set(dict.get(ns, n))]
    return extra, readers, [n for n in reach if n not in given], sets[:50]
