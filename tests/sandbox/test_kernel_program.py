"""The copy's worker is the kernel's own interpreter, as the OS says its process runs it (issue 42,
crane/sandbox/kernel_program.py): the export and the prewarm request report the kernel's `sys.executable`, and the
daemon started that path. An earlier cell that set `sys.executable` to a program of its own had the daemon run it
(here a script that leaves a marker; where the kernel lives in a container sharing the daemon's files, that program
ran outside the container). Now a path that is not the file the kernel's process runs is not started: the verdict
is `unavailable` (transplant and portable, one-shot and session; IPython 8 and 9), the prewarm starts nothing, the
marker never appears. The same kernel's real interpreter is still taken (every other copy-path test), and a Windows
venv's launcher is recognised by its `pyvenv.cfg`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.channel import _starttime
from crane.sandbox.kernel_program import untrusted_interpreter, venv_launcher_of
from crane.sandbox.options import SandboxOptions
from crane.sandbox.prewarm import prewarm_kernel
from crane.sandbox.process_watch import process_ref
from crane.sandbox.session import open_session
from crane.sandbox.transplant import KernelRef

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .copy_sessions import copy_path_kernel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")
PORTABLE = SandboxOptions(confinement="portable")


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def lying(request, tmp_path_factory):
    """A kernel whose first cell, before any request of CRANE's, named a script of its own as its interpreter."""
    work = tmp_path_factory.mktemp(f"exe-{request.param}")
    marker = work / "ran.marker"
    script = work / "python"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    kernel = start_kernel(work, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(f"import sys\nsys.executable = {str(script)!r}\nx = 1", timeout=120).status == "ok"
    yield {"conn": conn, "marker": marker}
    kernel.shutdown()


@pytest.mark.parametrize("path", ["transplant", "portable", "transplant session", "portable session"])
def test_a_program_the_kernel_names_but_does_not_run_is_not_started(lying, path):
    conn = lying["conn"]
    kind = path.split()[0]
    with copy_path_kernel(conn, kind), Untouched(conn) as watch:
        if " " in path:
            with pytest.raises(Exception) as raised:
                with open_session(conn, budget_s=60.0, sandbox=PORTABLE if kind == "portable" else None) as sb:
                    sb.run("y = x + 1")
            why = str(raised.value)
        else:
            v = speculate(conn, "y = x + 1", 60.0, sandbox=PORTABLE if kind == "portable" else None)
            assert v.verdict == "unavailable", v
            why = v.reason or ""
    assert watch.unchanged, watch.changes()
    assert "CRANE starts only the kernel's own interpreter" in why, why
    assert not lying["marker"].exists()


def test_the_prewarm_starts_nothing_for_it(lying):
    """(The portable path's prewarm: the OS sandbox's prewarms only a kernel that imported TensorFlow or JAX.)"""
    done = prewarm_kernel(lying["conn"], SandboxOptions(confinement="portable", warm_workers=True), timeout=30.0)
    assert not done.started and "own interpreter" in done.why, done
    assert not lying["marker"].exists()


def test_the_check_itself(tmp_path):
    me = KernelRef(os.getpid(), _starttime(os.getpid()))
    assert untrusted_interpreter(sys.executable, me) is None  # (a venv's link to its base: the same file)
    assert "own interpreter" in (untrusted_interpreter("/bin/sh", me) or "")
    assert "can see" in (untrusted_interpreter(sys.executable, None) or "")
    assert "absolute path" in (untrusted_interpreter("python3", me) or "")
    assert "ended" in (untrusted_interpreter(sys.executable, KernelRef(os.getpid(), me.start + 1)) or "")
    ref = process_ref(os.getpid(), me.start, 0.0)
    assert ref is not None and untrusted_interpreter(sys.executable, ref) is None  # (psutil's answer)
    assert "own interpreter" in (untrusted_interpreter("/bin/sh", ref) or "")


def test_a_windows_venv_launcher_is_known_by_its_home(tmp_path):
    base = tmp_path / "Python311"
    base.mkdir()
    (base / "python.exe").write_bytes(b"MZ")
    venv = tmp_path / "venv"
    (venv / "Scripts").mkdir(parents=True)
    launcher = venv / "Scripts" / "python.exe"
    launcher.write_bytes(b"MZ launcher")
    (venv / "pyvenv.cfg").write_text(f"home = {base}\ninclude-system-site-packages = false\n")
    assert venv_launcher_of(str(launcher), str(base / "python.exe"))
    assert not venv_launcher_of(str(launcher), str(tmp_path / "elsewhere" / "python.exe"))
    (venv / "pyvenv.cfg").write_text("version = 3.11.7\n")
    assert not venv_launcher_of(str(launcher), str(base / "python.exe"))
    assert not venv_launcher_of(str(Path("/nonexistent/Scripts/python.exe")), str(base / "python.exe"))
