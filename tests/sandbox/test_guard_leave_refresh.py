"""Once the call guard is off for CRANE's thread alone (`CallGuard.leave`, d8504eb: the cell's threads stay guarded),
a function start on CRANE's thread must not switch a guarded function's location off for every thread (review r1
L2). On 3.12+ `sys.monitoring.DISABLE` is for the code location, process-wide; CRANE's thread returned it for any
code not in the guard's table without bringing the table up to date first, so a library imported since (its
guarded functions not yet in the table) whose function CRANE's thread started first was no longer vetted for the
cell's threads still running. `guard_leave_in_interpreter.py` runs it in each 3.12+ interpreter, deterministically
(the cell's thread waits in a C call until CRANE's thread has run the function): the cell thread's `shutil.rmtree`
outside its folder must be refused (before the fix it ran and removed the directory)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .test_portable_guard_interpreters import SANDBOX, _interpreters

HERE = Path(__file__).resolve().parent
MONITORING = [p for p in _interpreters() if "3.11" not in Path(p).name]


@pytest.mark.parametrize("python", MONITORING or [pytest.param(None, marks=pytest.mark.skip("no 3.12+ interpreter"))])
def test_crane_thread_does_not_disable_a_guarded_location(python, tmp_path):
    run = tmp_path / "run"  # the cell's working folder; the directory it tries to remove lies beside it
    run.mkdir()
    res = subprocess.run([python, str(HERE / "guard_leave_in_interpreter.py"), str(SANDBOX)], capture_output=True,
                         text=True, timeout=120, cwd=run)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert res.stdout.startswith("ok ") and "sys.monitoring" in res.stdout, res.stdout
