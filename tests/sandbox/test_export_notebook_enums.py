"""Issue 42 part 2 (h10): the notebook's enums are copied by value on the copy paths, and pickling them never runs
the notebook's code in the kernel (IPython 8 and 9; OS transplant and portable).

Before, every member of a notebook enum (`class Color(enum.Enum): RED = 1`, `IntEnum`, `Flag`, `auto()`) was
refused ("overrides `_generate_next_value_` of enum.Enum"): EnumType copies `Enum.__new__`, `_generate_next_value_`
and Flag's operators into each enum class it makes, and the proof took those library functions for the notebook's
(kernel/proof `_the_librarys_own`). `Enum.__reduce_ex__` reads only `__class__` and `_value_`, so a member is
copied as `(Color, (1,))`; the class by value, whose `__new__`, `__init__` and `_missing_` run only in the worker.
What the refusal protected is kept, and one hole it did not cover is closed: pickling the class itself reads each
member's `name` and `value` in the kernel (cloudpickle's `_enum_getstate`), which ran a notebook class's own
`name`/`value` property there (`_Proof._enum_reads`)."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .test_export_reused_hooks import SETUP

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

PATHS = {
    "transplant": lambda conn, src: transplant(conn, src, 60.0),
    "portable": lambda conn, src: speculate(conn, src, 60.0, sandbox=SandboxOptions(confinement="portable")),
}

HONEST = """
import enum
class Color(enum.Enum):
    RED = 1
    GREEN = 2
    def warm(self):
        return self is Color.RED
class N(enum.IntEnum):
    A = enum.auto()
    B = enum.auto()
class F(enum.Flag):
    X = enum.auto()
    Y = enum.auto()
class S(str, enum.Enum):
    P = 'p'
c0, n0, f0, s0 = Color.RED, N.B, F.X | F.Y, S.P
by_color = {Color.GREEN: 'g'}
"""
HONEST_CELL = "print(c0.name, c0.warm(), n0 + 1, f0 == F.X | F.Y, s0.upper(), by_color[Color(2)], Color['RED'] is c0)"
HONEST_OUT = ["RED", "True", "3", "True", "P", "g", "True"]

# an enum whose own code runs where members are made or looked up: in the worker, never in the kernel (a plain
# list marks it: the portable worker's guard refuses `hit`'s sys._getframe)
RUNS_CODE = """
RAN = []
class M(enum.Enum):
    A = 1
    def __init__(self, v):
        RAN.append('M __init__')
    @classmethod
    def _missing_(cls, v):
        RAN.append('M _missing_')
        return cls.A
class W(int, enum.Enum):
    def __new__(cls, v):
        RAN.append('W __new__')
        o = int.__new__(cls, v)
        o._value_ = v
        return o
    Q = 3
m0, w0 = M.A, W.Q
"""
RUNS_CODE_CELL = "print(m0.value, M(99) is M.A, w0 + 1)"

# (id, the notebook's cell, the checked cell, the name the refusal names)
ATTACKS = [
    ("a-value-property-read-of-a-member", "class V(enum.Enum):\n    A = 1\n    @property\n    def value(self):\n"
     "        hit('V value')\n        return 1\nv0 = V.A\n", "print(v0 is not None)", "v0"),
    ("a-value-property-read-pickling-the-class", "class V1(enum.Enum):\n    A = 1\n    @property\n    def value(self):\n"
     "        hit('V1 value')\n        return 1\n", "print(V1.A is not None)", "V1"),
    ("a-name-property-read-pickling-the-class", "class V2(enum.Enum):\n    A = 1\n    @property\n    def name(self):\n"
     "        hit('V2 name')\n        return 'A'\n", "print(V2.A is not None)", "V2"),
    ("a-value-slot-property", "class V3(enum.Enum):\n    A = 1\nV3._value_ = property(lambda s: (hit('V3 _value_'), 1)[1])\n"
     "v3 = V3.A\n", "print(v3 is not None)", "v3"),
]


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp(f"h10-enums-{request.param}"), python=kernel_python(request.param))
    c = kernel.connection
    assert c.run_cell(SETUP, timeout=300).status == "ok"
    assert c.run_cell(HONEST, timeout=60).status == "ok"
    assert c.run_cell(RUNS_CODE, timeout=60).status == "ok"
    yield c
    kernel.shutdown()


def _copied(conn, path: str, cell: str):
    conn.evaluate("HITS.clear()")
    with Untouched(conn) as watch:
        v = PATHS[path](conn, cell)
    assert conn.evaluate("list(HITS)") == [], v
    assert watch.unchanged, (watch.changes(), watch.outputs)
    return v


@pytest.mark.parametrize("path", list(PATHS))
def test_the_notebooks_enums_and_their_members_are_copied(conn, path):
    v = _copied(conn, path, HONEST_CELL)
    assert v.verdict == "no-crash", v
    assert v.stdout.split() == HONEST_OUT, v.stdout


@pytest.mark.parametrize("path", list(PATHS))
def test_an_enums_own_code_runs_in_the_worker_alone(conn, path):
    conn.evaluate("RAN.clear()")
    v = _copied(conn, path, RUNS_CODE_CELL)
    assert conn.evaluate("list(RAN)") == [], v
    assert (v.verdict, v.stdout.split()) == ("no-crash", ["1", "True", "4"]), v


@pytest.mark.parametrize(("case", "setup", "cell", "name"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_an_enum_whose_pickling_would_run_the_notebooks_code_is_refused(conn, case, setup, cell, name):
    assert conn.run_cell(setup, timeout=60).status == "ok", setup
    v = _copied(conn, "transplant", cell)
    assert v.verdict == "unavailable" and f"`{name}`" in (v.reason or "") and "notebook" in (v.reason or ""), v


def test_the_kernels_own_word_on_those_cells(conn):
    r = conn.run_cell(HONEST_CELL)
    assert r.status == "ok"
    assert conn.run_cell(RUNS_CODE_CELL).status == "ok"
