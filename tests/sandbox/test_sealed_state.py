"""CRANE's seal state is not the cell's to change (issue 41, part B), on IPython 8 and 9 kernels.

What the seal names and what stops a session command's hooks were held in mutable module dicts the fence did not
watch (`kernel/common._SEALED`, `kernel/session._BOUND`): a cell that reached them (a frame walk to CRANE's globals)
could
- on a one-shot run, feed or replace the digest of what CRANE wrote on the channel, write a record of its own
  choosing there and close the channel: its record was then sealed (a crash with the cell's details; under a clean
  end, a crash the cell never had);
- in a fork session, replace the bound functions that stop its hooks before its outcome (its profile hook then
  rewrote the crash's details) or anything else bound there (a clean run doing so was kept as the session's state).
Now the seal's digest covers CRANE's own record bytes whatever the dict holds (a record CRANE could not deliver
never matches), and a command whose code changed `_BOUND` is `blocked` and never kept. Hooks and frame-local writes
in CRANE's frames, and a fence fooled by a builtin or a name the cell shadows or by code of the cell's it ran,
forged a raising cell's `no-crash` on the one-shot fork path (issue 41): now blocked (kernel/common._untraced,
kernel/run._fenced_run). Each test failed before (the profile and `return` variants and sys.monitoring on 3.12 came
back `blocked` for another reason, not forged)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxSession
from crane.sandbox.options import SandboxOptions

from .copy_sessions import SESSIONS, copy_path_kernel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

PATHS: dict[str, dict[str, Any]] = {"blocking": {"layer": "blocking"}, "layered": {"layer": "layered"},
                                    "portable": {"sandbox": SandboxOptions(confinement="portable")}}

# the cell finds CRANE's seal state, writes a crash record of its own on the channel, makes the seal name it (the
# digest object fed or replaced, or the bytes CRANE counts rebound) and closes the channel so CRANE's record goes
# nowhere; then it raises (`AFTER`) or ends clean
FORGER = """
import sys, os, json
f = sys._getframe()
while f is not None and '_SEALED' not in f.f_globals:
    f = f.f_back
S = f.f_globals['_SEALED']
fd = S['fd']
forged = (json.dumps({'verdict': 'crash', 'ename': 'ForgedError', 'evalue': 'the cell chose this', 'line': 1,
                      'traceback': [], 'elapsed_ms': 1.0}) + '\\n').encode()
os.write(fd, forged)
if 'h' in S:  # (the digest object of before)
    h = S['h']
    if MODE == 'replace':
        named = h.copy()
        named.update(forged)
        class _Digest:
            def update(self, data):
                pass
            def digest(self):
                return named.digest()
            def copy(self):
                return self
        S['h'] = _Digest()
    else:
        h.update(forged)
else:  # (the bytes CRANE counts)
    S['sent'] = S['sent'] + forged
os.close(fd)
"""


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


@pytest.mark.parametrize("after", ["raise ValueError('real')", "x = 1"])
@pytest.mark.parametrize("mode", ["replace", "feed"])
@pytest.mark.parametrize("path", list(PATHS))
def test_a_cell_that_rewrites_what_the_seal_names_gets_no_record_of_its_own(conn, path, mode, after):
    with Untouched(conn) as watch:
        v = speculate(conn, f"MODE = {mode!r}\n" + FORGER + after + "\n", 60.0, **PATHS[path])
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.ename != "ForgedError", v
    assert v.verdict == "blocked", v


# -- sessions: `_BOUND` (kernel/session), what stops a command's hooks and seals its outcome -------------------------
# a profile hook that gives every crash record or reply CRANE writes details of its own, kept on: CRANE's bound
# hook-stoppers replaced with no-ops (and `sys.setprofile`/`settrace`, which the epilogue also calls)
SWAP_STOPPERS = '''
import sys
def _hook(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_write_json":
        obj = frame.f_locals.get("obj")
        if type(obj) is dict and obj.get("verdict") == "crash":
            obj.update(ename="ForgedError", evalue="the cell chose this")
    return None
f = sys._getframe()
while f is not None and '_BOUND' not in f.f_globals:
    f = f.f_back
B = f.f_globals['_BOUND']
_noop = lambda *args: None
B['off'] = (_noop, _noop, _noop)
sys.setprofile(_hook)
sys.setprofile = sys.settrace = _noop
'''
# a clean run that replaces one bound function with a wrapper of its own (kept, it would run in every later command)
SWAP_SELECT = '''
import sys
f = sys._getframe()
while f is not None and '_BOUND' not in f.f_globals:
    f = f.f_back
B = f.f_globals['_BOUND']
_select = B['select']
B['select'] = lambda *args: _select(*args)
kept = 1
'''


def test_a_fork_session_command_that_replaces_what_stops_its_hooks_is_blocked(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            v = sb.run(SWAP_STOPPERS + "1 / 0")
            assert v.ename != "ForgedError", v
            assert v.verdict == "blocked", v
            v = sb.run(SWAP_SELECT)
            assert v.verdict == "blocked", v  # (never kept)
            v = sb.run("kept")
            assert (v.verdict, v.ename) == ("crash", "NameError"), v
            v = sb.run("{}['k']")
            assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    assert watch.unchanged, (watch.outputs, watch.changes())


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_copy_session_command_that_replaces_what_stops_its_hooks_is_blocked(conn, kind):
    from crane.sandbox.session import open_session

    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                v = sb.run(SWAP_STOPPERS + "1 / 0")
                assert v.ename != "ForgedError", v
                # (a worker whose command changed CRANE's state ends without a reply, as for any rebinding of CRANE's
                # code: its session is restored, the command reported as not finished; the portable guard may refuse
                # the frame walk first)
                assert v.verdict in ("blocked", "timeout"), v
                v = sb.run("{}['k']")
                assert (v.verdict, v.ename) == ("crash", "KeyError"), v
        assert watch.unchanged, (watch.outputs, watch.changes())


# -- the fence's snapshot: frozen (kernel/common._fence), the seal's codes literals where they are made -------------
# the cell finds the fence's snapshot in CRANE's frame and makes it match what it then rebinds: the record writer
# (every crash record becomes clean) and the raised code (made the clean one); before, the snapshot was a dict
BYPASS = """
import sys
f = sys._getframe()
while f is not None and '_fence' not in f.f_globals:
    f = f.f_back
g, frames = f.f_globals, []
while f is not None:
    frames.append(f)
    f = f.f_back
_real_write = g['_write_json']
def _forger(fd, obj):
    if type(obj) is dict and obj.get('verdict') == 'crash':
        obj.update(verdict='no-crash', ename=None, evalue=None, traceback=[], line=None)
    return _real_write(fd, obj)
g['_write_json'] = _forger
g['SEAL_RAISED'] = g['SEAL_CLEAN']
for f in frames:
    try:
        f.f_locals['before'].update(g['_fence']())
    except (AttributeError, KeyError):  # (frozen, or none there: nothing to update)
        pass
raise ValueError('real')
"""


def test_the_seal_codes_written_out_are_the_seals():
    from crane.sandbox.shared.seal import SEAL_CLEAN, SEAL_RAISED

    assert (SEAL_CLEAN, SEAL_RAISED) == (1, 2)  # (kernel/run, worker/main, kernel/session write them as literals)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_cell_that_updates_the_fences_snapshot_gets_no_record_of_its_own(conn, path):
    with Untouched(conn) as watch:
        v = speculate(conn, BYPASS, 60.0, **PATHS[path])
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.verdict != "no-crash", v
    if path != "portable":  # (the portable guard refuses the frame walk: its own block)
        assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v



# what the forging cells below share: the walk to a frame of CRANE's module (`f`), and a record writer that turns
# every crash record clean (`_forger`, over the real one, from CRANE's globals `g`)
_TO_CRANE = """import sys
f = sys._getframe()
while f is not None and '_fence' not in f.f_globals:
    f = f.f_back
"""
_FORGE = """_real_write, _real_wait = g['_write_json'], g['wait_sealed']
def _forger(fd, obj):
    if type(obj) is dict and obj.get('verdict') == 'crash':
        obj.update(verdict='no-crash', ename=None, evalue=None, traceback=[], line=None)
    return _real_write(fd, obj)
"""


# -- hooks and frame-local writes in CRANE's frames (issue 41): CRANE's part of a one-shot fork run is untraced
# (kernel/common._untraced: no trace, profile or sys.monitoring event fires in its frames, the cell runs through
# `sys.call_tracing`), and what the check after the cell reads is in the run's code constants (kernel/run._fenced_run)
# the cell rebinds the record writer (every crash record becomes clean) and the sealed wait (every seal says clean),
# then sets a hook (`HOOK`) that, on any event (`EVENT`, or all) in a frame of CRANE's, puts a fresh fence snapshot
# in every `before` local of CRANE's frames (3.11/3.12 write a trace function's f_locals back), then raises. Before,
# a tracer on `_child_run`'s frame fired at its `except` line and the run came back no-crash.
HOOKED = "\n" + _TO_CRANE + """g, cranes = f.f_globals, []
while f is not None:
    cranes.append(f)
    f = f.f_back
""" + _FORGE + """g['_write_json'] = _forger
g['wait_sealed'] = lambda code, digest, done=-1: _real_wait(1, digest, done)
def _forge_locals(frame):
    if frame.f_globals is g:
        for c in cranes:
            if 'before' in c.f_locals:
                c.f_locals['before'] = g['_fence']()
def _tr(frame, event, arg):
    if EVENT in (None, event):
        _forge_locals(frame)
    return _tr
if HOOK == 'settrace':
    for c in cranes:
        c.f_trace = _tr
    sys.settrace(_tr)
elif HOOK == 'setprofile':
    sys.setprofile(lambda frame, event, arg: _tr(frame, event, arg) and None)
elif HOOK == 'monitoring':  # (3.12+): every event, globally and on each of CRANE's code objects
    m = sys.monitoring
    E = m.events
    every = E.PY_START | E.PY_RESUME | E.PY_RETURN | E.PY_YIELD | E.LINE | E.RAISE | E.RERAISE | E.EXCEPTION_HANDLED \
        | E.PY_UNWIND | E.CALL | E.C_RETURN | E.C_RAISE
    def _mon(*args):
        _forge_locals(sys._getframe(1))
    for event in (E.PY_START, E.PY_RESUME, E.PY_RETURN, E.PY_YIELD, E.LINE, E.RAISE, E.RERAISE, E.EXCEPTION_HANDLED,
                  E.PY_UNWIND, E.CALL, E.C_RETURN, E.C_RAISE):
        m.register_callback(3, event, _mon)
    try:
        m.use_tool_id(3, 'forger')
    except ValueError:
        pass
    m.set_events(3, every)
    for c in cranes:
        m.set_local_events(3, c.f_code, every & ~(E.C_RETURN | E.C_RAISE))
raise ValueError('real')
"""


@pytest.mark.parametrize("hook, event", [("settrace", None), ("settrace", "line"), ("settrace", "exception"),
                                         ("settrace", "return"), ("setprofile", None), ("setprofile", "return")])
def test_a_hook_in_cranes_frames_gets_no_record_of_its_own(conn, hook, event):
    with Untouched(conn) as watch:
        v = speculate(conn, f"HOOK, EVENT = {hook!r}, {event!r}\n" + HOOKED, 60.0, layer="blocking")
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v


def test_a_tracer_on_cranes_frame_gets_no_record_of_its_own_layered(conn):
    with Untouched(conn) as watch:
        v = speculate(conn, "HOOK, EVENT = 'settrace', None\n" + HOOKED, 60.0, layer="layered")
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v


# the same on the other Pythons' kernels: sys.monitoring (3.12+); on 3.13 (PEP 667) any code writes a frame's locals
# through `f_locals`, no hook needed (`WRITE`: the cell puts the fresh snapshot in CRANE's `before` locals itself)
WRITE = HOOKED.replace("raise ValueError('real')", "for c in cranes:\n    _forge_locals(c)\nraise ValueError('real')")


@pytest.fixture(scope="module")
def newer(newer_conn):
    return newer_conn


@pytest.mark.parametrize("hook, cell", [("settrace", HOOKED), ("monitoring", HOOKED), ("write", WRITE)])
def test_hooks_and_local_writes_on_newer_pythons_get_no_record_of_their_own(newer, hook, cell):
    version, conn = newer
    if hook == "write" and version == "3.12":
        pytest.skip("a frame's locals are written through f_locals from 3.13 (PEP 667)")
    with Untouched(conn) as watch:
        v = speculate(conn, f"HOOK, EVENT = {hook!r}, None\n" + cell, 60.0, layer="blocking")
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v


# -- what the fence's own code runs with: no builtin or name of the cell's, no code of the cell's (kernel/common._fence)
# the cell rebinds the record writer and the sealed wait, then makes the fence's `frozenset` answer "nothing changed":
# in CRANE's private builtins, or as a global of CRANE's module shadowing the builtin
SHADOWED = "\n" + _TO_CRANE + """g = f.f_globals
""" + _FORGE + """class _Above:
    def __ge__(self, other):
        return True
    def __le__(self, other):
        return False
g['_write_json'] = _forger
g['wait_sealed'] = lambda code, digest, done=-1: _real_wait(1, digest, done)
space = g['__builtins__'] if WHERE == 'builtins' else g
space = space if type(space) is dict else vars(space)
space['frozenset'] = lambda items=(): _Above()
raise ValueError('real')
"""
# an object the cell adds to CRANE's module whose `__class__` (asked by an `isinstance`) rebinds the record writer and
# the sealed wait once the fence has listed the module's names
LATE = "\n" + _TO_CRANE + """g = f.f_globals
""" + _FORGE + """class _Late:
    @property
    def __class__(self):
        if sys._getframe(1).f_code.co_name == '_fence':
            g['_write_json'] = _forger
            g['wait_sealed'] = lambda code, digest, done=-1: _real_wait(1, digest, done)
        return _Late
g['zzz_late'] = _Late()
raise ValueError('real')
"""


@pytest.mark.parametrize("where", ["builtins", "module"])
def test_a_cell_that_shadows_what_the_fence_calls_gets_no_record_of_its_own(conn, where):
    with Untouched(conn) as watch:
        v = speculate(conn, f"WHERE = {where!r}\n" + SHADOWED, 60.0, layer="blocking")
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v


def test_no_code_of_the_cells_runs_in_the_fence(conn):
    with Untouched(conn) as watch:
        v = speculate(conn, LATE, 60.0, layer="blocking")
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert (v.verdict, v.ename) == ("crash", "ValueError"), v  # (its rebinding never ran)


# honest hooks the cell sets in one statement reach its next ones, as in the kernel (a profiler enabled, then the
# work, then its report: on 3.11 each statement in its own `sys.call_tracing` left the next one unprofiled and
# `pstats.Stats` raised a TypeError, a false crash)
PROFILED = """
import cProfile, pstats, sys
def work():
    return sum(i * i for i in range(2000))
pr = cProfile.Profile()
pr.enable()
work()
pr.disable()
st = pstats.Stats(pr)
assert any(k[2] == 'work' for k in st.stats), sorted(st.stats)[:5]
seen = []
def tr(frame, event, arg):
    if frame.f_code.co_name == 'work':
        seen.append(event)
    return tr
sys.settrace(tr)
work()
sys.settrace(None)
assert 'call' in seen and 'line' in seen and 'return' in seen, seen
print('profiled')
"""


def test_a_cells_own_profiler_and_tracer_span_its_statements(conn):
    with Untouched(conn) as watch:
        v = speculate(conn, PROFILED, 60.0, layer="blocking")
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.verdict == "no-crash" and v.stdout == "profiled\n", v


def test_a_cells_own_profiler_spans_its_statements_on_newer_pythons(newer):
    version, conn = newer
    v = speculate(conn, PROFILED, 60.0, layer="blocking")
    assert v.verdict == "no-crash" and v.stdout == "profiled\n", (version, v)
