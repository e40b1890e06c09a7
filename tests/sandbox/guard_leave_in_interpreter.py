"""Run by test_guard_leave_refresh.py in a 3.12+ interpreter (the `sys.monitoring` path): after `CallGuard.leave`
(CRANE's thread off, the cell's threads still guarded) CRANE's thread imports a library of the deny table and
starts one of its functions before any guarded thread has refreshed the table. A `sys.monitoring.DISABLE` returned
there would switch the location off for every thread (review r1 L2); the cell's thread, woken after, must still be
refused its call. Exit 1 if it was not (or the directory it tried to remove is gone)."""
import os
import sys
import threading

from guard_script import load_guard

mod = load_guard(sys.argv[1])  # server/crane/sandbox
assert "shutil" not in sys.modules  # imported below, by CRANE's thread after `leave`
refused: list = []
guard = mod.CallGuard(refused.append)
target = os.path.abspath(f"../crane-leave-{os.getpid()}")  # outside the run's folder (the working directory)
os.mkdir(target)
r, w = os.pipe()
CELL = """
def work():
    os.read(r, 1)  # (a C call: this thread starts no Python function until it calls rmtree)
    try:
        sys.modules["shutil"].rmtree(target)
    except BaseException as exc:
        caught.append(type(exc).__name__)
"""
caught: list = []
cell_globals: dict = {"os": os, "sys": sys, "r": r, "target": target, "caught": caught}
exec(compile(CELL, "<crane-sandbox-cell>", "exec"), cell_globals)
thread = threading.Thread(target=cell_globals["work"])  # the cell's thread, waiting in a C call
thread.start()
how = guard.install()
guard.leave()  # the cell's end: CRANE's thread alone is off
import shutil  # noqa: E402  (CRANE's own work after the cell: a library imported and one of its functions run)

shutil.rmtree(os.path.join(target, "absent"), ignore_errors=True)
os.write(w, b"x")
thread.join()
guard.uninstall()
ok = bool(refused) and caught == ["GuardRefusal"] and os.path.isdir(target)
print("ok " if ok else "BAD", sys.version.split()[0], how, refused[:1], caught)
os.rmdir(target) if os.path.isdir(target) else None
sys.exit(0 if ok else 1)
