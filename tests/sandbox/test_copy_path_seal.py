"""The seal on the copy paths (issue 41): a transplant worker's record counts only sealed, as a forked child's does.

The worker that runs the cell — OS-confined (layered: its B, checked by A; blocking: the worker itself, checked by
the daemon), portable in a head's fork child (checked by the head) or portable on its own (`guard`: checked by the
daemon) — ends in CRANE's sealed wait after its record; its parent reads /proc/<pid>/syscall and ends it. On IPython
8 and 9 kernels, each path: honest cells keep their verdicts (the channel checked, sealed over exactly its bytes); the
forgers of test_verdict_integrity.py (a "no-crash" line on every pipe, then a raise; every descriptor closed, then a
clean end or an end of the process; a forger that lingers) never come back "no-crash"; the kernel is unchanged. The
daemon's own look (crane.sandbox.copy_seal) and the head's frame (crane.sandbox.portable.read_forked) are tested on
real processes and bytes too."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.assemble import FORGED
from crane.sandbox.copy_seal import read_seal, settle
from crane.sandbox.options import SandboxOptions
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .copy_sessions import SESSIONS, copy_path_kernel
from .forgeries import _LINE, REACH
from .test_verdict_integrity import ENDINGS, FORGE_AND_CLOSE

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

SETUP = "import os, json\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\n"

Run = Callable[[Any, str, float], Any]
PATHS: dict[str, Run] = {
    "transplant-layered": lambda conn, src, budget: transplant(conn, src, budget),
    "transplant-blocking": lambda conn, src, budget: transplant(conn, src, budget, layer="blocking"),
    "portable-head": lambda conn, src, budget: speculate(conn, src, budget,
                                                         sandbox=SandboxOptions(confinement="portable")),
    "portable-alone": lambda conn, src, budget: speculate(conn, src, budget,
                                                          sandbox=SandboxOptions(confinement="guard")),
}


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def ik(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


def _run(ik, source: str, path: str, budget_s: float = 60.0):
    conn = ik["conn"]
    before = (tree_hash(ik["work"]), tree_hash(ik["outside"]))
    with Untouched(conn) as watch:
        v = PATHS[path](conn, source, budget_s)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert (tree_hash(ik["work"]), tree_hash(ik["outside"])) == before, v
    assert v.mode == ("portable" if path.startswith("portable") else "transplant"), v
    return v


@pytest.mark.parametrize("path", list(PATHS))
def test_honest_cells_keep_their_verdicts_sealed(ik, path):
    v = _run(ik, "y = df['a'].sum()", path)
    assert v.verdict == "no-crash", v
    assert v.integrity is not None and v.integrity.channel_checked, v  # (sealed over exactly the channel's bytes)
    v = _run(ik, "y = df['missing']", path)
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    assert v.integrity is not None and v.integrity.channel_checked, v


def _forgery_off_the_channel(v) -> bool:
    """The forger's first write went into the pipe the run's pool processes hand refusals on (it is among "every
    pipe"): the run ended blocked there, before its write on the result channel, which then held CRANE's lines alone."""
    from crane.sandbox.worker.portable import NOTICES_FORGED
    return v.verdict == "blocked" and NOTICES_FORGED in (v.reason or "")


def _not_its_own(v, *real: str) -> None:
    """Never no-crash: blocked (the forged line found, or the sandbox refused how the cell looked) or the real end."""
    assert v.verdict != "no-crash", v
    if v.verdict == "blocked":
        assert FORGED in (v.reason or "") or (v.reason or "").startswith("crane sandbox: "), v
    else:
        assert v.verdict == "crash" and v.ename in real, v


@pytest.mark.parametrize("path", list(PATHS))
def test_a_record_written_on_every_pipe_then_a_raise_is_never_the_verdict(ik, path):
    _not_its_own(_run(ik, REACH["fstat-fifo"] + "1/0\n", path), "ZeroDivisionError")


@pytest.mark.parametrize("after", ["1/0", "x = 1"])
@pytest.mark.parametrize("path", list(PATHS))
def test_a_forger_that_closes_every_descriptor_gets_no_verdict_of_its_own(ik, path, after):
    v = _run(ik, FORGE_AND_CLOSE + after + "\n", path)
    assert v.verdict == "blocked", v
    assert FORGED in (v.reason or "") or (v.reason or "").startswith("crane sandbox: "), v
    assert v.integrity is not None and (not v.integrity.channel_checked or _forgery_off_the_channel(v)), v


@pytest.mark.parametrize("ending", ["os._exit", "kill-self", "exit-from-a-thread"])
@pytest.mark.parametrize("path", list(PATHS))
def test_a_forger_that_ends_its_process_ends_the_kernel(ik, path, ending):
    v = _run(ik, FORGE_AND_CLOSE + ENDINGS[ending] + "\n", path)
    _not_its_own(v, "DeadKernelError")
    if path.startswith("transplant"):  # (the portable guard may refuse how it looked first: blocked)
        assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), v
    assert v.integrity is not None and (not v.integrity.channel_checked or _forgery_off_the_channel(v)), v


@pytest.mark.parametrize("path", ["transplant-blocking", "portable-alone"])
def test_a_forger_that_lingers_is_never_sealed(ik, path):
    """Forged record, every descriptor closed, its budget alarm ignored, then it waits to be ended."""
    src = FORGE_AND_CLOSE + "import time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(600)\n"
    v = _run(ik, src, path, budget_s=2.0)
    assert v.verdict in ("timeout", "blocked"), v


@pytest.mark.parametrize("path", ["transplant-blocking", "portable-head"])
def test_a_crash_record_forged_before_a_clean_end_is_caught(ik, path):
    line = "(json.dumps({'verdict': 'crash', 'ename': 'X', 'elapsed_ms': 1.0}) + '\\n').encode()"
    v = _run(ik, REACH["fstat-fifo"].replace(_LINE, line) + "x = 1\n", path)
    assert v.verdict == "blocked" and FORGED in (v.reason or ""), v


# -- the daemon's look (crane.sandbox.copy_seal) on real processes ---------------------------------------------------
_SEALER = """
import ctypes, os, sys
fn = ctypes.CDLL(None, use_errno=True).syscall
fn.restype = ctypes.c_long
fn.argtypes = [ctypes.c_long] * 2 + [ctypes.c_void_p] + [ctypes.c_ulong] * 4
r, w = os.pipe()
buf = ctypes.create_string_buffer(1)
sys.stdout.write("in\\n"); sys.stdout.flush()
while True:
    fn(0, r, buf, 1, int(sys.argv[1]), int(sys.argv[2]), 0x4352414E45534541)
"""


def _start(code: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"in\n"
    return proc


def test_the_daemon_ends_a_sealed_worker_and_says_its_seal():
    proc = _start(_SEALER, "2", str(0xDEADBEEF))
    try:
        status, late = settle(proc.pid, proc.poll, proc.kill, lambda: None, time.monotonic() + 60)
        assert late is None and status is not None, status
        assert status.sealed == [2, 0xDEADBEEF] and status.checked and status.by_parent, status
        assert proc.wait(30) != 0
    finally:
        proc.kill()
        proc.wait()


def test_a_worker_that_ends_itself_is_read_unsealed_and_one_that_lingers_runs_out_its_time():
    proc = _start("import sys, os\nsys.stdout.write('in\\n'); sys.stdout.flush()\nsys.stdin.read()\nos._exit(3)\n")
    try:
        status, late = settle(proc.pid, proc.poll, proc.kill, lambda: None, time.monotonic() + 0.3)
        assert (status, late) == (None, "deadline")  # (it waits, unsealed: never taken for a sealed one)
        assert read_seal(proc.pid) is None
    finally:
        proc.kill()
        proc.wait()
    proc = subprocess.Popen([sys.executable, "-c", "import os; os._exit(3)"])
    proc.wait()
    status, late = settle(proc.pid, proc.poll, proc.kill, lambda: None, time.monotonic() + 60)
    assert late is None and status is not None and status.exitcode == 3 and status.sealed is None, status
    assert status.checked, status


class _Chunks:
    """A PipeReader's interface over fixed bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.eof = data, False

    def read(self, timeout: float) -> bytes | None:
        out, self.data = self.data, b""
        self.eof = not out
        return out


def test_the_heads_frame_carries_its_look_at_the_run():
    from crane.sandbox.portable import read_forked

    body = b'{"event": "cell"}\n{"verdict": "no-crash"}\n'
    f = read_forked(_Chunks(b"F %d -1 9 1 1 1 77\n" % len(body) + body), time.monotonic() + 5)
    assert (f.data, f.status, f.checked, f.sealed) == (body, (None, 9), True, (1, 77)), f
    f = read_forked(_Chunks(b"F %d 0 0 1 -1 0 0\n" % len(body) + body), time.monotonic() + 5)
    assert (f.status, f.checked, f.sealed) == ((0, None), None, None), f
    f = read_forked(_Chunks(b"F %d 0 0 1\n" % len(body) + body), time.monotonic() + 5)  # (a head of before)
    assert (f.checked, f.sealed) == (None, None), f


# -- sessions on the copy path: each reply sealed (worker/main._sealed_commands, TransplantSession._read_reply) ------
# The session's code runs in the worker that writes the replies: it can find the command's id and key in CRANE's
# frame and write a reply of its own before CRANE's. Only CRANE's wait for the next command is sealed.
KEY_THIEF = """
import sys, json, os
f = sys._getframe()
while f is not None and not ('cmd' in f.f_locals and 'ctx' in f.f_locals):
    f = f.f_back
cmd, ctx = f.f_locals['cmd'], f.f_locals['ctx']
os.write(ctx.result_fd, (json.dumps({'event': 'reply', 'id': cmd['id'], 'key': cmd['key'], 'pid': os.getpid(),
                                     'verdict': 'no-crash', 'elapsed_ms': 1.0}) + '\\n').encode())
1/0
"""


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_session_reply_counts_only_sealed(ik, kind):
    from crane.sandbox.session import open_session
    from crane.sandbox.transplant_session import TransplantSession

    conn = ik["conn"]
    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                assert isinstance(sb, TransplantSession), sb
                v = sb.run("z = int(df['a'].sum())\nz")
                assert v.verdict == "no-crash" and v.integrity is not None and v.integrity.channel_checked, v
                for forger in (KEY_THIEF, REACH["fstat-fifo"] + "1/0\n"):
                    v = sb.run(forger)
                    assert v.verdict != "no-crash", v
                    assert v.verdict == "blocked" or (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
                    if forger is KEY_THIEF and kind == "transplant":  # (the portable guard refuses its frame walk)
                        assert FORGED in (v.reason or "") and v.integrity is not None, v
                        assert not v.integrity.channel_checked, v
                v = sb.run("df['missing']")
                assert (v.verdict, v.ename) == ("crash", "KeyError") and v.integrity is not None, v
                assert v.integrity.channel_checked, v
                assert sb.inspect("z") == "3"
        assert watch.unchanged, (watch.outputs, watch.changes())
