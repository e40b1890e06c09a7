"""Library imports in the portable worker (worker/imports.py): under Linux's OS layer (Landlock ran), a library's
import-time side effects that stay inside the run are let through to the layer — h5py's import (`platform`'s
`uname -p` subprocess) and TensorFlow's (urllib3's IPv6 bind on `::1`) run clean, as in the kernel; the same
effects from the notebook's own module at its import, or from the cell, stay refused; and where no OS layer ran
(`--sandbox guard`) nothing gives way: urllib3's bind (the one TensorFlow's import makes) and the cell's own `uname -p`
are refused, while h5py imports (the worker asks `platform`'s processor before the guard is up: 9d9c914, no program
is run for the cell). A real today's kernel (kernel-today) with none of these libraries loaded."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import require_today_python

pytestmark = pytest.mark.skipif(linux_layer_available() is not None, reason=str(linux_layer_available()))

PORTABLE = SandboxOptions(confinement="portable")
GUARD = SandboxOptions(confinement="guard")
OWN_MODULE = """import subprocess, socket
try:
    subprocess.run(["true"])
except OSError:
    pass
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    work = tmp_path_factory.mktemp("imports")
    (work / "own_startup.py").write_text(OWN_MODULE)
    k = start_kernel(work, python=require_today_python())
    run = k.connection.run_cell("import numpy as np", timeout=180)
    assert run.status == "ok", run
    yield k.connection
    k.shutdown()


def _run(conn, source: str, options: SandboxOptions):
    with Untouched(conn) as watch:
        v = speculate(conn, source, 600.0, sandbox=options)
    assert watch.unchanged, (watch.changes(), v)
    return v


IMPORTS = {"h5py": ("import h5py\nh5py.__name__", "'h5py'"),
           "tensorflow": ("import tensorflow as tf\nint(tf.constant(3).numpy())", "3")}


# under the guard alone, the module whose import binds the socket stands for TensorFlow's import, which reaches it:
# the same refusal (the audit hook's `socket.bind`, no leeway without an OS layer) in one run of a few seconds, where
# the whole TensorFlow import under the per-call guard took 69.5 s in the CI run of 16:26 UTC (114-176 s at load 5-9)
REFUSED = {"uname -p of the cell's own": "import subprocess\nsubprocess.check_output(['uname', '-p'])",
           "urllib3": "import urllib3\nurllib3.__name__"}


# one run a test: the four confined runs in one test took over pytest's 300 s at load 25 (3.13 CI)
@pytest.mark.parametrize("library", list(IMPORTS))
def test_h5py_and_tensorflow_import_under_landlock(kernel, library):
    source, shown = IMPORTS[library]
    v = _run(kernel, source, PORTABLE)
    assert v.verdict == "no-crash", (source, v)
    assert "landlock" in (v.transplant.layers or []) and v.displays and shown in v.displays[-1].text, v


@pytest.mark.parametrize("library", list(REFUSED))
def test_a_program_and_urllib3s_import_are_refused_under_the_guard_alone(kernel, library):
    v = _run(kernel, REFUSED[library], GUARD)  # no OS layer: the Python layers are the only wall, nothing gives way
    assert v.verdict == "blocked" and v.refusal is not None, (library, v)
    assert ("socket" if library == "urllib3" else "subprocess") in (v.reason or ""), v


def test_h5py_imports_under_the_guard_alone(kernel):
    v = _run(kernel, IMPORTS["h5py"][0], GUARD)  # (platform's processor asked before the guard is up: no program)
    assert v.verdict == "no-crash" and v.displays and "'h5py'" in v.displays[-1].text, v


def test_the_notebooks_own_module_and_the_cell_get_no_leeway(kernel):
    v = _run(kernel, "import own_startup", PORTABLE)  # the notebook's module runs a program at its import
    assert v.verdict == "blocked" and "subprocess" in (v.reason or ""), v
    v = _run(kernel, "import socket\ns = socket.socket(socket.AF_INET6)\ns.bind(('::1', 0))", PORTABLE)
    assert v.verdict == "blocked" and "socket" in (v.reason or ""), v
    # a library's import does not excuse a connection (not an effect that stays inside the run)
    v = _run(kernel, "import socket\nsocket.create_connection(('127.0.0.1', 9))", PORTABLE)
    assert v.verdict == "blocked", v
