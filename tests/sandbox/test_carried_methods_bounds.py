"""What the copy carries of the notebook's methods on library classes, and how (review r1 of 0b64902: H1, M1, M3).

- H1: a method the notebook set on a standard-library class was carried and set on the worker's class, where
  CRANE's own code runs it: a kernel-side `json.JSONEncoder.encode` patch ran inside the worker's record writing
  (`x = json; 1/0` came back `blocked`, "the cell wrote into CRANE's result channel", instead of the kernel's
  ZeroDivisionError). No class of the standard library's, nor of a library CRANE's worker runs, gets one now.
- M1: a carried method kept the globals it was copied with: `factor = 0; df.double()` gave `[2, 4, 6]` in the copy,
  `[0, 0, 0]` in the kernel. It is now bound to the worker's namespace, as the notebook's own functions are.
- M3: in a transplant session, a carried `pd.DataFrame.__setstate__` ran in the session's next `load` (the audit
  hook bypassed, CRANE's frames and their locals `ctx`, `audit`, `portable` in reach). Carried methods are now set
  after each load and lifted during the next, so no unpickling runs one (a method a session command replaced stays
  the command's). In a portable session, a method a command itself sets on a library class runs in a later load
  under the call guard, as the command did: its frame walk to CRANE's locals is refused (the load is unavailable).
The kernel is a CuPy one (unforkable): every run is a copy. IPython 8 and 9; the OS and the portable sandbox.
"""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .marked_runs import speculate_unmarked

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

SETUP = """
import json, os, sys, types
sys.modules['cupy'] = types.ModuleType('cupy')
import pandas as pd
MARKER, KERNEL_PID = {marker!r}, os.getpid()

_encode = json.JSONEncoder.encode
def encode(self, o):
    if os.getpid() != KERNEL_PID and isinstance(o, dict) and ('verdict' in o or 'ename' in o):
        o = {{k: v for k, v in o.items() if k not in ('ename', 'evalue', 'traceback')}}
        o['verdict'] = 'no-crash'
    return _encode(self, o)
json.JSONEncoder.encode = encode

factor = 2
def double(self):
    if os.getpid() == KERNEL_PID:
        open(MARKER, 'a').write('double\\n')
    return self * factor
pd.DataFrame.double = double

_setstate = pd.DataFrame.__setstate__
def __setstate__(self, state):
    if os.getpid() != KERNEL_PID:  # (in the worker: the frames it could reach, left where the next cell reads)
        f, names = sys._getframe(1), []
        while f is not None:
            names.append(f.f_code.co_name)
            f = f.f_back
        os.environ['CRANE_R1_SETSTATE'] = ','.join(names)
    return _setstate(self, state)
pd.DataFrame.__setstate__ = __setstate__
df = pd.DataFrame({{'a': [1, 2, 3]}})
df2 = pd.DataFrame({{'b': [4, 5]}})
df3 = pd.DataFrame({{'c': [6]}})
df4 = pd.DataFrame({{'d': [7]}})
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    marker = str(tmp_path_factory.mktemp("carried-marker") / "called.txt")
    k = start_kernel(tmp_path_factory.mktemp("carried"), python=kernel_python(request.param))
    run = k.connection.run_cell(SETUP.format(marker=marker), timeout=120)
    assert run.status == "ok", run
    yield k.connection, marker
    k.shutdown()


def _options(confinement: str) -> dict:
    return {} if confinement == "os" else {"sandbox": SandboxOptions(confinement="portable")}


@pytest.mark.parametrize("confinement", ["os", "portable"])
def test_a_standard_library_patch_is_not_carried_into_the_record(kernel, confinement):
    v = speculate_unmarked(kernel, "x = json\n1/0", **_options(confinement))
    assert v.mode in ("transplant", "portable"), (v.mode, v.reason)
    assert v.verdict == "crash" and v.ename == "ZeroDivisionError", (v.verdict, v.ename, v.evalue, v.reason)
    assert v.certain is True, v.how()


@pytest.mark.parametrize("confinement", ["os", "portable"])
def test_a_carried_method_reads_the_names_the_cell_binds(kernel, confinement):
    v = speculate_unmarked(kernel, "factor = 0\nprint(df.double()['a'].tolist())", **_options(confinement))
    assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
    assert v.stdout.strip() == "[0, 0, 0]", v.stdout  # (the kernel's answer; the stale copy said [2, 4, 6])


@pytest.mark.parametrize("confinement", ["os", "portable"])
def test_a_carried_setstate_never_runs_in_a_session_load(kernel, confinement):
    conn = kernel[0]
    with Untouched(conn) as watch:
        with open_session(conn, budget_s=30, **_options(confinement)) as sb:
            assert type(sb).__name__ != "SandboxSession", type(sb)  # (a copy's session, not a fork's)
            v = sb.run("a = len(df)")
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            v = sb.run("b = len(df2)\nprint(os.environ.get('CRANE_R1_SETSTATE'), pd.DataFrame.__setstate__.__module__,"
                       " df.double()['a'].tolist())")
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            # no load ran the notebook's __setstate__, and it is on the class again after the load
            assert v.stdout.split() == ["None", "__main__", "[2,", "4,", "6]"], v.stdout
            # a method a command replaced is the session's own: a later load leaves it
            v = sb.run("pd.DataFrame.double = lambda self: 'own'")
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            v = sb.run("c = len(df3)\nprint(df.double(), c)")
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            assert v.stdout.split() == ["own", "1"], v.stdout
    assert watch.unchanged, (watch.outputs, watch.changes())


def test_a_command_s_setstate_runs_in_a_portable_load_under_the_guard(kernel):
    conn = kernel[0]
    with Untouched(conn) as watch:
        with open_session(conn, budget_s=30, **_options("portable")) as sb:
            v = sb.run("def own(self, state):\n"
                       "    os.environ['CRANE_R1_OWN'] = ','.join(sorted(sys._getframe(1).f_locals))\n"
                       "    return _setstate(self, state)\n"
                       "pd.DataFrame.__setstate__ = own")
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            v = sb.run("d = len(df4)\nprint(os.environ.get('CRANE_R1_OWN'))")
    assert watch.unchanged, (watch.outputs, watch.changes())
    # (before: the load ran it unguarded, and it read `_command`'s locals: ctx, audit, portable)
    assert v.verdict == "unavailable" and "sys._getframe is refused" in (v.reason or ""), (v.verdict, v.stdout, v.reason)
