"""Transplant export, kernel side: the shared tables the export looks names up in compare nothing of the notebook's.

A dict lookup compares the key asked for with each stored key of the same hash on its probe chain
(`PyObject_RichCompare`: the stored key's `__eq__` runs when its type is not the asked key's exact type): a key of
the notebook's in a table the export reads — a `str` subclass or any other object in `sys.modules` or in a module's
namespace, an object with a type's hash and an `__eq__` of its own in `copyreg.dispatch_table` (which CRANE's
pickler and the C pickler look every pickled type up in), a tuple holding such in `copyreg._extension_registry`
(every global the C pickler saves by reference) — would run its `__eq__` inside CRANE's frames whenever a name
CRANE asks for, present or not, shares its hash. `odd_key()`, the export's first step (kernel/export.py refuses
the copy, naming the table), proves every such table first, reading it without one lookup: the module table and
every plain module's namespace hold exact `str` keys only (counted at C speed, `map(is_, map(type, keys),
repeat(str))`: no key's method runs), the dispatch table's keys are classes whose metaclass compares by identity
(the `__eq__` found first on the metaclass's MRO is a static type's), the extension registry's keys exact tuples of
exact `str`. (A key CRANE finds present never reaches a key inserted after it: honest kernels here hold none of
these; test_install_runs_nothing's `table-key-*` cases.)
"""

from __future__ import annotations

import itertools
from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _HEAPTYPE,
    _MODULE_TYPE,
    _MODULES,
    _O_DICT_GET,
    _T_FLAGS,
    _cls_dict,
    _mdict,
    _module,
    _mro,
)
from crane.sandbox.kernel.shield import SH_NOT_OWN, own_c  # kernel: strip

_LK_IS = own_c("_operator", "is_")
_LK_NOT = own_c("_operator", "not_")
_LK_REPEAT: Any = _O_DICT_GET(itertools, "__dict__").get("repeat")
if not (type(_LK_REPEAT) is type and type.__dict__["__name__"].__get__(_LK_REPEAT) == "repeat"
        and (not type.__dict__["__flags__"].__get__(_LK_REPEAT) & (1 << 9)  # static (3.11), or C's immutable type
             or type.__dict__["__flags__"].__get__(_LK_REPEAT) & (1 << 8))):
    SH_NOT_OWN.append("itertools.repeat")


_LK_COMPRESS: Any = _O_DICT_GET(itertools, "__dict__").get("compress")
_LK_CHAIN: Any = _O_DICT_GET(itertools, "__dict__").get("chain")
_LK_MDICT = type.__dict__["__dict__"].__get__(_MODULE_TYPE)["__dict__"].__get__  # (a module's namespace: C)
for _lk_n, _lk_t in (("compress", _LK_COMPRESS), ("chain", _LK_CHAIN)):
    if not (type(_lk_t) is type and type.__dict__["__name__"].__get__(_lk_t) == _lk_n
            and (not type.__dict__["__flags__"].__get__(_lk_t) & (1 << 9)
                 or type.__dict__["__flags__"].__get__(_lk_t) & (1 << 8))):
        SH_NOT_OWN.append("itertools." + _lk_n)
_LK_CHAIN = (type.__dict__["__dict__"].__get__(_LK_CHAIN)["from_iterable"].__get__(None, _LK_CHAIN)
             if type(_LK_CHAIN) is type else None)


def _str_keys(d: dict) -> bool:
    """Every key of the exact dict `d` is an exact `str` (nothing of a key's is called)."""
    return sum(map(_LK_IS, map(type, d), _LK_REPEAT(str))) == len(d)


# A dict's table of only exact `str` keys is CPython's "unicode" kind: the first key of any other type (a `str`
# subclass too) converts the table to the general kind, for good, and a unicode table's lookups compare by identity
# and `str`'s own equality alone (never a key's `__eq__`), so a unicode table holds exact `str` keys by construction.
# Its entries are smaller (key, value) than a general table's (hash, key, value), so a combined table's size
# (`dict.__sizeof__`: the dict and its table, a function of the table's size and kind only) says its kind: one C call
# per namespace instead of a type test per key (kernel/lookups.odd_key). The sizes are measured here, at install,
# for every table size up to 2**_LK_LOG2 (both kinds grown one insertion at a time: each doubling met), and a size
# either kind has is kept only when the other kind never has it; a general table larger than those is larger than
# any of them. Anything else (a larger namespace, an interpreter whose sizes do not behave so) is walked key by key.
_LK_LOG2 = 14
_LK_SIZEOF: Any = type.__dict__["__dict__"].__get__(type({}))["__sizeof__"]  # (dict's own C method: static type)


def _lk_unicode_sizes() -> frozenset:
    """The sizes that only a table of exact `str` keys has (see above), or an empty set where this interpreter's
    dicts do not show their kind so (then every namespace is walked)."""
    try:
        uni: dict = {}
        gen: dict = {}
        us: list = []
        gs: list = []
        for i in range((2 << _LK_LOG2) // 3):
            uni["k" + str(i)] = gen[i] = None
            for d, seen in ((uni, us), (gen, gs)):
                n = _LK_SIZEOF(d)
                if not seen or seen[-1] != n:
                    seen.append(n)
        if not (len(us) == len(gs) == _LK_LOG2 - 2 and us == sorted(us) and gs == sorted(gs)
                and all(u < g for u, g in zip(us, gs, strict=True))):
            return frozenset()
        fast = frozenset(us) - frozenset(gs)
        probe: dict = dict.fromkeys(("a", "b", "c"))  # a unicode table turned general by a key of another type
        if _LK_SIZEOF(probe) not in fast:
            return frozenset()
        probe[0] = None
        return fast if _LK_SIZEOF(probe) not in fast and max(fast) < max(gs) else frozenset()
    except Exception:
        return frozenset()


_LK_FAST = _lk_unicode_sizes()
_LK_FAST_IN: Any = _LK_FAST.__contains__  # (a frozenset of ints made here: its C method)
LOOKUP_COUNTS: dict = {"fast": 0, "walked": 0}  # namespaces proven by their table's kind, and walked (tests)


def _identity_eq(meta: type) -> bool:
    """Instances of `meta` (classes) compare by identity: the `__eq__` its MRO gives first is a static type's."""
    for k in _mro(meta):
        if _cls_dict(k).get("__eq__") is not None:
            return not _T_FLAGS.__get__(k, type) & _HEAPTYPE
    return True


def odd_key() -> str | None:
    """The first shared table the export looks names up in that holds a key whose comparison could run code (named),
    else None."""
    if not (type(_MODULES) is dict and _LK_FAST_IN(_LK_SIZEOF(_MODULES))) and not _str_keys(_MODULES):
        return "`sys.modules` (a key that is not a plain string)"
    # every plain module's namespace at once, at C speed: those whose table is of the unicode kind by their size
    # (one C call each, above), the others key by key (4,688 modules, 181k keys: tens of ms, docs/sandbox.md)
    mods = list(dict.values(_MODULES))
    spaces = list(map(_LK_MDICT, _LK_COMPRESS(mods, map(_LK_IS, map(type, mods), _LK_REPEAT(_MODULE_TYPE)))))
    walk = list(_LK_COMPRESS(spaces, map(_LK_NOT, map(_LK_FAST_IN, map(_LK_SIZEOF, spaces)))))
    LOOKUP_COUNTS["fast"] += len(spaces) - len(walk)
    LOOKUP_COUNTS["walked"] += len(walk)
    if sum(map(_LK_IS, map(type, _LK_CHAIN(walk)), _LK_REPEAT(str))) != sum(map(len, walk)):
        for name, m in list(dict.items(_MODULES)):  # (named by the table's key: nothing is looked up in it)
            if type(m) is _MODULE_TYPE and not _str_keys(_LK_MDICT(m)):
                return f"the namespace of the module `{name}` (a key that is not a plain string)"
        return "a module's namespace (a key that is not a plain string)"
    cr = _mdict(_module("copyreg"))
    table = dict.get(cr, "dispatch_table")
    if type(table) is dict:
        for k in list(table):
            if not (any(c is type for c in _mro(type(k))) and _identity_eq(type(k))):
                return "`copyreg.dispatch_table` (a key that is not a class comparing by identity)"
    registry = dict.get(cr, "_extension_registry")
    if type(registry) is dict:
        for k in list(registry):
            if not (type(k) is tuple and all(type(x) is str for x in k)):
                return "`copyreg._extension_registry` (a key that is not a tuple of plain strings)"
    return None
