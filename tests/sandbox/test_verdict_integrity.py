"""A verdict the cell cannot forge (issue 41): one-shot runs on IPython 8 and 9 kernels, forked (blocking and
layered) and portable. A cell that writes a "no-crash" record on every descriptor it can reach (fstat, /proc/self/fd,
/dev/fd, every number up to 1024, the file objects `gc` finds) and then raises never comes back `no-crash`: the
record is final only once the channel has ended, and any line the cell put there makes the run `blocked` ("the cell
wrote into CRANE's result channel"). The honest cells keep their real verdicts; nothing outside changes."""

from __future__ import annotations

from typing import Any

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.assemble import FORGED
from crane.sandbox.options import SandboxOptions

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .forgeries import _LINE, EVERY_FUNCTION, JSON_DUMPS, REACH, S1

SETUP = "import os, json\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\n"

PATHS: dict[str, dict[str, Any]] = {"blocking": {"layer": "blocking"}, "layered": {"layer": "layered"},
         "portable": {"sandbox": SandboxOptions(confinement="portable")}}


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def ik(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


def _run(ik, source: str, path: str):
    conn = ik["conn"]
    before = (tree_hash(ik["work"]), tree_hash(ik["outside"]))
    with Untouched(conn) as watch:
        v = speculate(conn, source, 60.0, **PATHS[path])
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert (tree_hash(ik["work"]), tree_hash(ik["outside"])) == before, v
    if path == "portable":
        assert v.mode == "portable", v
    return v


@pytest.mark.parametrize("path", list(PATHS))
def test_honest_cells_keep_their_verdicts_and_say_the_channel_was_checked(ik, path):
    v = _run(ik, "y = df['a'].sum()", path)
    assert v.verdict == "no-crash", v
    assert v.integrity is not None and v.integrity.channel_checked and v.integrity.writer == "cell-process", v
    v = _run(ik, "y = df['missing']", path)
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    assert v.integrity is not None and v.integrity.channel_checked, v


@pytest.mark.parametrize("reach", list(REACH))
@pytest.mark.parametrize("path", list(PATHS))
def test_a_record_the_cell_writes_is_never_the_verdict(ik, path, reach):
    v = _run(ik, REACH[reach] + "1/0\n", path)
    assert v.verdict != "no-crash", v
    if v.verdict == "blocked" and (v.reason or "").startswith(FORGED):  # it reached the channel: said so
        assert v.integrity is not None and not v.integrity.channel_checked, v
    elif v.verdict == "blocked":  # the sandbox refused how it looked (the portable guard: gc.get_objects)
        assert (v.reason or "").startswith("crane sandbox: "), v
    else:  # it found no channel to write on: the real crash
        assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v


@pytest.mark.parametrize("path", ["blocking", "layered"])
def test_a_forged_record_after_an_honest_run_is_caught_too(ik, path):
    """The cell writes a crash record and ends clean: the forged line is still an extra line."""
    line = "(json.dumps({'verdict': 'crash', 'ename': 'X', 'elapsed_ms': 1.0}) + '\\n').encode()"
    v = _run(ik, REACH["fstat-fifo"].replace(_LINE, line) + "x = 1\n", path)
    assert v.verdict == "blocked" and (v.reason or "").startswith(FORGED), v


def _attacks():
    return {"S1-reply-writer": S1 + "raise KeyError('orig')", "every-crane-function": EVERY_FUNCTION + "1/0",
            "json-dumps": JSON_DUMPS + "1/0"}


@pytest.mark.parametrize("attack", list(_attacks()))
@pytest.mark.parametrize("path", list(PATHS))
def test_a_cell_that_rewrites_cranes_code_gets_no_verdict(ik, path, attack):
    """Rebinding the record's writer, every function of CRANE's modules or json.dumps, then crashing: never
    no-crash (blocked: the process wrote no record and said why by how it ended; or the real crash)."""
    v = _run(ik, _attacks()[attack], path)
    assert v.verdict in ("blocked", "crash"), v
    if v.verdict == "crash":
        assert v.ename in ("KeyError", "ZeroDivisionError"), v


# -- the cell that forges and then ends its process (issue 41's last hole) -------------------------------------------
# It writes a "no-crash" record on every FIFO or pipe it finds (fstat over its descriptors, /proc/self/fd), closes
# every descriptor, then ends its own process in one of many ways. In the kernel that ends the kernel: the truthful
# verdict is a crash-like "the cell ends the kernel's process", never no-crash. A record counts only when the run's
# process ends sealed by CRANE's epilogue, as its parent sees from outside (/proc); none of these can seal.
FORGE_AND_CLOSE = f"""
import stat, signal
for fd in set(range(3, 1024)) | {{int(n) for n in os.listdir('/proc/self/fd')}}:
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, {_LINE})
    except OSError:
        pass
os.closerange(0, 4096)
"""
ENDINGS = {
    "os._exit": "os._exit(0)",
    "posix._exit": "import posix\nposix._exit(0)",
    "os.abort": "os.abort()",
    "kill-self": "os.kill(os.getpid(), signal.SIGKILL)",
    "kill-own-group": "os.killpg(0, signal.SIGTERM)",
    "raise-signal": "signal.raise_signal(signal.SIGTERM)",
    "pthread-kill": "import threading\nsignal.pthread_kill(threading.main_thread().ident, signal.SIGKILL)",
    "own-pidfd": "signal.pidfd_send_signal(os.pidfd_open(os.getpid()), signal.SIGKILL)",
    "exit-from-a-thread": "import threading\nt = threading.Thread(target=os._exit, args=(0,))\nt.start()\nt.join()",
    "a-fresh-posix-module": ("import importlib.util\nm = importlib.util.module_from_spec(importlib.util.find_spec('posix'))"
                             "\nm._exit(0)"),
    "segfault": "import faulthandler\nfaulthandler._sigsegv()",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("path", ["blocking", "layered"])
def test_a_cell_that_forges_and_ends_its_process_ends_the_kernel(ik, path, ending):
    v = _run(ik, FORGE_AND_CLOSE + ENDINGS[ending] + "\n", path)
    assert v.verdict != "no-crash", v
    if ending == "segfault":  # a signal nobody of CRANE's sent (or a withheld mapping's: blocked)
        assert v.verdict in ("crash", "blocked"), v
    else:
        assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), v
        assert "ends the kernel's process" in (v.evalue or "") or "running it would end" in (v.evalue or ""), v
    assert v.integrity is not None and not v.integrity.channel_checked, v


@pytest.mark.parametrize("path", ["blocking", "layered"])
def test_a_cell_that_forges_and_lingers_times_out(ik, path):
    """Forged record, every descriptor closed, its budget alarm ignored, then it waits to be ended: the record is
    never sealed, so the run is what it was, a timeout."""
    src = FORGE_AND_CLOSE + "import time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(120)\n"
    conn = ik["conn"]
    with Untouched(conn) as watch:
        v = speculate(conn, src, 3.0, layer=path)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert v.verdict == "timeout", v


@pytest.mark.parametrize("after", ["1/0", "x = 1", "import sys, threading\nthreading.Thread(target=sys.exit).start()"])
@pytest.mark.parametrize("path", ["blocking", "layered"])
def test_a_cell_that_forges_and_closes_the_channel_gets_no_verdict_of_its_own(ik, path, after):
    """Forged record, every descriptor closed, then the cell raises or ends clean: CRANE's record cannot be written,
    and what the channel holds is not what CRANE wrote there."""
    v = _run(ik, FORGE_AND_CLOSE + after + "\n", path)
    assert v.verdict == "blocked" and FORGED in (v.reason or ""), v


@pytest.mark.parametrize("path", ["blocking", "layered"])
def test_a_thread_that_forges_while_the_cell_raises(ik, path):
    """A thread of the cell keeps writing records on every pipe while CRANE's epilogue runs: extra bytes."""
    src = ("import threading, stat, time\n"
           "def spam():\n"
           "    for _ in range(200):\n"
           "        for fd in range(3, 64):\n"
           "            try:\n"
           "                if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
           f"                    os.write(fd, {_LINE})\n"
           "            except OSError:\n"
           "                pass\n"
           "        time.sleep(0.001)\n"
           "threading.Thread(target=spam, daemon=True).start()\n"
           "time.sleep(0.05)\n"
           "1/0\n")
    v = _run(ik, src, path)
    assert v.verdict != "no-crash", v
    assert v.verdict == "blocked" or (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v


HONEST_WITH_LOOSE_ENDS = {
    "a-thread-still-running": "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True)"
                              ".start()\ny = df['a'].sum()",
    "its-own-files-closed": "import tempfile\nfd, p = tempfile.mkstemp()\nos.write(fd, b'x')\nos.close(fd)\ny = 1",
    "a-signal-handler-of-its-own": "import signal\nsignal.signal(signal.SIGUSR1, lambda *a: None)\ny = 1",
}


@pytest.mark.parametrize("cell", list(HONEST_WITH_LOOSE_ENDS))
@pytest.mark.parametrize("path", ["blocking", "layered"])
def test_honest_cells_with_loose_ends_keep_their_verdicts(ik, path, cell):
    v = _run(ik, HONEST_WITH_LOOSE_ENDS[cell], path)
    assert v.verdict == "no-crash", v
    assert v.integrity is not None and v.integrity.channel_checked, v
    v = _run(ik, HONEST_WITH_LOOSE_ENDS[cell] + "\n{}['missing']", path)
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v


# -- the same in a fork session's command process (its outcome pipe, read by the session's head) --------------------
SESSION_ENDINGS = {k: ENDINGS[k] for k in ("os._exit", "posix._exit", "os.abort", "kill-self", "exit-from-a-thread",
                                           "a-fresh-posix-module")}
SESSION_ENDINGS["lingers"] = "import time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(8)"


def test_a_session_command_that_forges_and_ends_its_process_gets_no_verdict_of_its_own(ik):
    """Each forger in turn, then the commands after it: never no-crash for the forger, the real verdicts after."""
    from crane.sandbox.fork_session import SandboxSession

    conn = ik["conn"]
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=6) as sb:
            for name, ending in SESSION_ENDINGS.items():
                v = sb.run(FORGE_AND_CLOSE.replace("'verdict'", "'event': 'outcome', 'verdict'") + ending)
                assert v.verdict != "no-crash", (name, v)
                if name in ("os._exit", "posix._exit", "os.abort", "exit-from-a-thread", "a-fresh-posix-module"):
                    assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), (name, v)
                crash = sb.run("y = df['missing']")
                assert (crash.verdict, crash.ename) == ("crash", "KeyError"), (name, crash)
                assert sb.run("z = int(df['a'].sum())").verdict == "no-crash", name
            assert sb.inspect("z") == "3"
    assert watch.unchanged, (watch.outputs, watch.changes())


# CRANE's own kernel-side functions, found with gc and called by the cell: none of them seals a record the cell chose
CRANE_FUNCTIONS = {
    "write-and-seal-through-crane": """
import gc
fns = {f.__name__: f for f in gc.get_objects() if type(f).__name__ == 'function'
       and getattr(f, '__module__', '') == '_crane_sandbox'}
ctx = next(o for o in gc.get_objects() if type(o).__name__ == '_Ctx')
fns['_write_json'](ctx.result_fd, {'verdict': 'no-crash', 'elapsed_ms': 1.0})
fns['_seal_other'](ctx, 1)
""",
    "run-cranes-child-again": """
import gc
fns = {f.__name__: f for f in gc.get_objects() if type(f).__name__ == 'function'
       and getattr(f, '__module__', '') == '_crane_sandbox'}
ctx = next(o for o in gc.get_objects() if type(o).__name__ == '_Ctx')
fns['_child_run'](dict(ctx.args, source='x = 1'), ctx.shell, os.getppid(), True)
1/0
""",
    "the-guards-end": """
import gc
ctx = next(o for o in gc.get_objects() if type(o).__name__ == '_Ctx')
ctx.audit_state['end']('is fine')
""",
    "atexit-and-a-finalizer": f"""
import atexit, stat
def forge():
    for fd in range(3, 1024):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, {_LINE})
        except OSError:
            pass
atexit.register(forge)
class Late:
    def __del__(self):
        forge()
late = [Late()]
late.append(late)
del late
1/0
""",
}


@pytest.mark.parametrize("attack", list(CRANE_FUNCTIONS))
@pytest.mark.parametrize("path", ["blocking", "layered"])
def test_cranes_own_functions_seal_no_record_the_cell_chose(ik, path, attack):
    v = _run(ik, CRANE_FUNCTIONS[attack], path)
    assert v.verdict != "no-crash", v
    if attack == "the-guards-end":
        assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), v
