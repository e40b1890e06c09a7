"""Issue 42: the export runs nothing of the notebook's when the notebook replaced or patched a CLASS of the standard
library (`weakref.ref = MyRef`, `collections.OrderedDict = ...`, `weakref.WeakKeyDictionary.get = ...`): methods of
stdlib classes read their module's globals at call time, and CRANE binds functions only at install.

Beside the function sweep of test_export_by_construction's refusal case, every class of the stdlib modules CRANE's
kernel side and its private cloudpickle import is (1) replaced in its module by a counting stand-in (a class whose
metaclass counts calls, `isinstance`/`issubclass` checks and every attribute read, then forwards them to the real class:
the kernel's own machinery keeps working) and (2) where the class is Python code (a mutable class), every function,
property and class/static method of its own `__dict__` wrapped with a counter. Exception classes are patched, not
replaced (an `except` clause needs a real exception class). The markers count only calls from CRANE's kernel-side
frames (`<crane-kernel/...>`): 0 markers, the kernel unchanged, an honest verdict, on IPython 8 and 9.
"""

from __future__ import annotations

import os

import pytest

from . import test_export_by_construction as _bc
from .test_export_by_construction import _SWEPT, REFUSABLE, REFUSABLE_CELLS, REFUSAL_SETUP, REFUSAL_TEARDOWN, _check

env = _bc.env  # the module's kernels (IPython 8 and 9), CRANE's private modules installed

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

# the modules CRANE's kernel side imports (tests/sandbox/test_export_by_construction._SWEPT) and its private
# cloudpickle's own
_CLASS_SWEPT = _SWEPT + ("copyreg", "dis", "opcode", "uuid", "platform", "dataclasses", "_collections_abc", "logging",
                         "decimal", "sysconfig", "shutil", "tempfile", "signal", "socket", "errno", "ctypes", "_io",
                         "_weakrefset", "_thread", "_abc")

CLASS_SETUP = (
    "_CLS_REAL, _CLS_PATCHED, _FT, _prop, _cm, _sm = [], [], types.FunctionType, property, classmethod, staticmethod\n"
    "def _cwrap(f, n):\n    def g(*a, **k):\n        hit(n)\n        return f(*a, **k)\n    return g\n"
    "class _StandMeta(type):\n"
    "    def __call__(cls, *a, **k):\n        hit('call ' + cls._crane_n)\n        return cls._crane_orig(*a, **k)\n"
    "    def __instancecheck__(cls, x):\n        hit('isinstance ' + cls._crane_n)\n"
    "        return isinstance(x, cls._crane_orig)\n"
    "    def __subclasscheck__(cls, c):\n        hit('issubclass ' + cls._crane_n)\n"
    "        return issubclass(c, cls._crane_orig)\n"
    "    def __getattribute__(cls, n):\n"
    "        if n in ('_crane_orig', '_crane_n'):\n            return type.__getattribute__(cls, n)\n"
    "        hit('attribute ' + type.__getattribute__(cls, '_crane_n') + '.' + n)\n"
    "        return getattr(type.__getattribute__(cls, '_crane_orig'), n)\n"
    "def _stand_in(c, n):\n"
    "    s = _StandMeta(c.__name__, (), {'_crane_orig': c, '_crane_n': n})\n"
    "    return s\n"
    "def _wrap_member(v, n):\n"
    "    if type(v) is _FT:\n        return _cwrap(v, n)\n"
    "    if type(v) is _prop:\n"
    "        return _prop(*(None if f is None else _cwrap(f, n) for f in (v.fget, v.fset, v.fdel)), v.__doc__)\n"
    "    if type(v) in (_cm, _sm) and type(v.__func__) is _FT:\n"
    "        return type(v)(_cwrap(v.__func__, n))\n"
    "    return None\n"
    "_seen_cls = set()\n"
    f"for _mn in {_CLASS_SWEPT!r}:\n"
    "    __import__(_mn)\n    _md = sys.modules[_mn].__dict__\n"
    "    for _n, _c in list(_md.items()):\n"
    "        if not isinstance(_c, type) or type(_c) is _StandMeta:\n            continue\n"
    "        if id(_c) not in _seen_cls and not (type.__dict__['__flags__'].__get__(_c) & (1 << 8)) "
    "and _c.__module__ != 'builtins':\n"
    "            _seen_cls.add(id(_c))\n"
    "            for _an, _av in list(type.__dict__['__dict__'].__get__(_c).items()):\n"
    "                _w = _wrap_member(_av, _mn + '.' + _n + '.' + _an)\n"
    "                if _w is not None:\n"
    "                    try:\n                        type.__setattr__(_c, _an, _w)\n"
    "                    except (TypeError, AttributeError):\n                        continue\n"
    "                    _CLS_PATCHED.append((_c, _an, _av))\n"
    "        if not issubclass(_c, BaseException):\n"
    "            _CLS_REAL.append((_md, _n, _c))\n            _md[_n] = _stand_in(_c, _mn + '.' + _n)\n"
)
CLASS_TEARDOWN = ("for _md, _n, _c in reversed(_CLS_REAL):\n    _md[_n] = _c\n"
                  "for _c, _an, _av in reversed(_CLS_PATCHED):\n    type.__setattr__(_c, _an, _av)\n")


def _refused_naming_the_patch(v, *names: str) -> None:
    assert v.verdict == "unavailable" and "not the standard library's code" in (v.reason or ""), v
    assert any(n in (v.reason or "") for n in names), (names, v.reason)


def test_stdlib_classes_replaced_or_patched_run_nothing_of_the_notebooks(env, monkeypatch):
    """Each cell reads one value the export refuses, describes, sizes, shrinks (copy limit 1 MiB) or pickles by
    value (a notebook function and class: cloudpickle's class tracker, a `WeakKeyDictionary`, and `uuid`), with
    every stdlib function wrapped and every stdlib class replaced and patched: no call from CRANE's frames, the
    copy refused naming a patch."""
    from ..sandbox_options import use_options
    use_options(monkeypatch, transplant_copy_mb=1)
    conn = env["conn"]
    assert conn.run_cell(REFUSABLE, timeout=120).status == "ok"
    try:
        for cell in REFUSABLE_CELLS:
            assert conn.evaluate("sys.modules['_crane_transplant'].__dict__['_SEEN'].clear()") is None
            v = _check(env, REFUSAL_SETUP + "\n" + CLASS_SETUP, CLASS_TEARDOWN + REFUSAL_TEARDOWN, cell,
                       ("unavailable",))
            _refused_naming_the_patch(v, "`")
        # the classes alone, without the function sweep
        for cell in ("print(nbobj.m())", "print(bigarr.shape)"):
            _refused_naming_the_patch(_check(env, CLASS_SETUP, CLASS_TEARDOWN, cell, ("unavailable",)), "`")
    finally:
        conn.run_cell("del gen, huge")


# one class of a module the export reaches, replaced or patched alone: (id, patch, undo, what the refusal names)
ONE = [
    ("weakref-method", "import weakref\n_o = weakref.WeakKeyDictionary.get\n"
     "def _g(self, *a):\n    hit('WeakKeyDictionary.get')\n    return _o(self, *a)\nweakref.WeakKeyDictionary.get = _g",
     "weakref.WeakKeyDictionary.get = _o", "weakref.WeakKeyDictionary"),
    ("weakref-ref-class", "import weakref\n_o = weakref.ref\nclass _R(_o):\n    def __init__(self, *a):\n        hit('ref')\n"
     "weakref.ref = _R", "weakref.ref = _o", "weakref.ref"),
    ("chainmap-class", "import collections\n_o = collections.ChainMap\nclass _C(_o):\n"
     "    def __getitem__(self, k):\n        hit('ChainMap')\n        return _o.__getitem__(self, k)\n"
     "collections.ChainMap = _C", "collections.ChainMap = _o", "collections.ChainMap"),
    ("picklebuffer-class", "import pickle\n_o = pickle.PickleBuffer\n"
     "def _pb(*a):\n    hit('PickleBuffer')\n    return _o(*a)\npickle.PickleBuffer = _pb", "pickle.PickleBuffer = _o",
     "pickle.PickleBuffer"),
    ("enum-metaclass-call", "import enum\n_o = enum.EnumType.__call__\n"
     "def _ec(cls, *a, **k):\n    hit('EnumType.__call__')\n    return _o(cls, *a, **k)\nenum.EnumType.__call__ = _ec",
     "enum.EnumType.__call__ = _o", "enum."),
    ("uuid-property", "import uuid\n_o = uuid.UUID.hex\n"
     "uuid.UUID.hex = property(lambda self: (hit('UUID.hex'), _o.fget(self))[1])", "uuid.UUID.hex = _o", "uuid."),
    ("codec-class", "import codecs\n_o = codecs.BufferedIncrementalDecoder.decode\n"
     "def _d(self, *a, **k):\n    hit('decode')\n    return _o(self, *a, **k)\n"
     "codecs.BufferedIncrementalDecoder.decode = _d", "codecs.BufferedIncrementalDecoder.decode = _o", "codecs."),
]


@pytest.mark.parametrize(("case", "patch", "undo", "named"), ONE, ids=[c[0] for c in ONE])
def test_one_stdlib_class_patched_is_refused_by_name(env, case, patch, undo, named):
    """A notebook function and class pickled by value (cloudpickle's tracker, `uuid`, `dis`) under one patch: no
    call from CRANE's frames, the copy refused naming it; undone, the same cell is copied and runs."""
    conn = env["conn"]
    assert conn.run_cell(REFUSABLE, timeout=120).status == "ok"
    try:
        _refused_naming_the_patch(_check(env, patch, undo, "print(nbobj.m())", ("unavailable",)), named)
        assert _check(env, "pass", "pass", "print(nbobj.m())", ("no-crash",)).certain
    finally:
        conn.run_cell("del gen, huge")


# (not copyreg's: the C pickler calls them for every plain object, and a replaced one refuses the copy, T09)
_FUNCTIONS_TOO = tuple(m for m in _CLASS_SWEPT if m not in _SWEPT and m != "copyreg")
FUNCTION_SETUP = REFUSAL_SETUP.replace(repr(_SWEPT), repr(_FUNCTIONS_TOO))


def test_the_functions_of_the_other_modules_are_not_reached(env):
    """The functions (not classes) of the modules above that the first sweep leaves out (`uuid`, `dis`, `codecs`,
    `_weakrefset`, `_collections_abc`, ...) wrapped too: the export calls none of them (so it does not refuse
    for them) and the notebook's function and class are pickled by value and run."""
    conn = env["conn"]
    assert conn.run_cell(REFUSABLE, timeout=120).status == "ok"
    try:
        v = _check(env, FUNCTION_SETUP, REFUSAL_TEARDOWN, "print(nbobj.m())", ("no-crash", "unavailable"))
        assert v.verdict == "no-crash", v.reason
    finally:
        conn.run_cell("del gen, huge")


def test_a_patch_made_before_crane_installed_is_refused(env, tmp_path):
    """The same patches made before CRANE's first export in a fresh kernel: they are not the standard library's
    code either, so `_crane_transplant` refuses to install (before CRANE's cloudpickle, whose module body would
    call them), naming one; nothing of theirs runs."""
    from crane.kernel.manager import start_kernel
    from crane.sandbox.transplant import transplant

    from ..kernel_envs import kernel_python

    k = start_kernel(tmp_path, python=kernel_python(env["name"]))
    try:
        c = k.connection
        assert c.run_cell(_bc.SETUP.format() + REFUSABLE
                          + "\n".join(p.replace("_o", f"_o{i}") for i, (_, p, _, _) in enumerate(ONE)), timeout=300).status == "ok"
        c.evaluate("HITS.clear()")
        v = transplant(c, "print(nbobj.m())", 60.0)
        assert c.evaluate("list(HITS)") == [], v
        _refused_naming_the_patch(v, "`")
        assert "before CRANE's first export" in (v.reason or ""), v
    finally:
        k.shutdown()
