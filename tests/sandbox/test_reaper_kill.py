"""CRANE's own kill of a run's child (worker/reaper.kill_child, used by end_descendants and by the portable worker's
end of multiprocessing's children) is never judged by the run's audit hook as the cell's, and never signals a child
that was reaped before it (the project's CI: a pool left open came back `blocked: signalling another process`, its
handler thread having reaped a killed worker, and forked another, just before CRANE's `kill` of it).

A real interpreter, real fork children and an audit hook that records every signal sent through an audited call
(the run's hook refuses `os.kill` of anything but an unreaped child of the worker): CRANE's kills raise none, a
child reaped before is left alone, and `end_descendants` ends children another thread reaps the moment they end
(as a pool's handler thread does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[2] / "server"

SCRIPT = r"""
import json, os, signal, sys, threading, time  # noqa: E401
from crane.sandbox.worker.reaper import end_descendants, hold_descendants, kill_child

signals = []
sys.addaudithook(lambda e, a: signals.append([e, *a]) if e in ("os.kill", "os.killpg", "signal.pthread_kill") else None)
held = hold_descendants()

def child():
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(60)
    return pid

def ended_by_kill(pid):
    info = os.waitid(os.P_PID, pid, os.WEXITED)  # (reaps it)
    return info.si_code == os.CLD_KILLED and info.si_status == signal.SIGKILL

out = {"held": held}
a = child()
out["alive"] = kill_child(a)
out["alive_killed"] = ended_by_kill(a)

# a child that ended and was reaped before CRANE's kill (by the cell's code, a pool's handler thread): left alone
b = child()
signal.pidfd_send_signal(os.pidfd_open(b), signal.SIGKILL)  # (the test's own, unaudited: nothing recorded)
os.waitpid(b, 0)
out["reaped"] = kill_child(b)

# children another thread reaps the moment they end (blocked in waitpid): all ended, each once
c = child()
d = child()
reaped = []
t = threading.Thread(target=lambda: reaped.extend(os.waitpid(p, 0)[1] for p in (c, d)))
t.start()
out["ended"] = end_descendants()
t.join(60)
out["reaped_statuses"] = reaped
out["left"] = [p for p in (c, d) if os.path.exists(f"/proc/{p}")]
out["signals"] = signals
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"),
                    reason="the reaper and pidfds are Linux's")
def test_cranes_kill_is_never_the_cells_and_never_hits_a_reaped_child(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SERVER), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["held"].get("ran"), out
    assert out["alive"] is True and out["alive_killed"] is True, out
    assert out["reaped"] is False, out  # gone before: nothing signalled (its number could be another's by now)
    assert out["ended"] == 2 and out["left"] == [], out
    assert all(os.WIFSIGNALED(s) and os.WTERMSIG(s) == 9 for s in out["reaped_statuses"]), out
    # no kill of CRANE's went through an audited call: the run's audit hook, which judges the cell's `os.kill`
    # (an unreaped child of the worker only), never sees one, so never takes it for the cell's
    assert out["signals"] == [], out


POOL_SCRIPT = r"""
import json, multiprocessing as mp, os, signal, sys
from crane.sandbox.worker.portable import _stop_pool_handlers

p = mp.Pool(2)
first = sorted(w.pid for w in p._pool)
# (a pool the cell left open has long been waiting for updates; one made just now may still be in its handler's first
# round, past the state check: wait until the handler waits, as it does in the case the end meets)
import time
def waiting():
    f = sys._current_frames().get(p._worker_handler.ident)
    while f is not None:
        if f.f_code.co_name == "_wait_for_updates":
            return True
        f = f.f_back
    return False
deadline = time.monotonic() + 60
while not waiting() and time.monotonic() < deadline:
    time.sleep(0.01)
_stop_pool_handlers()
for pid in first:
    signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL)
p._worker_handler.join(60)  # (an event: the handler leaves its loop when the kill wakes it; the bound ends a failure)
print(json.dumps({"first": first, "now": sorted(w.pid for w in p._pool), "handler": p._worker_handler.is_alive()}))
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"),
                    reason="the portable worker's end of pools runs under the Linux layer")
def test_a_pool_left_open_stops_replacing_its_workers_before_they_are_killed(tmp_path):
    # after the cell (portable._end_children) the pool's handler thread no longer forks a replacement for each worker
    # CRANE kills (a child that ended at once, unguarded, and was replaced again: a fork storm the end chased)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SERVER), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", POOL_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path, start_new_session=True)
    try:  # (a replacement worker, where the handler went on, holds the pipe: its group is ended below)
        line = proc.stdout.readline() if proc.stdout else ""
        assert line, proc.stderr.read() if proc.stderr else ""
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
    out = json.loads(line)
    assert out["handler"] is False and out["now"] == out["first"], out
