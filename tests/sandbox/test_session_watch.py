"""Fork sessions (issue 41): the fence a command's process checks after its code ran (`kernel/common._Watch`, taken
once by the head) on IPython 8 and 9 kernels. Beyond a rebinding of CRANE's code (test_session_integrity), a name
the code adds to CRANE's module or its private builtins, or a builtin's name added to a standard module the
outcome path calls, would shadow what that path calls: the run is `blocked` and not kept, and the next commands'
verdicts are their own. A run that only adds names of its own to a standard module, or imports a submodule, is
clean and kept."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox.fork_session import SandboxSession

from ..kernel_envs import KERNEL_ENVS, kernel_python

TAMPERED = "changed CRANE's own code"
OURS = "import sys\nmod = sys.modules['_crane_sandbox']\n"
SHADOWS = {
    "module-global": OURS + "mod.__dict__['any'] = lambda *a: False\nmod.__dict__['isinstance'] = lambda *a: True\n",
    "private-builtins": OURS + "mod.__dict__['__builtins__']['len'] = lambda *a: 0\n",
    "stdlib-builtin-name": "import json.encoder\njson.encoder.isinstance = lambda *a: True\n",
}


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, workdir):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    assert kernel.connection.run_cell("import json\nbase = 1", timeout=120).status == "ok"
    yield kernel.connection
    kernel.shutdown()


@pytest.mark.parametrize("attack", list(SHADOWS))
@pytest.mark.parametrize("end", ["1/0", "x = 1"], ids=["crashing", "clean"])
def test_a_run_that_shadows_what_the_outcome_path_calls_is_blocked(conn, attack, end):
    with SandboxSession.open(conn, budget_s=20) as sb:
        first = sb.run(SHADOWS[attack] + end)
        assert first.verdict == "blocked" and TAMPERED in (first.reason or ""), first
        crash = sb.run("{}['k']")
        assert (crash.verdict, crash.ename) == ("crash", "KeyError"), crash
        assert sb.run("y = base + 1").verdict == "no-crash"
        assert sb.inspect("y") == "2"
        assert sb.inspect("'x' in dir()") == "False"  # the blocked run was not kept


def test_names_of_its_own_in_a_standard_module_and_an_import_keep_a_clean_run(conn):
    with SandboxSession.open(conn, budget_s=20) as sb:
        first = sb.run("import json.tool\njson.my_helper = 3\nw = json.my_helper")
        assert first.verdict == "no-crash" and not first.reason, first
        again = sb.run("v = w + 1")
        assert again.verdict == "no-crash", again
        assert sb.inspect("v") == "4"
