"""Code a session command set on a library class, met in a later `load` of an OS transplant session (issue 42, h5).

A transplant session loads more of the kernel's state before a run that reads it, the audit hook bypassed for the
libraries' unpickling. The methods carried from the kernel are lifted off their classes for the load, and a
portable session unpickles under the call guard (test_carried_methods_bounds); on the OS path a method a command
set itself (`pd.DataFrame.__setstate__ = own` in command 1) ran in the next load with the audit hook off: a write
it tried outside the scratch directory met Landlock alone, which the method swallowed, and the run said no-crash.
Now the unpickler's `find_class` (worker/load_vet.py) sees the command's code on the class before any frame is
built, and the rest of the unpickling runs under the audit hook, as the command ran: the write is refused by it,
recorded, and the load fails (the run is unavailable, its reason the refusal). An honest method a command set
still runs in the load (the frame is loaded through it). What is the command's is not read off the filename it
can set (review M2): a library's filename on the method's code, or a str subclass answering as CRANE's, is caught
too, and (h7) so is code a library function the load calls reaches through a module global the command rebound.
The kernel is a CuPy one (unforkable): every run is a copy. IPython 8 and 9.
"""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.session import open_session

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the OS sandbox needs Linux")

SETUP = """
import os, sys, types
sys.modules['cupy'] = types.ModuleType('cupy')
import pandas as pd
_setstate = pd.DataFrame.__setstate__
OUTSIDE = {outside!r}
df1 = pd.DataFrame({{'a': [1, 2, 3]}})
df2 = pd.DataFrame({{'b': [4, 5]}})
"""

# command 1 of a session: a `__setstate__` of its own on pandas' class, which writes outside the scratch directory
# and swallows whatever stops it (what it met is left where the next command reads it)
WRITES = """
kept = (_setstate, OUTSIDE, os)
def own(self, state):
    try:
        with open(OUTSIDE, 'w') as f:
            f.write('written in a load')
    except Exception as exc:
        os.environ['CRANE_H5_MET'] = repr(exc)
    return _setstate(self, state)
pd.DataFrame.__setstate__ = own
"""

# the same method with a library's filename (review M2): `co_filename` is the command's to set
FORGED = WRITES + """
import json
own.__code__ = own.__code__.replace(co_filename=json.__file__)
"""

# ... or a str subclass whose `startswith` answers as CRANE's own code does (review M2; it ran during the vet)
STR_SUBCLASS = WRITES + """
class Name(str):
    def startswith(self, *args):
        return True
    def endswith(self, *args):
        return False
own.__code__ = own.__code__.replace(co_filename=Name('<crane-kernel/worker.py>'))
"""

# a module global a library function the load calls reads (fixC's open point, h7): pandas' `_new_Index`, which
# rebuilds a loaded frame's index, asks `issubclass(cls, ABCMultiIndex)` (pandas 3's frame methods read it too); the command's class in that name writes
# outside the scratch directory from its metaclass's `__subclasscheck__` and swallows whatever stops it
GLOBAL = """
import pandas.core.indexes.base as ibase
kept = (ibase, OUTSIDE, os)
class Meta(type):
    def __subclasscheck__(cls, sub):
        try:
            with open(OUTSIDE, 'w') as f:
                f.write('written in a load')
        except Exception as exc:
            os.environ['CRANE_H5_MET'] = repr(exc)
        return False
    def __instancecheck__(cls, obj):
        return False
class Own(metaclass=Meta):
    pass
ibase.ABCMultiIndex = Own
"""

# an honest one: it counts the frames loaded through it
COUNTS = """
kept = _setstate
loaded_through = []
def counted(self, state):
    loaded_through.append(1)
    return _setstate(self, state)
pd.DataFrame.__setstate__ = counted
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    outside = str(tmp_path_factory.mktemp("h5-outside") / "written.txt")
    k = start_kernel(tmp_path_factory.mktemp("h5-load"), python=kernel_python(request.param))
    run = k.connection.run_cell(SETUP.format(outside=outside), timeout=120)
    assert run.status == "ok", run
    yield k.connection, outside
    k.shutdown()


@pytest.mark.parametrize("command", [WRITES, FORGED, STR_SUBCLASS], ids=["own", "forged-filename", "str-filename"])
def test_a_command_s_method_runs_in_a_later_load_under_the_audit_hook(kernel, command):
    conn, outside = kernel
    with Untouched(conn) as watch:
        with open_session(conn, budget_s=30) as sb:
            assert type(sb).__name__ == "TransplantSession", type(sb)
            v = sb.run("n = len(df1)")  # (a first load, before any command's code is on the class)
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            v = sb.run(command)
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            v = sb.run("m = len(df2)\nprint(os.environ.get('CRANE_H5_MET'))")
    assert watch.unchanged, (watch.outputs, watch.changes())
    import os

    assert not os.path.exists(outside)
    # before: the load ran `own` with the audit hook bypassed; Landlock's PermissionError was swallowed: no-crash
    # (a forged filename or a str subclass as it passed for a library's or CRANE's code until review M2's fix)
    assert v.verdict == "unavailable", (v.verdict, v.stdout, v.reason)
    assert "writing a file is blocked" in (v.reason or "") and "DataFrame" in (v.reason or ""), v.reason


def test_an_honest_method_a_command_set_still_runs_in_a_later_load(kernel):
    conn, _ = kernel
    with Untouched(conn) as watch:
        with open_session(conn, budget_s=30) as sb:
            v = sb.run(COUNTS)
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            v = sb.run("print(len(df1) + len(df2), len(loaded_through))")
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
    assert v.stdout.split() == ["5", "2"], v.stdout


def test_a_module_global_a_command_rebound_runs_in_a_later_load_under_the_audit_hook(kernel):
    conn, outside = kernel
    with Untouched(conn) as watch:
        with open_session(conn, budget_s=30) as sb:
            v = sb.run("n = len(df1)")
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            v = sb.run(GLOBAL)
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            v = sb.run("m = len(df2)\nprint(os.environ.get('CRANE_H5_MET'))")
    assert watch.unchanged, (watch.outputs, watch.changes())
    import os

    assert not os.path.exists(outside)
    # before: `_new_Index` is pandas' own code with its own globals: the load ran the command's `__subclasscheck__`
    # with the audit hook bypassed, Landlock's refusal swallowed: no-crash
    assert v.verdict == "unavailable", (v.verdict, v.stdout, v.reason)
    # (the first library class or function found reaching it names the hit: `_new_Index`, or `pandas.DataFrame` whose
    # methods read it too, as pandas 3's do)
    assert "writing a file is blocked" in (v.reason or "") and "code a session command set" in (v.reason or ""), v.reason
