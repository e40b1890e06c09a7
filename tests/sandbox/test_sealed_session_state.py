"""A fork session's reply is the command's own whatever the command does to CRANE's frames (issue 41), on IPython 8
and 9 kernels and the 3.12/3.13 kernels.

A fork session's command process kept what it checks and seals with in its frame's locals (the check, the record
writer, the sealed read) and was traced until its epilogue turned the hooks off; its check read the session's watch
(`common._Watch`) through attributes any command could change. A command could then forge its own reply or a later
command's:
- a tracer on CRANE's frames (3.11/3.12 write a trace function's `f_locals` back) that kept itself on past the
  epilogue (the functions `_hooks_off` had bound rewritten in its frame) and then made a raising cell's record clean
  and its raised flag false; the same kept by a clean command for the next one;
- on 3.13 (PEP 667) any code writing a CRANE frame's locals (`f_locals`): the record writer and the sealed read
  replaced by wrappers; the same from a thread the cell leaves running, and from `sys.monitoring` callbacks;
- a clean command that empties the watch's lists (`watch.spaces = []`) and then rebinds the head's reading of later
  outcomes: kept as the session's state, every later crash came back `no-crash`.
Now every frame of CRANE's in a session runs untraced (`common._untraced`; the command's code through
`sys.call_tracing`), and what a command's process checks and seals with is in the code constants of a per-command
copy of a template (`session._fenced_command`), its check made from an immutable snapshot of the watch. Each
attack here forged a verdict before (see the parameters' notes)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import SandboxError, SandboxSession

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

# what the forgers share: every frame of CRANE's below the cell (`cranes`), CRANE's globals (`g`), and `_forge`, which
# makes a crash record (or an eval's error answer) clean
COMMON = '''
import sys, os, json
def _cranes():
    out, f = [], sys._getframe()
    while f is not None:
        if '_fence' in f.f_globals:
            out.append(f)
        f = f.f_back
    return out
cranes = _cranes()
g = cranes[0].f_globals
def _forge(d):
    if type(d) is dict:
        if d.get("verdict") == "crash":
            d.update(verdict="no-crash", ename=None, evalue=None, traceback=[], line=None, reason=None)
        if d.get("ok") is False:
            d.update(ok=True, value="'forged'", ename=None, evalue=None)
_noop = lambda *args: None
'''

# a tracer kept on past CRANE's epilogue: `sys.settrace`/`setprofile` made no-ops (the epilogue calls them), the
# functions `_hooks_off` bound rewritten in its frame; in every frame of CRANE's it then makes each record clean and
# each raised flag false (a trace function's f_locals are written back on 3.11/3.12; 3.13 writes them through)
TRACER = COMMON + '''
def _tr(frame, event, arg):
    f = frame.f_back
    while f is not None and f.f_trace is None:
        f.f_trace = _tr
        f = f.f_back
    if '_fence' in frame.f_globals:
        L = frame.f_locals
        for name in ('setprofile', 'settrace', 'gc_off'):
            if name in L:
                L[name] = _noop
        for name, value in list(L.items()):
            _forge(value)
            if name == 'raised' and value is True:
                L[name] = False
    return _tr
def _install():
    f = sys._getframe()
    while f is not None:
        f.f_trace = _tr
        f = f.f_back
    sys.settrace(_tr)
    sys.settrace = sys.setprofile = _noop
_install()
'''

# 3.13: the cell writes CRANE's frames' locals itself: every callable local is wrapped so that the records it is
# handed are made clean, and the sealed read it makes says "clean" (code 1) whatever code it was given
WRITER = COMMON + '''
def _wrap(fn):
    def wrapped(*args):
        for a in args:
            _forge(a)
        if len(args) == 7 and args[-1] == 0x4352414E45534541:  # (the sealed read: fd, ctl, buf, n, code, digest, magic)
            args = args[:4] + (1,) + args[5:]
        return fn(*args)
    return wrapped
def _write_locals():
    for f in cranes:
        L = f.f_locals
        for name, value in list(L.items()):
            if callable(value) and not isinstance(value, type):
                L[name] = _wrap(value)
            elif name == 'raised' and value is True:
                L[name] = False
'''

# a thread the cell leaves running, writing CRANE's frames (3.13) and making every record it finds clean (any Python)
LINGER = WRITER + '''
import threading
def _linger():
    import time
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            for f in cranes:
                for value in list(f.f_locals.values()):
                    _forge(value)
            if sys.version_info >= (3, 13):
                _write_locals()
        except Exception:
            pass
threading.Thread(target=_linger, daemon=True).start()
'''

# sys.monitoring (3.12+), kept on past the epilogue (which frees tools through `sys.monitoring`: made a no-op
# stand-in), on every event of CRANE's code objects: it makes every record clean and, on 3.13, writes the locals
MONITOR = WRITER + '''
m = sys.monitoring
E = m.events
every = E.PY_START | E.PY_RESUME | E.PY_RETURN | E.LINE | E.CALL | E.RAISE | E.EXCEPTION_HANDLED
def _mon(*args):
    f = sys._getframe(1)
    if '_fence' in f.f_globals:
        for value in list(f.f_locals.values()):
            _forge(value)
        if sys.version_info >= (3, 13):
            _write_locals()
for event in (E.PY_START, E.PY_RESUME, E.PY_RETURN, E.LINE, E.CALL, E.RAISE, E.EXCEPTION_HANDLED):
    m.register_callback(4, event, _mon)
try:
    m.use_tool_id(4, 'forger')
except ValueError:
    pass
m.set_events(4, every)
for c in cranes:
    try:
        m.set_local_events(4, c.f_code, every & ~(E.CALL | E.RAISE | E.EXCEPTION_HANDLED))
    except ValueError:
        pass
class _Quiet:
    events = m.events
    def __getattr__(self, name):
        return _noop
sys.monitoring = _Quiet()
'''

# the session's watch emptied through its attributes, then the head's reading of every later outcome rebound: each
# crash it reads is made clean, and its look at the seal says "clean"
UNWATCH = COMMON + '''
w = g['_BOUND']['watch']
for name, value in list(vars(w).items()):
    if isinstance(value, list):
        value.clear()
    elif isinstance(value, tuple):
        setattr(w, name, tuple(() for _ in value) if value and isinstance(value[0], tuple) else ())
_read = g['_read_at_hangup']
def _forged_read(fd):
    raw = _read(fd)
    out = []
    for line in raw.split(b"\\n"):
        if line.strip():
            d = json.loads(line)
            _forge(d)
            line = json.dumps(d).encode()
        out.append(line)
    return b"\\n".join(out)
g['_read_at_hangup'] = _forged_read
g['_seal_code'] = lambda pid, raw: 1
'''


def _follow_ups(sb) -> None:
    """The commands an attack aims at, after it: each comes back as it is."""
    v = sb.run("1 / 0")
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
    v = sb.run("{}['k']")
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    v = sb.run("z = base + 1")
    assert v.verdict == "no-crash", v
    assert sb.inspect("z") == "2"


def _raised_never_clean(sb, cell: str) -> None:
    v = sb.run(cell + "\n1 / 0")
    assert v.verdict != "no-crash", v
    assert v.verdict in ("crash", "blocked"), v
    if v.verdict == "crash":
        assert v.ename == "ZeroDivisionError", v


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


@pytest.fixture(scope="module")
def newer(newer_conn):
    return newer_conn


# before: the tracer forged the raising command's `no-crash` (IPython 8 and 9)
def test_a_tracer_on_cranes_frames_never_forges_its_commands_reply(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            _raised_never_clean(sb, TRACER)
            _follow_ups(sb)
    assert watch.unchanged, (watch.outputs, watch.changes())


# before: a clean command's tracer was kept with the session's state and forged the next command's `no-crash`
def test_a_tracer_a_kept_command_left_never_forges_a_later_reply(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            v = sb.run(TRACER + "kept = 1")
            assert v.verdict in ("no-crash", "blocked"), v
            _follow_ups(sb)
    assert watch.unchanged, (watch.outputs, watch.changes())


# before: the emptied watch let the rebinding through, the command was kept and every later crash came back clean
def test_a_command_that_empties_the_sessions_watch_is_never_kept(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            v = sb.run(UNWATCH + "kept = 1")
            assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v
            _follow_ups(sb)
            v = sb.run("kept")
            assert (v.verdict, v.ename) == ("crash", "NameError"), v
    assert watch.unchanged, (watch.outputs, watch.changes())


# a parked run's evals (the crash's process answers them): an expression that writes CRANE's frames or traces them
# never gets a raising expression's answer said `ok`
def test_an_eval_that_hooks_cranes_frames_never_forges_its_answer(conn):
    with SandboxSession.open(conn, budget_s=20) as sb:
        v = sb.run(TRACER.replace("_install()\n", "") + "1 / 0")
        assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
        with pytest.raises(SandboxError):
            sb.inspect("(_install(), 1 / 0)")
        assert sb.inspect("base + 1") == "2"
        _follow_ups(sb)


@pytest.mark.parametrize("attack", ["tracer", "monitoring", "write", "linger"])
def test_newer_pythons_hooks_and_local_writes_never_forge_a_reply(newer, attack):
    version, conn = newer
    if attack == "write" and version == "3.12":
        pytest.skip("a frame's locals are written through f_locals from 3.13 (PEP 667)")
    cell = {"tracer": TRACER, "monitoring": MONITOR, "write": WRITER + "_write_locals()\n", "linger": LINGER}[attack]
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            _raised_never_clean(sb, cell)
            _follow_ups(sb)
            if attack in ("tracer", "write"):  # kept by a clean command: never reaches a later reply
                v = sb.run(cell + "kept = 1")
                assert v.verdict in ("no-crash", "blocked"), v
                _follow_ups(sb)
    assert watch.unchanged, (watch.outputs, watch.changes())


# 3.13: an eval in a parked run's process writes CRANE's frames' locals: every callable local is wrapped so that, when
# CRANE calls it after the next eval, the answer's bytes in the caller's locals become a clean answer of its own and
# the seal's code clean (before: the next raising expression's answer came back `ok`, "'forged'")
ARM = COMMON + '''
def _answer_forger(fn):
    def wrapped(*args, **kwargs):
        L = sys._getframe(1).f_locals
        for name, value in list(L.items()):
            if type(value) is bytes and b'"ok": false' in value:
                d = json.loads(value)
                forged = (json.dumps({"ok": True, "value": "'forged'", "n": d.get("n")}) + "\\n").encode()
                L[name] = forged
                args = tuple(forged if a is value else a for a in args)
            if name == 'code' and value == 2:
                L[name] = 1
        return fn(*args, **kwargs)
    return wrapped
def _arm():
    for f in _cranes():
        L = f.f_locals
        for name, value in list(L.items()):
            if callable(value):
                L[name] = _answer_forger(value)
    return 1
'''


def test_an_eval_that_writes_cranes_frames_never_forges_a_later_answer(newer):
    version, conn = newer
    if version == "3.12":
        pytest.skip("a frame's locals are written through f_locals from 3.13 (PEP 667)")
    with SandboxSession.open(conn, budget_s=20) as sb:
        v = sb.run(ARM + "1 / 0")
        assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
        try:
            sb.inspect("_arm()")
        except SandboxError:
            pass
        with pytest.raises(SandboxError):
            sb.inspect("1 / 0")
        with pytest.raises(SandboxError):
            sb.inspect("undefined_name")
        assert sb.inspect("base + 1") == "2"
        _follow_ups(sb)


# a clean command that leaves code of its own where a kept run's process, serving as the next head, reads CRANE's
# context: `ctx.args` replaced by a dict whose lookups rebind the head's outcome reading (never rebinding a watched
# name in the command's own process); before, the run was kept and every later crash came back `no-crash`
CONTEXT = COMMON + '''
ctx = next(f.f_locals['ctx'] for f in cranes if type(f.f_locals.get('ctx')).__name__ == '_Ctx')
me = os.getpid()
class _Args(dict):
    def __getitem__(self, key):
        if os.getpid() == me and '_in_fork' in g and not getattr(g['_in_fork'], 'forged', False):
            real = g['_in_fork']
            def _in_fork(*args, **kwargs):
                out = real(*args, **kwargs)
                _forge(out[0])
                return out
            _in_fork.forged = True
            g['_in_fork'] = _in_fork
            # (and the watch's snapshot the head's next command processes check with, taken again)
            W = g['_BOUND']['watched']
            spaces, attrs, cells, shadow, ops, *rest = W[0]
            spaces = tuple((sp, keys, tuple(sp.get(k) for k in keys), len(sp) if size >= 0 else -1, names)
                           for sp, keys, objs, size, names in spaces)
            fns, names, _ = attrs
            W[0] = (spaces, (fns, names, tuple(getattr(f, n) for f, n in zip(fns, names))), cells, shadow, ops,
                    *rest)
        return dict.__getitem__(self, key)
ctx.args = _Args(ctx.args)
'''


def test_a_command_that_replaces_cranes_context_is_never_kept(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            v = sb.run(CONTEXT + "kept = 1")
            assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v
            _follow_ups(sb)
    assert watch.unchanged, (watch.outputs, watch.changes())


# a clean command that changes how the head's C function pointers (`session._BOUND["clone"]`: PyOS_BeforeFork, the
# AfterFork hooks, libc's syscall) are called: their heap class's `__call__` rebound (the reviewer's reproducer: the
# head, forking its next command's process, ran the code, which rebound `_in_fork` to make every later crash clean),
# or a pointer's `restype` made a Python callable, its `errcheck` set, its `argtypes` changed. Before, each was kept
# as the session's state and its code ran in the head at the next fork; now the head calls the C base's own call slot
# and the check covers each pointer's restype/argtypes/errcheck and the classes' namespaces: `blocked`, never kept.
FUNCPTR = COMMON + """
import ctypes
_mark = {mark!r}
def _note(name):
    try:
        with open(_mark, "a") as f:
            f.write(f"{{os.getpid()}} {{name}}\\n")
    except OSError:
        pass
def _evil(self, *a):
    name = getattr(self, '__name__', '?')
    _note(name)
    g = sys._getframe(1).f_globals
    real = getattr(g.get('_in_fork'), 'real', g.get('_in_fork'))
    if name == 'PyOS_BeforeFork':
        g['_in_fork'] = real  # (the child forked now inherits CRANE's own: its check passes)
    elif name == 'PyOS_AfterFork_Parent':
        def _in_fork(*args, **kw):
            out = real(*args, **kw)
            _forge(out[0])
            return out
        _in_fork.real = real
        g['_in_fork'] = _in_fork  # (the head's own, after the fork: every later crash made clean)
    return _base.__call__(self, *a)
api = ctypes.pythonapi
_base = [c for c in type(api.PyOS_BeforeFork).__mro__ if c.__name__ == 'CFuncPtr'][0]
"""
FUNCPTR_ATTACKS = {
    "call": "for _cls in {type(api.PyOS_BeforeFork), type(ctypes.PyDLL(None).syscall)}:\n    _cls.__call__ = _evil\n",
    "restype": "api.PyOS_AfterFork_Parent.restype = lambda r: (_note('restype'), r)[1]\n",
    "errcheck": "api.PyOS_BeforeFork.errcheck = lambda r, f, a: (_note('errcheck'), r)[1]\n",
    "argtypes": "api.PyOS_AfterFork_Child.argtypes = ()\n",
    "class-attribute": "type(api.PyOS_BeforeFork)._crane_head = _evil\n",
}


@pytest.mark.parametrize("attack", list(FUNCPTR_ATTACKS))
def test_a_command_that_changes_the_heads_c_calls_is_never_kept(conn, tmp_path, attack):
    mark = str(tmp_path / f"in-head-{attack}")
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            planted = sb.run(FUNCPTR.format(mark=mark) + FUNCPTR_ATTACKS[attack] + "kept = 1")
            _follow_ups(sb)  # (before: the first crash came back `no-crash`)
            assert sb.inspect(f"__import__('os').path.exists({mark!r})") == "False"  # nothing of it ran in the head
            v = sb.run("kept")
            assert (v.verdict, v.ename) == ("crash", "NameError"), v
            assert planted.verdict == "blocked" and "changed CRANE's own code" in (planted.reason or ""), planted
    assert watch.unchanged, (watch.outputs, watch.changes())
