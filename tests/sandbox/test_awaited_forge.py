"""A statement with a top-level `await` is `no-crash` only when its own code ended (issue 41, round 6).

CRANE ran such a statement as `loop.run_until_complete(coroutine)` on a fresh `asyncio.new_event_loop()`, inside a
`try/finally` that closed the loop, in a frame of CRANE's that the cell's statements run traced in. Its outcome was
asyncio's word, which the cell can change without any frame walk: a cell that patched `asyncio.new_event_loop`
(a library patch; in a kept session command, for every later one) had its raising statement come back `no-crash`
(layered, transplant and portable one-shot runs, fork and portable sessions); on 3.12 and 3.13 a line tracer set on
that frame jumped out of its `finally` back to the loop's head and the raising cell came back `no-crash` too. In the
kernel each of these cells is an error (ipykernel awaits the cell's code inside IPython's own handler).
Now (kernel/run._awaited) the statement's coroutine is awaited by a one-line wrapper of CRANE's and, after the loop,
the wrapper's own frame says whether it returned (its last instruction): a loop that returned for a statement that
did not end is `blocked`; the check runs in CRANE's untraced frames, and no frame of CRANE's that the cell's code
runs traced under has a handler. Each forging test failed before (`no-crash`)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxSession
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session

from .copy_sessions import copy_path_kernel
from .one_shot import each_kernel, one_shot  # noqa: F401 (each_kernel: the fixture conn)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's confinement is Linux's")

# the event loop a statement runs on made one that never runs it (as a careless patch might)
PATCH_LOOP = '''
import asyncio
class _Loop:
    def run_until_complete(self, coroutine):
        coroutine.close()
    def close(self):
        pass
asyncio.new_event_loop = _Loop
'''
RAISING = "(await asyncio.sleep(0), 1 / 0)\n"
# a line tracer on the frame that runs the cell's statements: once the statement's exception went through it, the
# next line there (its `finally`) jumps back to the head of the statements' loop (3.12+: a 3.11 kernel loops)
JUMP = '''
import sys, asyncio
seen = {}
def _tr(frame, event, arg):
    if frame.f_code.co_name == '_run_statements':
        if event == 'line' and 'head' not in seen:
            seen['head'] = frame.f_lineno
        elif event == 'exception':
            seen['raised'] = True
        elif event == 'line' and seen.pop('raised', False):
            frame.f_lineno = seen['head']
    return _tr
f = sys._getframe()
while f is not None and f.f_code.co_name != '_run_statements':
    f = f.f_back
if f is not None:
    f.f_trace = _tr
    sys.settrace(_tr)
'''
PLAIN = '''
import asyncio
async def work():
    await asyncio.sleep(0.01)
    return 2
x = await work()
assert x == 2
print('awaited')
'''
# (a cell's own tracer follows its awaited code, as in the kernel; the portable guard refuses a cell's tracer)
TRACED = '''
import asyncio, sys
seen = []
async def work():
    await asyncio.sleep(0.01)
    return 2
def tr(frame, event, arg):
    if frame.f_code.co_name == 'work':
        seen.append(event)
    return tr
sys.settrace(tr)
x = await work()
sys.settrace(None)
assert x == 2 and 'line' in seen and 'return' in seen, seen
print('awaited')
'''
PATHS = ["layered", "blocking", "portable"]
# an `async` cell as notebooks write them (issue 41: in the blocking confinement, which a fork session's commands run
# in, every awaited statement came back `blocked`: asyncio's event loop makes a socketpair for its self-pipe, and the
# profile refused every socketpair; now an AF_UNIX pair is allowed there, kernel/confine)
ASYNC_CELL = """
import asyncio
async def fetch(i):
    await asyncio.sleep(0.01)
    return i * 2
got = await asyncio.gather(*(fetch(i) for i in range(3)))
print(sum(got))
"""
ASYNC_RAISING = """
import asyncio
async def fetch(rows):
    await asyncio.sleep(0)
    return rows['missing']
await fetch({'present': 1})
"""


@pytest.mark.parametrize("path", PATHS)
def test_an_awaited_statement_on_a_patched_loop_is_never_clean(conn, path):
    v = one_shot(conn, path, PATCH_LOOP + RAISING)
    assert v.verdict == "blocked" and "awaited statement" in (v.reason or ""), v
    v = one_shot(conn, path, "import asyncio\n" + RAISING)
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
    for honest in (PLAIN, TRACED) if path == "layered" else (PLAIN,):
        v = one_shot(conn, path, honest)
        assert v.verdict == "no-crash" and v.stdout == "awaited\n", v


def _session_checks(sb: Any) -> None:
    v = sb.run(PATCH_LOOP + "kept = 1")
    assert v.verdict == "no-crash", v
    v = sb.run(RAISING)
    assert v.verdict == "blocked" and "awaited statement" in (v.reason or ""), v
    v = sb.run("{}['k']")
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    v = sb.run("y = kept + 1")
    assert v.verdict == "no-crash", v


def test_a_fork_session_command_patching_the_loop_forges_no_later_await(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=30) as sb:
            _session_checks(sb)
            v = sb.run("asyncio.new_event_loop = asyncio.events.new_event_loop\n" + PLAIN)  # (the patch undone)
            assert v.verdict == "no-crash" and v.stdout == "awaited\n", v
    assert watch.unchanged, (watch.outputs, watch.changes())


def test_an_honest_await_cell_gets_its_own_verdict_in_a_fork_session(conn):
    assert conn.run_cell(ASYNC_RAISING).status == "error"  # (the kernel's own word)
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=30) as sb:
            v = sb.run(ASYNC_CELL)
            assert (v.verdict, v.stdout) == ("no-crash", "6\n"), v
            v = sb.run(ASYNC_RAISING)
            assert (v.verdict, v.ename) == ("crash", "KeyError"), v
            v = sb.run("import asyncio\nawait asyncio.sleep(0)\nprint('slept')")
            assert (v.verdict, v.stdout) == ("no-crash", "slept\n"), v
            # what the blocking confinement refuses stays refused: a named socket, a connection
            v = sb.run("import socket\nsocket.socket(socket.AF_UNIX).connect('/run/crane-none.sock')")
            assert v.verdict == "blocked", v
            v = sb.run("import socket\na, b = socket.socketpair(socket.AF_INET)")
            assert v.verdict == "blocked", v
    assert watch.unchanged, (watch.outputs, watch.changes())


def test_a_portable_session_command_patching_the_loop_forges_no_later_await(conn):
    with copy_path_kernel(conn, "portable"):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SandboxOptions(confinement="portable")) as sb:
                _session_checks(sb)
                v = sb.run("asyncio.new_event_loop = asyncio.events.new_event_loop\n" + PLAIN)  # (the patch undone)
                assert v.verdict == "no-crash", v
        assert watch.unchanged, (watch.outputs, watch.changes())


@pytest.fixture(scope="module")
def newer(newer_conn):
    return newer_conn


def test_a_tracer_jumping_out_of_cranes_await_or_a_patched_loop_is_never_clean_on_newer_pythons(newer):
    version, conn = newer
    with Untouched(conn) as watch:
        v = speculate(conn, JUMP + RAISING, 60.0, layer="layered")
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), (version, v)
    v = speculate(conn, PATCH_LOOP + RAISING, 60.0, layer="layered")  # (the check's raise through a trace call)
    assert v.verdict == "blocked" and "awaited statement" in (v.reason or ""), (version, v)
    v = speculate(conn, TRACED, 60.0, layer="layered")
    assert v.verdict == "no-crash" and v.stdout == "awaited\n", (version, v)
