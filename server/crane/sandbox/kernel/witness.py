"""Transplant export, kernel side: what the export keeps between requests, and the witness that proves it holds.

Runs in the user's kernel (part of `_crane_transplant`, before kernel/proof.py). Proving a library class's own
pickling reaches none of the notebook's code (`_Proof._reachable`: its hooks' code followed through module
globals, classes and closures) is the export's largest cost on a TensorFlow/Keras kernel, and the same classes
are proven again at every verdict. Its answer is kept here (`_REACHED`) with a `_Witness` of everything the walk
read: each name it looked up and where (a class's own dict, a module's, a function's globals, `sys.modules`) with
the value found (or its absence) and that value's type; each function it met (its code, its closure's contents,
whether it is library code); each class's MRO and whether the proof took it for the library's. The answer is
reused only while every one of them is still the same object (compared by identity; the witness holds what it
compares, so no id is reused by another object): a method or module function the notebook added, replaced or
deleted, a class's bases or a function's code swapped, a module replaced in `sys.modules` each make the walk run
again. Nothing is called to check it: dicts are read through their own C methods, classes and functions through
C descriptors, and the proof's own judges (`library_function`, `library_class`) are asked again. An answer that
names a function of the notebook's is not kept. `forget()` drops what is kept.

The check is the export's largest cost once the walk is kept (a TF/Keras kernel: ~22 witnesses of ~65,000 lookups
in all per export, ~80 % of its proof and sizing CPU, at ~0.3 µs a lookup in a Python loop). So a witness is
compiled once, at its first check, into one row per owner: the names found there with the values and types found,
the names found absent. A check reads each owner's names with the dict's (or class dict's) own C `get` and
`__contains__` over the whole row, and compares the values and their types by identity with `_operator.is_` (the
interpreter's C function, bound at install; without it, one lookup at a time as before): the same reads and the
same identity tests, without a Python call per lookup. A found value of None is also checked present. A witness's
functions' code is compared the same way; closures and the proof's judgements as before.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _MODULES,
    _O_DICT_GET,
    _BuiltinFunctionType,
    _cls_dict,
    _ModuleType,
    _mro,
)
from crane.sandbox.kernel.lookups import _LK_FAST_IN, _LK_SIZEOF, _str_keys  # kernel: strip

_KEEP = 512  # answers kept at most (then all are dropped and proven again)
_REACHED: dict = {}  # (modules, ids of the library classes) -> (those classes, answer, _Witness)
REACH_COUNTS: dict = {"walked": 0, "reused": 0}  # walks done and answers reused since the install (tests, benches)
_ABSENT = object()


def _own_is() -> Any:
    """`_operator.is_`, the interpreter's C function: read from the module's own dict and checked as
    kernel/shield.own_c checks (a C function whose module is that module, under its name); None when it is not."""
    m = dict.get(_MODULES, "_operator")
    f = dict.get(_O_DICT_GET(m, "__dict__"), "is_") if type(m) is _ModuleType else None
    return f if type(f) is _BuiltinFunctionType and f.__self__ is m and f.__name__ == "is_" else None


_IS = _own_is()  # (bound at install)


def _look(owner: Any, name: str) -> Any:
    """`owner[name]` (a plain dict, or a class's own dict), `_ABSENT` when it has none."""
    return dict.get(owner, name, _ABSENT) if type(owner) is dict else _cls_dict(owner).get(name, _ABSENT)


def _plain_keys(d: Any, plain: bool) -> bool:
    """Every key of `d` (a plain dict: `plain`; else a class's own dict, as `_cls_dict` gives it) is an exact `str`,
    so a lookup in it compares no key of the notebook's (round 16, F1: a key planted in a library class's dict after
    its answer was kept had its `__eq__` run by the check's `get`). A plain dict of the unicode kind by its size (one
    C call), else key by key at C speed (`lookups._str_keys`: iterating a dict or its proxy compares nothing)."""
    return bool(plain and _LK_FAST_IN(_LK_SIZEOF(d))) or _str_keys(d)


def _closure(f: Any) -> tuple:
    """The contents of a function's closure cells (an empty cell: `_ABSENT`)."""
    out = []
    for cell in f.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:
            out.append(_ABSENT)
    return tuple(out)


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class _Witness:
    """What one walk read (see the module docstring), to prove later that it would read the same."""

    def __init__(self) -> None:
        self.looked: dict = {}  # (id(owner), name) -> (owner, name, value or _ABSENT, its type)
        self.fns: dict = {}  # id(function) -> (function, code, closure contents, the proof's judgement)
        self.mros: dict = {}  # id(class) -> (class, its MRO)
        self.libs: dict = {}  # id(class) -> (class, whether the proof took it for the library's)
        self.rows: tuple | None = None  # `looked` and `fns` compiled for the check (`_compile`), at the first

    def get(self, owner: Any, name: str) -> Any:
        """`owner.get(name)` (a plain dict, or a class's own dict), recorded."""
        v = _look(owner, name)
        self.looked.setdefault((id(owner), name), (owner, name, v, type(v)))
        return None if v is _ABSENT else v

    def has(self, owner: Any, name: str) -> bool:
        """`name in owner` (as `get`), recorded."""
        self.get(owner, name)
        return _look(owner, name) is not _ABSENT

    def mro(self, c: Any) -> tuple:
        mro = _mro(c)
        self.mros.setdefault(id(c), (c, mro))
        return mro

    def fn(self, f: Any, judgement: Any) -> None:
        self.fns.setdefault(id(f), (f, f.__code__, _closure(f), judgement))

    def lib(self, c: Any, library: bool) -> bool:
        """`c` was judged the library's (or not): recorded, `library` returned."""
        self.libs.setdefault(id(c), (c, library))
        return library

    def _compile(self) -> tuple:
        """(owners, functions): per owner (the owner, whether a plain dict, the names found there with the values
        and their types, the names found absent, the found names whose value is None: `get` alone cannot tell those
        from absent); each function with its code, and the functions that had a closure with its contents. The
        recorded objects stay held here: the identity test compares with them."""
        by_owner: dict = {}
        for owner, name, v, t in self.looked.values():
            row = by_owner.get(id(owner))
            if row is None:
                row = by_owner[id(owner)] = (owner, [], [], [], [], [])
            if v is _ABSENT:
                row[4].append(name)
            else:
                row[1].append(name)
                row[2].append(v)
                row[3].append(t)
                if v is None:
                    row[5].append(name)
        owners = tuple((o, type(o) is dict, tuple(n), tuple(v), tuple(t), tuple(a), tuple(z))
                       for o, n, v, t, a, z in by_owner.values())
        fns = tuple(self.fns.values())
        return (owners, tuple(f for f, _c, _cells, _j in fns), tuple(c for _f, c, _cells, _j in fns),
                tuple((f, cells) for f, _c, cells, _j in fns if cells), tuple((f, j) for f, _c, _cells, j in fns))

    def holds(self, judge_function: Any, library_class: Any) -> bool:
        """Every lookup, function, MRO and judgement is still the same (`judge_function`, `library_class`: the
        proof's judges of a function and of a class, asked again)."""
        if _IS is None:  # (the interpreter's `_operator.is_` not found: one lookup at a time)
            return self._holds_one_by_one(judge_function, library_class)
        if self.rows is None:
            self.rows = self._compile()
        owners, fns, codes, closed, judged = self.rows
        same = _IS
        for owner, plain, names, values, types, absent, nones in owners:
            d = owner if plain else _cls_dict(owner)
            if not _plain_keys(d, plain):  # (checked before each owner is read: nothing of a key's runs)
                return False
            now = list(map(d.get, names))
            if not (all(map(same, now, values)) and all(map(same, map(type, now), types))):
                return False
            if any(map(d.__contains__, absent)) or not all(map(d.__contains__, nones)):
                return False
        for c, mro in self.mros.values():
            if not _same(_mro(c), mro):
                return False
        for c, library in self.libs.values():
            if library_class(c) is not library:
                return False
        if not all(map(same, [f.__code__ for f in fns], codes)):
            return False
        if not all(_same(_closure(f), cells) for f, cells in closed):
            return False
        return all(judge_function(f) == judgement for f, judgement in judged)

    def _holds_one_by_one(self, judge_function: Any, library_class: Any) -> bool:
        proven: dict = {}
        for owner, name, v, t in self.looked.values():
            plain = type(owner) is dict
            if id(owner) not in proven:
                if not _plain_keys(owner if plain else _cls_dict(owner), plain):
                    return False
                proven[id(owner)] = owner
            now = _look(owner, name)
            if now is not v or type(now) is not t:
                return False
        for c, mro in self.mros.values():
            if not _same(_mro(c), mro):
                return False
        for c, library in self.libs.values():
            if library_class(c) is not library:
                return False
        for f, code, cells, judgement in self.fns.values():
            if f.__code__ is not code or not _same(_closure(f), cells) or judge_function(f) != judgement:
                return False
        return True


def _reached(modules: bool, libs: tuple, judge_function: Any, library_class: Any) -> tuple | None:
    """The kept answer of the walk over these library classes, while its witness holds (else dropped: None)."""
    key = (modules, tuple(map(id, libs)))
    hit = _REACHED.get(key)
    if hit is None:
        return None
    if _same(hit[0], libs) and hit[2].holds(judge_function, library_class):
        REACH_COUNTS["reused"] += 1
        return hit[1]
    del _REACHED[key]
    return None


def _keep_reached(modules: bool, libs: tuple, answer: tuple | None, witness: _Witness) -> None:
    """Keep a walk's answer with its witness (None: the walk was done, its answer not kept)."""
    REACH_COUNTS["walked"] += 1
    if answer is None:
        return
    if len(_REACHED) >= _KEEP:
        _REACHED.clear()
    _REACHED[(modules, tuple(map(id, libs)))] = (libs, answer, witness)


def forget() -> int:
    """Drop every kept answer (the next export proves everything again); how many there were."""
    n = len(_REACHED)
    _REACHED.clear()
    return n
