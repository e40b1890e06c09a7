"""Review M4 (fixC, 041dae9): what a session's `load` frees at its end runs under the audit hook (IPython 8 and 9, the
OS transplant session).

A transplant session copies the names a command reads that it has not copied yet; a name the session's own code
bound in a way the daemon does not see (`globals()[chr(100)] = 5`) is copied again from the kernel and dropped there
(names the session bound are never overwritten). The load holds every object it unpickled in its own table until
it is emptied (worker/main's `load`), with the audit hook bypassed for the libraries' unpickling: the dropped copy is
freed when that table is emptied, and what it holds that the export's finalizers' tail does not pin (here an object
its notebook class's `__setstate__` made in the copy) runs its `__del__` then. The bypass must be off by then (the
`__del__` is the notebook's code, as a command's is): its write outside the scratch directory is refused by the
audit hook ("writing a file is blocked"), not only by Landlock (`[Errno 13]`). This fails if the table is emptied
before the bypass is turned off.
"""

from __future__ import annotations

import os
import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.session import open_session

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the OS sandbox needs Linux")

SETUP = """
import os, sys, types
sys.modules['cupy'] = types.ModuleType('cupy')  # the kernel refuses to fork: a session is a transplant one
OUTSIDE = {outside!r}
class Freed:
    met = []
    def __del__(self):
        try:
            with open(OUTSIDE, 'w') as f:
                f.write('written when a load freed it')
        except Exception as exc:
            Freed.met.append(repr(exc))
class Holder:
    def __setstate__(self, state):
        self.__dict__.update(state)
        self.helper = Freed()  # (made where it is loaded: in the copy only, never in the export's finalizers' tail)
d = Holder()
d.x = 1  # (a state: the load calls `__setstate__` with it)
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    outside = str(tmp_path_factory.mktemp("h6-outside") / "written.txt")
    k = start_kernel(tmp_path_factory.mktemp("h6-load"), python=kernel_python(request.param))
    run = k.connection.run_cell(SETUP.format(outside=outside), timeout=120)
    assert run.status == "ok", run
    yield k.connection, outside
    k.shutdown()


def test_a_load_s_dropped_duplicate_is_freed_under_the_audit_hook(kernel):
    conn, outside = kernel
    with Untouched(conn) as watch:
        with open_session(conn, budget_s=30) as sb:
            assert type(sb).__name__ == "TransplantSession", type(sb)
            v = sb.run("globals()[chr(100)] = 5")  # (bound where the daemon does not see it: `d` is not copied)
            assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason)
            # `d` copied now, dropped (the session's own 5 stays), freed at the load's end: its `__del__` runs
            v = sb.run("print(d, Freed.met)")
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert not os.path.exists(outside)
    # (before 041dae9, or with the table emptied before the bypass is off: Landlock's "[Errno 13] Permission denied")
    assert v.verdict == "no-crash", (v.verdict, v.ename, v.evalue, v.reason, v.stdout)
    assert v.stdout.startswith("5 "), v.stdout
    assert "writing a file is blocked" in v.stdout, v.stdout
