"""A copy-path session's command that ends its worker, or breaks what CRANE's worker runs on, gets its true verdict at
once (round 12, h7's findings; h9). On IPython 8 and 9 kernels, transplant (OS-confined) and portable sessions:

- a clean command registers `weakref.finalize(o, os._exit, n)`; the next, `del o`, ends the worker, as it would end
  the kernel. It came back `timeout` ("did not finish within the budget"): the session took the pipe's end for a run
  over budget. Now the session answers from the worker's exit, as the fork session's head does for a command process
  that ends so (crane.sandbox.shared.process_end): the same verdict, exception and message as the fork session gives for the
  same commands;
- a clean command that swaps a builtin exception class for one of its own (`builtins.KeyError`: the standard
  library's `except KeyError` in `signal.valid_signals` no longer catches; `builtins.StopIteration`: a
  `contextlib.contextmanager`'s exit raises) broke CRANE's worker after the command (it ended with 70) and came back
  `timeout`, then `crash DeadKernelError`. Now `blocked`, with the fork session's reason (kernel/session.run_command
  ends such a worker as one whose command rebound CRANE's code; worker/portable.guarded is no generator).

After each, the session's later commands start from a clean state (issue 41): a real KeyError is `crash KeyError`, an
honest cell is `no-crash` and its state is kept; an inspect right after the worker's end is served by a new worker.
The kernel and the files stay as they were. No sleep anywhere: every wait is the session's own."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import SandboxError, SandboxSession
from crane.sandbox.session import open_session
from crane.sandbox.transplant import LIKELY_CRASH

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .copy_sessions import SESSIONS, copy_path_kernel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork session runs on Linux")

SETUP = "import os\nx = 1\n"
BUDGET_S = 60.0  # (a session that waited out its budget would say `timeout`: the verdicts below would fail)
HONEST = "try:\n    {}['a']\nexcept KeyError:\n    pass\nz = x + 1"

ENDINGS = {
    "finalizer-exit-0": "import weakref, os\nclass O:\n    pass\no = O()\nweakref.finalize(o, os._exit, 0)",
    "finalizer-exit-5": "import weakref, os\nclass O:\n    pass\no = O()\nweakref.finalize(o, os._exit, 5)",
}
SWAPS = ["KeyError", "StopIteration", "ValueError"]


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def ek(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


def _answers(ek, kind: str, commands: list[str], after=None) -> list:
    """Each command's verdict in one session of `kind` ("fork", or a copy path's: `SESSIONS`), then `after(sb)`;
    the kernel and the files untouched."""
    conn = ek["conn"]
    before = (tree_hash(ek["work"]), tree_hash(ek["outside"]))
    out: list = []
    if kind == "fork":
        with Untouched(conn) as watch, SandboxSession.open(conn, budget_s=BUDGET_S) as sb:
            out = [sb.run(c) for c in commands]
    else:
        with copy_path_kernel(conn, kind), Untouched(conn) as watch:
            with open_session(conn, budget_s=BUDGET_S, sandbox=SESSIONS[kind]) as sb:
                assert sb.writer == "cell-process"  # (a transplant or portable session, not a fork)
                out = [sb.run(c) for c in commands]
                if after is not None:
                    after(sb)
        for v in out:
            assert v.mode == ("portable" if kind == "portable" else "transplant"), v
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert (tree_hash(ek["work"]), tree_hash(ek["outside"])) == before
    return out


def _said(v) -> tuple:
    """What a verdict says, a copy's "(the crash is only likely: ...)" after its reason left out (the fork's
    crash is certain; a copy's may not be: tests/sandbox/test_copy_session_certainty.py)."""
    return (v.verdict, v.ename, v.evalue, (v.reason or "").split(f" ({LIKELY_CRASH}:")[0] or None)


def _later_commands_start_clean(sb) -> None:
    """After the command the session did not keep: a new worker's answers (its state: the kept commands only)."""
    crash = sb.run("y = {}['a']")
    assert (crash.verdict, crash.ename) == ("crash", "KeyError"), crash
    honest = sb.run(HONEST)
    assert honest.verdict == "no-crash", honest
    assert sb.inspect("z") == "2"
    zero = sb.run("1/0")
    assert (zero.verdict, zero.ename) == ("crash", "ZeroDivisionError"), zero


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_command_that_ends_its_worker_is_the_crash_the_fork_session_reports(ek, kind, ending):
    commands = [ENDINGS[ending], "del o"]
    fork = _answers(ek, "fork", commands)
    assert [v.verdict for v in fork] == ["no-crash", "crash"], fork
    assert fork[1].ename == "DeadKernelError", fork[1]

    def after(sb) -> None:
        assert sb.inspect("x") == "1"  # (served at once by a new worker: the one that ended is not waited for)
        _later_commands_start_clean(sb)

    copy = _answers(ek, kind, commands, after)
    assert [_said(v) for v in copy] == [_said(v) for v in fork], (copy, fork)
    ended = copy[1]
    assert ended.integrity is not None and not ended.integrity.channel_checked, ended  # (said by its exit)


@pytest.mark.parametrize("swapped", SWAPS)
@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_command_that_swaps_a_builtin_exception_class_is_blocked_and_changes_no_later_verdict(ek, kind, swapped):
    swap = f"import builtins\nbuiltins.{swapped} = type({swapped!r}, (Exception,), {{}})"
    fork = _answers(ek, "fork", [swap])
    assert fork[0].verdict == "blocked", fork
    copy = _answers(ek, kind, [swap], _later_commands_start_clean)
    assert _said(copy[0]) == _said(fork[0]), (copy, fork)


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_replay_that_ends_its_worker_is_no_restored_session(ek, kind):
    """A run kept clean that ends the worker when the log is replayed (the kernel's state it reads changed since; the
    portable guard refuses the `os._exit` instead): the session cannot be restored (SandboxError, closed), never a
    session on a dead worker or on a state it never had (before: the replay's answer was not looked at, and the
    next run found `w` undefined)."""
    conn = ek["conn"]
    assert conn.run_cell("h9_flag = 0", timeout=60).status == "ok"
    try:
        with copy_path_kernel(conn, kind):
            with open_session(conn, budget_s=BUDGET_S, sandbox=SESSIONS[kind]) as sb:
                first = sb.run("import os\nif h9_flag:\n    os._exit(0)\nw = 1")
                assert first.verdict == "no-crash", first
                assert conn.run_cell("h9_flag = 1", timeout=60).status == "ok"
                zero = sb.run("1/0")
                assert (zero.verdict, zero.ename) == ("crash", "ZeroDivisionError"), zero
                with pytest.raises(SandboxError, match="could not be restored"):
                    sb.run("w")  # (a new worker: the log replayed, its first run now ends it)
                assert sb.closed
    finally:
        assert conn.run_cell("del h9_flag", timeout=60).status == "ok"
