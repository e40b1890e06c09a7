"""Hooks and frame locals on the copy paths (issue 41): the transplant worker's one-shot epilogue and its sessions'
command loop are out of the cell's reach, as the one-shot fork child's is (tests/sandbox/test_sealed_state.py).

Before, the worker's `_run` and `_session` kept what the check after the cell compares in frame locals (`before`,
`fence`, the reply writer, the command reader that seals) and were traced while a cell's exception went up through
them. A cell could then
- set a tracer on CRANE's frames that rewrote `before` (3.11/3.12 write a trace function's `f_locals` back) after
  rebinding the record writer and the sealed wait: a raising cell came back `no-crash` (one-shot, transplant);
- jump (`frame.f_lineno`, from a line event) from the `except` branch that makes a raising cell's record into the
  clean branch: `no-crash`, sealed clean (one-shot, and every session command: `kernel/session.run_command`);
- on 3.13 (PEP 667) write the session loop's locals directly: the reply writer and the command reader that sends
  the seal's code in (`no-crash` under the clean code).
Now CRANE's part of the worker runs untraced (`kernel/common._untraced`), the cell's statements through
`sys.call_tracing`, and the check after the cell reads only the constants of a copy of a template made for the run
or the command (`worker/main._fenced_copy`). Honest cells keep their verdicts, and a cell's own profiler and tracer
still span its statements."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session
from crane.sandbox.transplant import transplant

from ..kernel_envs import python_kernel
from .copy_sessions import SESSIONS, copy_path_kernel
from .test_sealed_state import HOOKED, PROFILED, WRITE

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

Run = Callable[[Any, str, float], Any]
ONE_SHOT: dict[str, Run] = {
    "transplant-blocking": lambda conn, src, budget: transplant(conn, src, budget, layer="blocking"),
    "transplant-layered": lambda conn, src, budget: transplant(conn, src, budget),
    "portable-head": lambda conn, src, budget: speculate(conn, src, budget,
                                                         sandbox=SandboxOptions(confinement="portable")),
}

# a line tracer on CRANE's frame `FN` that, once the cell's exception has reached that frame, jumps from the
# `except` branch's `MARK` line (the first of its two) to the clean branch's (the last): a raising cell's record made
# as a clean one, sealed clean
JUMP = """
import sys, dis
f = sys._getframe()
while f is not None and f.f_code.co_name != FN:
    f = f.f_back
target = f
lines = sorted({i.positions.lineno for i in dis.get_instructions(target.f_code) if i.argval == MARK})
done = []
def _tr(frame, event, arg):
    if frame is target and event == 'line' and not done and frame.f_lineno == lines[0]:
        done.append(1)
        frame.f_lineno = lines[-1]
    return _tr
target.f_trace = _tr
sys.settrace(_tr)
raise ValueError('real')
"""


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


def _one_shot(conn: Any, path: str, source: str) -> Any:
    with Untouched(conn) as watch:
        v = ONE_SHOT[path](conn, source, 60.0)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.mode == ("portable" if path.startswith("portable") else "transplant"), v
    return v


@pytest.mark.parametrize("hook", ["settrace", "setprofile"])
@pytest.mark.parametrize("path", list(ONE_SHOT))
def test_a_hook_rewriting_the_workers_locals_gets_no_record_of_its_own(conn, path, hook):
    v = _one_shot(conn, path, f"HOOK, EVENT = {hook!r}, None\n" + HOOKED)
    assert v.verdict != "no-crash", v
    if path != "portable-head":  # (the portable guard refuses the frame walk or the hook: its own block)
        assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v


@pytest.mark.parametrize("path", list(ONE_SHOT))
def test_a_jump_into_the_workers_clean_branch_gets_no_record_of_its_own(conn, path):
    v = _one_shot(conn, path, "FN, MARK = '_run', '_cell_record'\n" + JUMP)
    assert v.verdict != "no-crash", v
    if path != "portable-head":
        assert (v.verdict, v.ename) == ("crash", "ValueError"), v  # (the jump never happens)


@pytest.mark.parametrize("path", list(ONE_SHOT))
def test_honest_cells_on_the_copy_paths_keep_their_verdicts(conn, path):
    v = _one_shot(conn, path, "y = base + 1")
    assert v.verdict == "no-crash", v
    v = _one_shot(conn, path, "{}['k']")
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v


def test_a_cells_own_profiler_and_tracer_span_its_statements_in_the_worker(conn):
    v = _one_shot(conn, "transplant-blocking", PROFILED)
    assert v.verdict == "no-crash" and v.stdout == "profiled\n", v


# -- sessions: the worker's command loop (worker/main._session) ---------------------------------------------------
@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_jump_into_a_session_commands_clean_branch_gets_no_reply_of_its_own(conn, kind):
    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                v = sb.run("FN, MARK = 'run_command', '_hooks_off'\n" + JUMP)
                assert v.verdict != "no-crash", v
                if kind == "transplant":
                    assert (v.verdict, v.ename) == ("crash", "ValueError"), v
                v = sb.run("{}['k']")
                assert (v.verdict, v.ename) == ("crash", "KeyError"), v
                v = sb.run("y = 1")
                assert v.verdict == "no-crash", v
        assert watch.unchanged, (watch.outputs, watch.changes())


# a clean command (kept) leaves a tracer that, from the next command's code, climbs to CRANE's `run_command` frame and
# jumps there as JUMP does: the next command's crash (the verifier's own cell) came back no-crash
LATER = """
import sys, dis
def _tr(frame, event, arg):
    if event == 'call' and frame.f_code.co_filename == '<crane-sandbox-cell>':
        f = frame
        while f is not None and f.f_code.co_name != 'run_command':
            f = f.f_back
        if f is not None and f.f_trace is None:
            lines = sorted({i.positions.lineno for i in dis.get_instructions(f.f_code) if i.argval == '_hooks_off'})
            def _jump(fr, ev, a):
                if ev == 'line' and fr.f_lineno == lines[0]:
                    fr.f_lineno = lines[-1]
                return _jump
            f.f_trace = _jump
    return _tr
sys.settrace(_tr)
"""


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_tracer_left_by_a_kept_command_forges_no_later_verdict(conn, kind):
    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                v = sb.run(LATER)
                if kind == "transplant":
                    assert v.verdict == "no-crash", v
                v = sb.run("def g():\n    return {}['k']\ng()")
                assert (v.verdict, v.ename) == ("crash", "KeyError"), v
        assert watch.unchanged, (watch.outputs, watch.changes())


def test_a_session_commands_own_profiler_spans_its_statements(conn):
    with copy_path_kernel(conn, "transplant"):
        with open_session(conn, budget_s=30) as sb:
            v = sb.run(PROFILED)
            assert v.verdict == "no-crash", v
            assert sb.inspect("1 + 1") == "2"


# -- 3.13 (PEP 667): any code writes a frame's locals through `f_locals` ------------------------------------------
# the command writes the session loop's locals: the reply writer (every crash reply made clean) and the command
# reader that sends the seal's code in (always the clean code); `before` emptied so the fence's check passes
SESSION_WRITE = """
import sys
f = sys._getframe()
while f is not None and f.f_code.co_name != '_session':
    f = f.f_back
L = f.f_locals
_real_commands, _real_send = L['commands'], L['send']
class _Commands:
    def send(self, value):
        return _real_commands.send((1, value[1]))
    def __next__(self):
        return next(_real_commands)
def _forger(fd, obj):
    if type(obj) is dict and obj.get('verdict') == 'crash':
        obj.update(verdict='no-crash', ename=None, evalue=None, traceback=[], line=None)
    return _real_send(fd, obj)
L['commands'], L['send'], L['before'] = _Commands(), _forger, frozenset()
raise ValueError('real')
"""


@pytest.fixture(scope="module")
def py313(workdir):
    kernel = start_kernel(workdir, python=python_kernel("3.13"))
    assert kernel.connection.run_cell("base = 1", timeout=120).status == "ok"
    yield kernel.connection
    kernel.shutdown()


@pytest.mark.parametrize("hook, cell", [("write", WRITE), ("monitoring", HOOKED)])
def test_local_writes_and_monitoring_in_the_workers_frames_get_no_record_of_their_own_on_313(py313, hook, cell):
    v = _one_shot(py313, "transplant-blocking", f"HOOK, EVENT = {hook!r}, None\n" + cell)
    assert v.verdict == "blocked" and "changed CRANE's own code" in (v.reason or ""), v


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_local_writes_in_the_session_loop_get_no_reply_of_their_own_on_313(py313, kind):
    with copy_path_kernel(py313, kind):
        with Untouched(py313) as watch:
            with open_session(py313, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                v = sb.run(SESSION_WRITE)
                assert v.verdict != "no-crash", v
                v = sb.run("{}['k']")
                assert (v.verdict, v.ename) == ("crash", "KeyError"), v
        assert watch.unchanged, (watch.outputs, watch.changes())



# -- the sealed read's ctypes objects (worker/main._serve_sealed, _copy_cell_then_seal) ----------------------------
# Before, the session's sealed read filled a ctypes buffer read back through its cached `c_char * 65536` type's `raw`,
# and every sealed wait called libc's `syscall` through its function pointer's class (`CDLL._FuncPtr`): both are
# Python-level classes a command can patch; an `errcheck` set on the pointer ran after each read. A command that
# rebound `raw` or `__call__` there, or set `errcheck`, rewrote every later command the worker read (a certain
# KeyError came back no-crash) while the seal stayed real. Now the read fills a pinned bytearray (a C type), the
# pointer is called through the C base's own slot wrapper, taken before any command, and before each call its class,
# errcheck, restype and argtypes are compared by identity (the C base's descriptors) with what was set up: a command
# that changed one ends the worker (_TAMPERED).
_REWRITE = r'''
import ctypes, gc, json
def _rewrite(data):
    out = []
    for line in data.split(b"\n"):
        try:
            cmd = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if isinstance(cmd, dict) and cmd.get("op") == "run":
            cmd["source"] = "None"
        out.append(json.dumps(cmd).encode())
    return b"\n".join(out)
'''
RAW = _REWRITE + r'''
T = ctypes.c_char * (1 << 16)
_real_raw = T.raw
T.raw = property(lambda self: _rewrite(_real_raw.__get__(self)))
'''
CALL = _REWRITE + r'''
_real_call = ctypes._CFuncPtr.__call__
def _call(self, *a):
    got = _real_call(self, *a)
    if len(a) > 3 and a[0] == 0 and isinstance(got, int) and got > 0:  # a read(2) through syscall
        at = a[2] if isinstance(a[2], int) else ctypes.addressof(a[2])
        new = _rewrite(ctypes.string_at(at, got))
        ctypes.memmove(at, new, len(new))
        return len(new)
    return got
for _cls in [o for o in gc.get_objects() if isinstance(o, type) and issubclass(o, ctypes._CFuncPtr)
             and o is not ctypes._CFuncPtr]:
    _cls.__call__ = _call
'''

ERRCHECK = _REWRITE + r'''
def _check(got, fn, args):  # (a pointer's errcheck runs after its call, C's result in hand)
    if len(args) > 3 and args[0] == 0 and got > 0:
        at = args[2] if isinstance(args[2], int) else ctypes.addressof(args[2])
        new = _rewrite(ctypes.string_at(at, got))
        ctypes.memmove(at, new, len(new))
        return len(new)
    return got
for _fn in [o for o in gc.get_objects() if isinstance(o, ctypes._CFuncPtr) and getattr(o, "__name__", "") == "syscall"]:
    _fn.errcheck = _check
'''
PATCHES = {"raw": RAW, "call": CALL, "errcheck": ERRCHECK}


@pytest.mark.parametrize("patch", list(PATCHES))
@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_command_patching_the_sealed_reads_ctypes_classes_rewrites_no_later_command(conn, kind, patch):
    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                v = sb.run(PATCHES[patch])
                if kind == "transplant" and patch != "errcheck":
                    assert v.verdict == "no-crash", v
                v = sb.run("{}['k']")  # (after an errcheck set: the worker ended, the session restored)
                assert (v.verdict, v.ename) == ("crash", "KeyError"), v
                v = sb.run("1/0")
                assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
        assert watch.unchanged, (watch.outputs, watch.changes())


# a cell that raises after patching the function pointer's class so that the sealed wait seals clean (code 1)
SEAL_CLEAN = r'''
import ctypes, gc
_real_call = ctypes._CFuncPtr.__call__
def _call(self, *a):
    if len(a) == 7 and a[0] == 0 and a[4] == 2:  # the sealed wait, the raised code: sealed clean instead
        a = a[:4] + (1,) + a[5:]
    return _real_call(self, *a)
for _cls in [o for o in gc.get_objects() if isinstance(o, type) and issubclass(o, ctypes._CFuncPtr)
             and o is not ctypes._CFuncPtr]:
    _cls.__call__ = _call
{}['k']
'''


@pytest.mark.parametrize("path", ["transplant-blocking", "transplant-layered"])
def test_a_cell_patching_the_sealed_waits_pointer_class_changes_no_seal(conn, path):
    v = _one_shot(conn, path, SEAL_CLEAN)
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
