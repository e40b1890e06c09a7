"""The layered sandbox for a kernel that does not run as root (here `nobody`, started through setpriv): its
own uid and gid mapped, every writable place with a layer of its own (the directories above it belong to
others), programs allowed, the process bound by RLIMIT_NPROC in the sandbox's user namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from jupyter_client import KernelManager

from crane.kernel.client import KernelConnection
from crane.kernel.manager import KERNEL_ENV
from crane.sandbox import speculate

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="starting a kernel as another user needs root and setpriv")


def _nobody_cannot_run_this_interpreter() -> str | None:
    """Why `nobody` cannot start a kernel of this interpreter, or None: an interpreter whose files lie in a home
    only root may enter (pyenv's under /root, mode 700: a 3.13 found no libpython3.13 there) cannot be tested so."""
    run = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", sys.executable,
                          "-c", "import ipykernel"], capture_output=True, text=True, timeout=120, cwd="/")
    if run.returncode == 0:
        return None
    last = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
    return f"user nobody cannot run this interpreter ({sys.executable}): {last}"


@pytest.fixture(scope="module")
def nobody_kernel():
    why = _nobody_cannot_run_this_interpreter()
    if why is not None:
        pytest.skip(why)
    base = tempfile.mkdtemp(prefix="crane-nobody-", dir="/tmp")
    os.chmod(base, 0o755)
    home, work, rt = (os.path.join(base, d) for d in ("home", "work", "rt"))
    for d in (home, work, rt):
        os.mkdir(d)
    with open(os.path.join(work, "data.csv"), "w") as f:
        f.write("a,b\n1,2\n")
    for root, dirs, files in os.walk(base):
        for name in dirs + files:
            os.chown(os.path.join(root, name), NOBODY, NOBODY)
    conn_copy = os.path.join(rt, "kernel.json")  # the kernel, as nobody, reads a copy of the connection file
    km = KernelManager(transport="tcp", ip="127.0.0.1")
    assert km.kernel_spec is not None and km._kernel_spec is not None
    km._kernel_spec.argv = [
        "sh", "-c",
        f'cp "$1" {conn_copy} && chown {NOBODY}:{NOBODY} {conn_copy} && exec setpriv --reuid={NOBODY} '
        f'--regid={NOBODY} --clear-groups -- "$0" -m ipykernel_launcher -f {conn_copy}',
        sys.executable, "{connection_file}",
    ]
    env = {**os.environ, **KERNEL_ENV, "HOME": home, "IPYTHONDIR": os.path.join(home, ".ipython")}
    km.start_kernel(cwd=work, env=env)
    conn = KernelConnection(km.blocking_client(), owner=km)
    try:
        conn.wait_ready(60)
        assert conn.run_cell("import pandas as pd\ndf = pd.read_csv('data.csv')").status == "ok"
        yield conn, work, home
    finally:
        conn.close()
        km.shutdown_kernel(now=True)
        shutil.rmtree(base, ignore_errors=True)


def test_layered_sandbox_for_another_user(nobody_kernel):
    conn, work, home = nobody_kernel
    assert conn.evaluate("__import__('os').getuid()") == NOBODY
    v = speculate(conn, "df.to_csv('out.csv')\nimport os\nos.makedirs(os.path.expanduser('~/.cache/x'))\n"
                        "print(open('out.csv').read().splitlines()[0], os.getuid())", 20)
    assert (v.verdict, v.mode, v.stdout) == ("no-crash", "layered", f",a,b {NOBODY}\n"), v
    assert sorted(os.listdir(work)) == ["data.csv"] and not os.path.exists(os.path.join(home, ".cache"))
    v = speculate(conn, "import subprocess\nprint(subprocess.run(['id', '-u'], capture_output=True, text=True).stdout)", 20)
    assert v.verdict == "no-crash" and v.stdout.strip() == str(NOBODY), v
    v = speculate(conn, "x = 1\ndf['zz']", 20)
    assert (v.verdict, v.ename, v.line) == ("crash", "KeyError", 2), v
    v = speculate(conn, "import subprocess\nps = [subprocess.Popen(['sleep', '60']) for _ in range(200)]", 30,
                  max_processes=50)
    assert v.verdict == "blocked" and "bound" in (v.reason or ""), v
