"""A cell's verdict on each of the six sandbox paths (one-shot fork, transplant and portable runs, fork, transplant
and portable sessions) against a module's real kernel, shared by the tests of how a cell ends the kernel's process
(test_process_end_matrix.py: at once; test_armed_end.py, test_armed_library_threads.py: after its reply).

`pk`: the module's kernel (each of KERNEL_ENVS) and the folders whose files must stay unchanged. `path_verdict`:
the cell's verdict on a path; the kernel (`Untouched`) and the files unchanged; on a session, `next_command(sb)`
checks the session still serves the next command after the cell (each test file says what it asks of it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxSession
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .copy_sessions import SESSIONS, copy_path_kernel

BUDGET_S = 60.0  # (a run that waited out its budget would say `timeout`: every expectation would fail)
PATHS = ["fork", "transplant", "portable", "fork session", "transplant session", "portable session"]
PORTABLE = SandboxOptions(confinement="portable")


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def pk(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell("x = 1", timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


def path_verdict(pk: dict, path: str, source: str, next_command: Callable[[Any], None]) -> Any:
    """The cell's verdict on `path`; the kernel and the files untouched, `next_command(sb)` on a session."""
    conn = pk["conn"]
    before = (tree_hash(pk["work"]), tree_hash(pk["outside"]))
    kind = path.split()[0]
    with copy_path_kernel(conn, kind), Untouched(conn) as watch:
        if path == "fork":
            v = speculate(conn, source, BUDGET_S)
            assert v.mode in ("blocking", "layered"), v
        elif path in ("transplant", "portable"):
            v = speculate(conn, source, BUDGET_S, sandbox=PORTABLE if kind == "portable" else None)
            assert v.mode == kind, v
        else:
            opened = (SandboxSession.open(conn, budget_s=BUDGET_S) if kind == "fork"
                      else open_session(conn, budget_s=BUDGET_S, sandbox=SESSIONS[kind]))
            with opened as sb:
                v = sb.run(source)
                next_command(sb)
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert (tree_hash(pk["work"]), tree_hash(pk["outside"])) == before
    return v
