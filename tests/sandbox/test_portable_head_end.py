"""A head frames a sealed run's end without waiting for the run's process to be torn down (worker/head.py,
`_frame_sealed`): the process was ended by the head in its seal (no thread of it runs again), so its exit status is
the head's SIGKILL, said at once as the fork path's kernel says it (kernel/entry._reap). Before the frame every other
child of the head is ended and reaped (`_end_others`: the run's process alone is left, unreaped); after it, the run's
process is reaped and whatever its end re-parented to the head is ended (`_end_leftovers(-1)`), before the head does
anything else. Real processes in a fresh interpreter (the helpers end every other child of the process that calls
them: never pytest's own kernels), then a real head: the verdicts and what the head keeps, IPython 8 and 9."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.transplant import POOL
from crane.sandbox.worker.head import _frame_sealed
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options
from .head_children import forked_ahead

_ENDS = """
import json, os, signal
from crane.sandbox.worker.head import _end_leftovers, _end_others
from crane.sandbox.worker.reaper import _children

def blocked():  # a process that waits for good on a pipe nobody writes (the run's sealed process stands so)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    return pid

import ctypes
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # a child subreaper, as a head is
run, left = blocked(), blocked()
r, w = os.pipe()
parent = os.fork()
if parent == 0:  # a process the run left, whose own child outlives it: re-parented here, as to a head
    os.write(w, str(blocked()).encode())
    os._exit(0)
os.close(w)
orphan = int(os.read(r, 64))
os.waitpid(parent, 0)
ended = _end_others(run)
kept = sorted(_children())
gone = []
for pid in (left, orphan):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        gone.append(pid)
os.kill(run, signal.SIGKILL)  # (as the head's seal watcher does, once the run's process is sealed)
late = blocked()  # stands for what the run's end re-parents to the head after the frame
os.waitpid(run, 0)
print(json.dumps({"ended": ended, "kept": kept, "run": run, "reaped": gone == [left, orphan],
                  "late_ended": _end_leftovers(-1), "after": _children()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the head's helpers read /proc")
def test_end_others_leaves_the_run_process_alone_and_end_leftovers_ends_the_rest():
    got = subprocess.run([sys.executable, "-c", textwrap.dedent(_ENDS)], capture_output=True, text=True, timeout=120,
                         check=True)
    out = json.loads(got.stdout.strip().splitlines()[-1])
    assert out["ended"] is True and out["kept"] == [out["run"]], out  # only the run's process is left, unreaped
    assert out["reaped"] is True, out  # the other child and the orphan re-parented to it: ended and reaped
    assert out["late_ended"] is True and out["after"] == [], out


@pytest.mark.parametrize("seal, early", [
    ([((1, 12345), True, True)], True),  # sealed, ended by the head: said at once
    ([(None, True, False)], False),  # the process ended by itself (a crash of its own): its status is read
    ([(None, False, True)], False),  # /proc not readable: ended unchecked, waited for as before
    ([((1, 12345), None, True)], False),
    ([], False),  # the watcher said nothing
])
def test_only_a_run_the_head_ended_in_its_seal_is_framed_before_it_is_reaped(seal, early):
    assert _frame_sealed(seal) is early


@pytest.mark.skipif(linux_layer_available() is not None, reason="heads serve runs under Landlock")
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_sealed_runs_framed_early_keep_their_verdicts_and_the_head(kernel_env, tmp_path, monkeypatch):
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell("import os\nbase = 41").status == "ok"
        before = conn.evaluate("(base, sorted(k for k in globals() if not k.startswith('_')))")
        seen = []
        for cell, want in (("print(os.getpid())\nbase + 1", ("no-crash", None)),
                           ("print(os.getpid())\n{}['k']", ("crash", "KeyError")),
                           ("print(os.getpid())\nbase + 2", ("no-crash", None))):
            v = speculate(conn, cell, 60.0, sandbox=opts)
            assert (v.verdict, v.ename, v.mode) == (*want, "portable"), v
            assert v.integrity is not None and v.integrity.channel_checked, v.integrity  # sealed over its record
            seen.append((v.pid, int(v.stdout.split()[0])))
        heads = {h for h, _ in seen}
        assert len(heads) == 1 and None not in heads, seen  # one head served them all (each frame said "again")
        runs = [r for _, r in seen]
        assert len(set(runs)) == 3 and heads.isdisjoint(runs), seen  # each in a process of its own
        assert conn.evaluate("(base, sorted(k for k in globals() if not k.startswith('_')))") == before
    finally:
        kernel.shutdown()
        POOL.shutdown()


@pytest.mark.skipif(linux_layer_available() is not None, reason="heads serve runs under Landlock")
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_head_imports_the_standard_modules_every_runs_set_up_imports(kernel_env, tmp_path, monkeypatch):
    """getpass (termios) and sqlite3 (_sqlite3), imported by each run's set-up (its input guard, its SQLite
    authorizer): held by the head after its first run, so the next runs do not import them (before: every run did,
    each loading the two extension modules)."""
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell("base = 41").status == "ok"
        first = speculate(conn, "import os\nprint(os.getpid())\nbase + 1", 60.0, sandbox=opts)
        assert (first.verdict, first.mode) == ("no-crash", "portable"), first
        head = first.pid
        assert head is not None, first
        forked_ahead(head, (int(first.stdout.split()[0]),))
        maps = Path(f"/proc/{head}/maps").read_text()
        assert "/_sqlite3." in maps and "/termios." in maps, "the head lacks the set-up's standard modules"
        second = speculate(conn, "import sys\nprint(sorted(m for m in ('getpass', 'sqlite3') if m in sys.modules))",
                           60.0, sandbox=opts)
        assert (second.verdict, second.pid, second.stdout.strip()) == ("no-crash", head, "['getpass', 'sqlite3']"), second
    finally:
        kernel.shutdown()
        POOL.shutdown()
