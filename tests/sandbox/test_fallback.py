"""The fallback: a kernel that may not create user namespaces (as under Docker's default seccomp profile or
Ubuntu's apparmor_restrict_unprivileged_userns) still gets sandboxed runs, in blocking mode, and the verdict
says so and why. Here the kernel is started under a seccomp filter refusing clone(CLONE_NEWUSER) and unshare."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
from jupyter_client import KernelManager

from crane.kernel.client import KernelConnection
from crane.kernel.manager import KERNEL_ENV
from crane.sandbox import speculate

LAUNCHER = r"""
import os, sys
from crane.sandbox.kernel import confine as s
p = s._Prog()
p.ld(s._OFF_ARCH)
p.jmp(s._JEQ, s.AUDIT_ARCH_X86_64, 1, 0)
p.ret(s.RET_KILL_PROCESS)
p.ld(s._OFF_NR)
nxt = p.label()
p.jmp(s._JEQ, s._NR["clone"], 0, nxt)
p.ld(s._arg_lo(0))
ok = p.label()
p.jmp(s._JSET, 0x10000000, 0, ok)   # CLONE_NEWUSER: refused, as container runtimes do
p.ret(s.RET_ERRNO | 1)
p.here(ok)
p.ret(s.RET_ALLOW)
p.here(nxt)
for name, err in (("unshare", 1), ("clone3", 38)):
    nxt = p.label()
    p.ld(s._OFF_NR)
    p.jmp(s._JEQ, s._NR[name], 0, nxt)
    p.ret(s.RET_ERRNO | err)
    p.here(nxt)
p.ret(s.RET_ALLOW)
s.set_no_new_privs()
s.install_filter(p.assemble())
os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", sys.argv[1]])
"""


@pytest.fixture(scope="module")
def no_userns_kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("fallback")
    (cwd / "data.csv").write_text("a\n1\n")
    launcher = cwd.parent / "launch_without_userns.py"
    launcher.write_text(LAUNCHER)
    km = KernelManager(transport="ipc", ip=os.path.join(tempfile.mkdtemp(prefix="crane-k-"), "k"))
    assert km.kernel_spec is not None and km._kernel_spec is not None
    km._kernel_spec.argv = [sys.executable, str(launcher), "{connection_file}"]
    km.start_kernel(cwd=str(cwd), env={**os.environ, **KERNEL_ENV})
    conn = KernelConnection(km.blocking_client(), owner=km)
    try:
        conn.wait_ready(60)
        assert conn.run_cell("import pandas as pd\ndf = pd.read_csv('data.csv')").status == "ok"
        yield conn, cwd
    finally:
        conn.close()
        km.shutdown_kernel(now=True)


def test_blocking_mode_where_namespaces_are_refused(no_userns_kernel):
    conn, cwd = no_userns_kernel
    v = speculate(conn, "df.to_csv('copy.csv')", budget_s=10)
    assert v.mode == "blocking" and "namespaces unavailable" in (v.mode_reason or ""), v
    assert v.verdict == "blocked" and not (cwd / "copy.csv").exists(), v
    v = speculate(conn, "x = 1\ndf['b']", budget_s=10, layer="layered")
    assert (v.verdict, v.ename, v.line, v.mode) == ("crash", "KeyError", 2, "blocking"), v
    assert "side effects blocked" in v.how() and "namespaces unavailable" in v.how()
    v = speculate(conn, "import os\nos.write(os.dup(1), b'')\ndf.shape", budget_s=10, layer="layered")
    assert v.verdict == "no-crash", v
