"""The call guard on the interpreters the kernels here do not use: Python 3.12+ takes the `sys.monitoring`
(PEP 669) path, 3.11 the profile hook. Each available interpreter (pyenv's, or on $PATH) runs
`guard_in_interpreter.py`: the guard's parts compiled as the worker compiles them, cells that reach a refused
callee directly, through getattr, exec, `__del__`, a property, a stdlib callback, a writer with a path outside,
a C method of a socket: each refused, and an honest cell not."""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SANDBOX = HERE.parent.parent / "server" / "crane" / "sandbox"


def _interpreters() -> list[str]:
    found = {}
    for minor in ("3.11", "3.12", "3.13", "3.14"):
        cands = sorted(glob.glob(f"/root/.pyenv/versions/{minor}*/bin/python{minor}")) + [
            shutil.which(f"python{minor}") or ""]
        for c in cands:
            if c and Path(c).exists():
                found[minor] = c
                break
    return [found[k] for k in sorted(found)]


@pytest.mark.parametrize("python", _interpreters() or [pytest.param(None, marks=pytest.mark.skip("no interpreter"))])
def test_the_guard_refuses_every_way_on_this_interpreter(python):
    res = subprocess.run([python, str(HERE / "guard_in_interpreter.py"), str(SANDBOX)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    mechanism = "sys.monitoring" if "3.11" not in Path(python).name else "sys.setprofile"
    assert f" {mechanism} " in res.stdout, res.stdout
