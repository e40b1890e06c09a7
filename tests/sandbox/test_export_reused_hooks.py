"""Issue 42 (red team of the export, h2 session 10): library code the export lets run on a notebook object must not
reach the notebook's code, and what pickle reads of slots and modules is proven first.

Families not red-teamed before (14 cases), each escaping on IPython 8 and 9 before kernel/proof.py's `_reused_hooks`,
`_registered_reducer`, `_slot_names_read` and its module check (a marker written from CRANE's kernel-side frames):
- a notebook class whose pickling hook is a library's Python function: `__reduce__ = copy.copy` (calls the class's
  `__copy__`), `__reduce__ = logging.Logger.__reduce__` (reads a `name` property), `__getstate__ =
  random.Random.getstate` (a `VERSION` property), namedtuple's `__getnewargs__` under a subclass's `__iter__`
  (`tuple(self)`), a frozen slotted dataclass's `__getstate__` (a `__dataclass_fields__` property, a forged field
  name of a `str` subclass), the same hook taken by a plain class (`__getnewargs__` of a namedtuple);
- `copyreg.pickle(NotebookClass, copy.copy)`: a library reducer registered for a notebook class;
- `__slots__` stored as a dict or a frozenset (pickle iterates it) with a property over a slot, a forged
  `__slotnames__` cache naming a property, a `__slots__` or a slot name of a `str` subclass (compared by
  `copyreg._slotnames`);
- a module object in the namespace without a `__name__` (cloudpickle asks its `__getattr__`).
Each is refused, named, the kernel unchanged; the honest look-alikes (a namedtuple and its subclass with methods and
a property, typing.NamedTuple, a plain slotted class, a dataclass, a frozen slotted one, attrs' slotted `define`
and `frozen` classes, whose `__getstate__` only reads their slots, a module) are still copied and run clean.
"""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .marked_runs import HIT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = r"""
import sys, types, copy, copyreg, collections, dataclasses, functools, logging, random, typing
sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: transplant path
""" + HIT

# (id, the notebook's cell defining the object, the checked cell, the name the refusal names)
ATTACKS = [
    ("reduce-is-copy-copy", "class R1:\n    __reduce__ = copy.copy\n    def __copy__(self):\n"
     "        hit('R1 __copy__')\n        return (R1, ())\nr1 = R1()", "print(r1 is not None)", "r1"),
    ("reduce-is-logger-reduce", "class R2:\n    __reduce__ = logging.Logger.__reduce__\n    @property\n"
     "    def name(self):\n        hit('R2 name')\n        return 'root'\nr2 = R2()", "print(r2 is not None)", "r2"),
    ("getstate-is-random-getstate", "class R7:\n    __getstate__ = random.Random.getstate\n    gauss_next = None\n"
     "    @property\n    def VERSION(self):\n        hit('R7 VERSION')\n        return 3\nr7 = R7()",
     "print(r7 is not None)", "r7"),
    ("namedtuple-subclass-iter", "class R3(collections.namedtuple('R3b', 'a b')):\n    def __iter__(self):\n"
     "        hit('R3 __iter__')\n        return tuple.__iter__(self)\nr3 = R3(1, 2)", "print(r3.a)", "r3"),
    ("getnewargs-taken-by-a-plain-class", "class R8:\n    __getnewargs__ = collections.namedtuple('Z', 'q').__getnewargs__\n"
     "    def __iter__(self):\n        hit('R8 iter')\n        return iter(())\nr8 = R8()", "print(r8 is not None)", "r8"),
    ("frozen-dataclass-fields-property", "@dataclasses.dataclass(frozen=True, slots=True)\nclass R4:\n    x: int\n"
     "R4.__dataclass_fields__ = property(lambda s: (hit('R4 fields'), {})[1])\nr4 = R4(1)", "print(r4.x)", "r4"),
    ("dataclass-getstate-forged-field-name", "class SN(str):\n    def __hash__(self):\n        hit('R4c hash')\n"
     "        return str.__hash__(self)\n    def __eq__(self, o):\n        hit('R4c eq')\n        return str.__eq__(self, o)\n"
     "_fld = dataclasses.field()\n_fld.name = SN('a')\n_fld._field_type = dataclasses._FIELD\nclass R4c:\n"
     "    __slots__ = ('a',)\n    __getstate__ = dataclasses._dataclass_getstate\n    __dataclass_fields__ = {'a': _fld}\n"
     "r4c = R4c()\nr4c.a = 1", "print(r4c.a)", "r4c"),
    ("copyreg-library-reducer-for-a-notebook-class", "class R5:\n    def __copy__(self):\n        hit('R5 __copy__')\n"
     "        return (R5, ())\ncopyreg.pickle(R5, copy.copy)\nr5 = R5()", "print(r5 is not None)", "r5"),
    ("slots-as-a-dict", "class S1:\n    __slots__ = {'s': 'doc'}\nclass S1b(S1):\n    @property\n    def s(self):\n"
     "        hit('S1 slot property')\n        return 1\ns1 = S1b()", "print(s1 is not None)", "s1"),
    ("slots-as-a-frozenset", "class S2:\n    __slots__ = frozenset(['s'])\nclass S2b(S2):\n    @property\n"
     "    def s(self):\n        hit('S2 slot property')\n        return 1\ns2 = S2b()", "print(s2 is not None)", "s2"),
    ("slotnames-cache-forged", "class S4:\n    __slots__ = ('a',)\n    @property\n    def zz(self):\n"
     "        hit('S4 zz')\n        return 1\nS4.__slotnames__ = ['zz']\ns4 = S4()", "print(s4 is not None)", "s4"),
    ("slots-a-str-subclass", "class SS(str):\n    def __eq__(self, o):\n        hit('X7 eq')\n"
     "        return str.__eq__(self, o)\n    __hash__ = str.__hash__\n    def startswith(self, *a):\n"
     "        hit('X7 startswith')\n        return str.startswith(self, *a)\nclass X7:\n    __slots__ = SS('a')\n"
     "x7 = X7()\nx7.a = 1", "print(x7.a)", "x7"),
    ("slot-name-a-str-subclass", "class SS2(str):\n    def __eq__(self, o):\n        hit('X9 eq')\n"
     "        return str.__eq__(self, o)\n    __hash__ = str.__hash__\nclass X9:\n    __slots__ = (SS2('b'),)\n"
     "x9 = X9()\nx9.b = 2", "print(x9.b)", "x9"),
    ("module-without-a-name", "pm = types.ModuleType('holder')\ndel pm.__name__\n"
     "pm.__getattr__ = lambda n: (hit('P1 ' + n), 'x')[1]", "print(type(pm))", "pm"),
]

HONEST = """
P1 = collections.namedtuple('P1', 'a b')
ok1 = P1(1, 2)
class P2(collections.namedtuple('P2b', 'a b')):
    __slots__ = ()
    def total(self):
        return self.a + self.b
    @property
    def half(self):
        return self.a / 2
ok2 = P2(1, 2)
class P3(typing.NamedTuple):
    a: int
    b: str = 'x'
    def f(self):
        return self.a
ok3 = P3(1)
class S7:
    __slots__ = ('a', 'b')
    def __init__(self):
        self.a, self.b = 1, 2
ok7 = S7()
@dataclasses.dataclass
class D5:
    x: int = 1
    y: list = dataclasses.field(default_factory=list)
ok5 = D5()
import json as ok8
@dataclasses.dataclass(frozen=True, slots=True)
class D6:
    x: int = 4
ok6 = D6()
import attrs
@attrs.define
class AD:
    x: int = 5
    @property
    def double(self):
        return 2 * self.x
    def total(self):
        return self.x
ok9 = AD()
@attrs.frozen
class AF:
    y: int = 6
ok10 = AF()
"""
HONEST_CELL = ("print(ok1.a + ok1.b, ok2.total(), ok2.half, ok3.f(), ok3.b, ok7.a, ok5.x, ok8.dumps(1), ok6.x, "
               "ok9.double, ok9.total(), ok10.y)")


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp(f"h2-reused-{request.param}"), python=kernel_python(request.param))
    c = kernel.connection
    assert c.run_cell(SETUP, timeout=300).status == "ok"
    yield c
    kernel.shutdown()


@pytest.mark.parametrize(("case", "setup", "cell", "name"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_library_code_run_on_a_notebook_object_reaches_nothing_of_the_notebooks(conn, case, setup, cell, name):
    assert conn.run_cell(setup, timeout=60).status == "ok", setup
    conn.evaluate("HITS.clear()")
    with Untouched(conn) as watch:
        v = transplant(conn, cell, 60.0)
    assert conn.evaluate("list(HITS)") == [], v
    assert watch.unchanged, (watch.changes(), watch.outputs)
    assert v.verdict == "unavailable" and f"`{name}`" in (v.reason or "") and "notebook" in (v.reason or ""), v


def test_the_honest_look_alikes_are_still_copied(conn):
    assert conn.run_cell(HONEST, timeout=60).status == "ok"
    conn.evaluate("HITS.clear()")
    with Untouched(conn) as watch:
        v = transplant(conn, HONEST_CELL, 60.0)
    assert conn.evaluate("list(HITS)") == [], v
    assert watch.unchanged, (watch.changes(), watch.outputs)
    assert v.verdict == "no-crash", v
    assert v.stdout.split() == ["3", "3", "0.5", "1", "x", "1", "1", "1", "4", "10", "5", "6"], v.stdout
