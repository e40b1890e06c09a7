"""CRANE's frames and functions out of the cell's reach (worker/frames.py): `f_back`, `f_locals`, `f_globals`,
`__globals__`, `__closure__` (none of which CPython audits).

- In a fresh interpreter of each supported Python (3.11, and 3.12/3.13 where the machine has them), frames.py is
  built as the worker builds it (its source run in one namespace, which is then "CRANE's"): user code reading
  those attributes of CRANE's frames and functions is refused (at the first step), library code on its behalf
  (`traceback.walk_stack`, `inspect.getclosurevars`, `logging`, `inspect.getargvalues`) gets nothing of CRANE's,
  CRANE's own reads and every read while the guard is off get the real values, and the user's own frames and
  functions read as always.
- End to end (`speculate`, IPython 8 and 9 kernels, `--sandbox guard` and `portable`): the walks from the cell to
  CRANE's state (a guard wrapper's `__globals__`/`__closure__`, a trampoline's constant, `f_back` from a frame
  logging hands back, a CRANE frame's or the bootstrap's `f_locals` from `traceback.walk_stack`, `import
  _crane_sandbox`) are `blocked` or find nothing, and nothing outside changes; honest code (tracebacks, logging's
  `stack_info`, `traceback.print_stack`, pandas' `find_stack_level` warnings, `typing.get_type_hints`, inspect
  of the user's own closures) runs as in the kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash

FRAMES = Path(__file__).resolve().parents[2] / "server" / "crane" / "sandbox" / "worker" / "frames.py"
ROOT = Path(__file__).resolve().parents[2]

UNIT = r"""
import inspect, json, logging, sys, traceback
crane = {"__name__": "_crane_sandbox"}
exec(compile(open(sys.argv[1]).read(), "<crane-kernel/worker/frames.py>", "exec"), crane)
exec(compile('''
STATE = {"guard": "on"}
def wrapper(x, _secret=STATE):
    return x
def closure():
    state = STATE
    def inner():
        return state
    return inner
def run_cell(cell):
    ctx = STATE
    return cell()
class Guard:
    def hook(self):
        return STATE
GUARD = Guard()
def own_walk():
    f = sys._getframe()
    out = []
    while f is not None:
        out.append((f.f_code.co_name, len(f.f_locals)))
        f = f.f_back
    return out
''', "<crane-kernel/worker/main.py>", "exec"), crane)
crane["sys"] = sys
on = {"active": True}
refused = []
class Refused(Exception):
    pass
def refuse(what):
    refused.append(what)
    raise Refused(what)
is_user = lambda code: code.co_filename == "<user>"
installed = crane["hide_crane_objects"](crane, lambda: on["active"], is_user, refuse)
out = {"installed": installed}
user = {"traceback": traceback, "inspect": inspect, "logging": logging, "sys": sys, "crane": crane,
        "Refused": Refused}
exec(compile('''
def attempt(name, f):
    try:
        out[name] = repr(f())[:200]
    except Refused as e:
        out[name] = "refused: " + str(e)
def cell():
    me = sys._getframe()
    attempt("f_back into CRANE", lambda: me.f_back)
    attempt("getattr f_back", lambda: getattr(me, "f_" + "back"))
    stack = [f for f, _ in traceback.walk_stack(me)]
    out["walk names"] = [f.f_code.co_name for f in stack]
    crane_frame = next(f for f in stack if f.f_code.co_name == "run_cell")
    attempt("f_locals of CRANE", lambda: crane_frame.f_locals)
    attempt("f_globals of CRANE", lambda: crane_frame.f_globals)
    attempt("argvalues (library)", lambda: inspect.getargvalues(crane_frame).locals)
    bottom = stack[-1]
    attempt("f_locals of the bottom", lambda: bottom.f_locals)
    attempt("own frame locals", lambda: sorted(me.f_locals))
    attempt("own f_globals", lambda: me.f_globals is globals())
    w, c = crane["wrapper"], crane["closure"]()
    attempt("__globals__", lambda: w.__globals__)
    attempt("__closure__", lambda: c.__closure__)
    attempt("getclosurevars (library)", lambda: inspect.getclosurevars(c))
    attempt("__defaults__ of a wrapper", lambda: w.__defaults__)
    y = 5
    def mine():
        return y
    attempt("own __closure__", lambda: [x.cell_contents for x in mine.__closure__])
    attempt("own __globals__", lambda: mine.__globals__ is globals())
    attempt("CRANE walks itself", lambda: crane["own_walk"]()[-1])
    hook = crane["GUARD"].hook
    attempt("a CRANE method's __self__", lambda: hook.__self__)
    class Mine:
        def m(self):
            return 1
    attempt("own method's __self__", lambda: type(Mine().m.__self__).__name__)
    return "cell ran"
''', "<user>", "exec"), user)
user["out"] = out
out["result"] = crane["run_cell"](user["cell"])
on["active"] = False
out["off: __globals__"] = crane["wrapper"].__globals__ is crane
out["refused"] = refused
print(json.dumps(out))
"""


def _interpreters() -> list[str]:
    found = [sys.executable]
    for v in ("312", "313"):
        p = ROOT / "build" / f"kernel-py{v}" / "bin" / "python"
        if p.exists():
            found.append(str(p))
    return found


@pytest.mark.parametrize("python", _interpreters(), ids=lambda p: Path(p).parts[-3] if "build" in p else "daemon")
def test_crane_frames_and_functions_are_hidden_from_user_code(python):
    res = subprocess.run([python, "-c", UNIT, str(FRAMES)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["installed"] == ["frame.f_back", "frame.f_locals", "frame.f_globals", "function.__globals__",
                                "function.__closure__", "method.__self__"]
    for what in ("f_back into CRANE", "getattr f_back", "f_locals of CRANE", "f_globals of CRANE",
                 "f_locals of the bottom", "__globals__", "__closure__", "a CRANE method's __self__"):
        assert out[what].startswith("refused: reading a"), (what, out[what])
    assert "run_cell" in out["walk names"]  # a library's walk keeps its depth ...
    assert out["argvalues (library)"] == "{}" and "STATE" not in out["getclosurevars (library)"], out  # ... not its state
    assert "'guard'" not in out["getclosurevars (library)"], out
    assert out["own frame locals"].startswith("[") and out["own f_globals"] == "True", out
    assert out["own __closure__"] == "[5]" and out["own __globals__"] == "True", out
    assert out["CRANE walks itself"].startswith("("), out  # CRANE's own reads are real
    assert out["own method's __self__"] == "'Mine'", out
    assert out["result"] == "cell ran" and out["off: __globals__"] is True, out


SETUP = "import os\nx = 41\n"
ATTACKS = {
    "a wrapper's __globals__": "import os\ng = os.setpriority.__globals__\n"
                               "g['_FR_POLICY']['active'] = lambda: False\nos.system('touch @OUTSIDE@/g1')",
    "a wrapper's __closure__": "import os\nguard = [c.cell_contents for c in os.setpriority.__closure__]\n"
                               "[g.uninstall() for g in guard if hasattr(g, 'uninstall')]\n"
                               "os.system('touch @OUTSIDE@/g2')",
    "f_back from logging's frame": "import logging\nf = logging.currentframe()\nwhile f is not None:\n"
                                   "    c = f.f_locals.get('ctx')\n    f = f.f_back\n"
                                   "os.system('touch @OUTSIDE@/g3')",
    "f_locals through walk_stack": "import traceback\nfor f, _ in traceback.walk_stack(None):\n"
                                   "    st = getattr(f.f_locals.get('ctx'), 'audit_state', None)\n"
                                   "    if isinstance(st, dict):\n        st['own'] = st['bypass'] = True\n"
                                   "os.system('touch @OUTSIDE@/g4')",
    "the bootstrap's locals": "import traceback\nsb = [f for f, _ in traceback.walk_stack(None)][-2].f_locals['sb']\n"
                              "sb._FR_POLICY['active'] = lambda: False\nos.system('touch @OUTSIDE@/g5')",
    "the profile hook's __self__": "import sys, threading\nh = sys.getprofile() or threading.getprofile()\n"
                                   "h.__self__.uninstall()\nos.system('touch @OUTSIDE@/g7')",
    "f_globals through walk_stack": "import traceback\nfor f, _ in traceback.walk_stack(None):\n"
                                    "    g = f.f_globals.get('_FR_POLICY')\n"
                                    "    if g:\n        g['active'] = lambda: False\n"
                                    "os.system('touch @OUTSIDE@/g6')",
}
HONEST = """
import inspect, logging, sys, traceback, typing, warnings
import pandas as pd
logging.basicConfig()
logging.getLogger('x').warning('hi', stack_info=True)
def where():
    traceback.print_stack(limit=3)
    return len(traceback.extract_stack())
depth = where()
warnings.simplefilter('always')
df = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter('always')
    df.groupby('a').apply(lambda g: g)  # pandas warns through find_stack_level (frames walked)
y = 3
def h(a: int) -> int:
    return a + y
hints = typing.get_type_hints(h)
cv = inspect.getclosurevars(h)
try:
    int('z')
except ValueError:
    text = traceback.format_exc()
print('ok', depth > 1, hints['a'] is int, cv.globals.get('y') == 3, 'int' in text, h.__globals__ is globals())
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kf(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


BOTH = [pytest.param(SandboxOptions(confinement="guard"), id="guard"),
        pytest.param(SandboxOptions(confinement="portable"), id="portable")]


def _run(kf, src, sandbox):
    conn = kf["conn"]
    before = (tree_hash(kf["work"]), tree_hash(kf["outside"]))
    with Untouched(conn) as watch:
        v = speculate(conn, src.replace("@OUTSIDE@", str(kf["outside"])), 60.0, sandbox=sandbox)
    assert watch.unchanged, (watch.changes(), v)
    assert conn.evaluate("x") == 41
    assert (tree_hash(kf["work"]), tree_hash(kf["outside"])) == before, v
    return v


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_cell_cannot_walk_to_cranes_state(kf, attack, sandbox):
    if sandbox.confinement == "portable" and attack not in ("a wrapper's __globals__", "the bootstrap's locals"):
        pytest.skip("the same refusal as under the guard (one pair is enough here: the machine has 2 cores)")
    if attack == "the profile hook's __self__" and kf["conn"].evaluate("__import__('sys').version_info >= (3, 12)"):
        pytest.skip("the guard has no profile hook from 3.12 (sys.monitoring)")
    v = _run(kf, ATTACKS[attack], sandbox)
    assert v.verdict == "blocked" and v.refusal is not None and v.refusal.layer == "call guard", v
    assert v.refusal.call.startswith("reading a"), v.refusal  # the walk's first step, not the program after it
    assert os.listdir(kf["outside"]) == ["target.txt"], v


@pytest.mark.parametrize("sandbox", BOTH)
def test_the_worker_module_is_not_importable_from_the_cell(kf, sandbox):
    v = _run(kf, "import sys\nprint(sys.modules.get('_crane_sandbox'))\nimport _crane_sandbox", sandbox)
    assert v.verdict == "crash" and v.ename == "ModuleNotFoundError" and v.stdout.strip() == "None", v


@pytest.mark.parametrize("sandbox", BOTH)
def test_honest_stack_walks_tracebacks_and_introspection_still_work(kf, sandbox):
    v = _run(kf, HONEST, sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-1:]) == ("no-crash", ["ok True True True True True"]), v
    assert "hi" in v.stderr and "Stack (most recent call last)" in v.stderr, v.stderr
