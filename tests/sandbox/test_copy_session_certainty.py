"""Issue 42 (h9): a copy-path session judges a crash's certainty by the one-shot run's rule.

On the transplant and portable paths a one-shot run's crash is "certain" only where the copy was faithful for it
(transplant.crash_certain). Sessions (`TransplantSession`, OS and portable: `crane fix`, the repair agent, the MCP
tools) applied only the shell-state part of it, so a crash the one-shot called "likely" came back certain there.
Both now take one decision (transplant.copy_crash_certain) on what their worker holds. Here, on a kernel that
refuses the fork (a stand-in `cupy`), IPython 8 and 9, OS transplant and portable, the same cell's one-shot and
session verdicts agree, for:
- a library class the notebook patched with what the copy cannot carry (a property on `pd.DataFrame`): the copy's
  AttributeError naming it is only "likely" (ExportReply.patched);
- a setting the worker could not prove equal (a warnings filter on a category no name reaches: `warnings` missed):
  a Warning raised is only "likely" (the session's worker says it in its load reply) — the cell copies no name;
- a plain NameError stays certain in both (the rule is not "never certain").
The kernel is unchanged by every run (`Untouched`).
"""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

PORTABLE = SandboxOptions(confinement="portable")
ONE_SHOT = {
    "transplant": lambda conn, src: transplant(conn, src, 60.0),
    "portable": lambda conn, src: speculate(conn, src, 60.0, sandbox=PORTABLE),
}
SESSIONS = {"transplant": None, "portable": PORTABLE}
SETUP = """
import sys, types, warnings
sys.modules.setdefault('cupy', types.ModuleType('cupy'))  # the kernel refuses to fork: every run is a copy
import pandas as pd
df = pd.DataFrame({'a': [1, 2, 3]})
pd.DataFrame.h9_tag = property(lambda self: 5)  # a library class patched with what the copy does not carry
def _h9_category():
    class H9Only(Warning):  # a category no name reaches: the copy cannot set this filter again
        pass
    return H9Only
warnings.filterwarnings('error', category=_h9_category())
"""
# (cell, its exception, certain on the copy paths)
CASES = [
    ("print(df.h9_tag)", "AttributeError", False),
    ("raise UserWarning('h9')", "UserWarning", False),
    ("print(undefined_h9)", "NameError", True),
]


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp(f"h9-certainty-{request.param}"), python=kernel_python(request.param))
    c = k.connection
    assert c.run_cell(SETUP, timeout=300).status == "ok"
    real = c.run_cell("print(df.h9_tag)")
    assert real.status == "ok"  # (the kernel runs it clean: the copy's AttributeError is the copy's)
    yield c
    k.shutdown()


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_session_crash_is_certain_where_the_one_shot_crash_is(kernel, kind):
    conn = kernel
    with Untouched(conn) as watch:
        shots = [ONE_SHOT[kind](conn, cell) for cell, _, _ in CASES]
        with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
            assert type(sb).__name__ == "TransplantSession", type(sb)
            runs = [sb.run(cell) for cell, _, _ in CASES]  # (before: every one certain)
    assert watch.unchanged, (watch.changes(), watch.outputs)
    for (cell, ename, certain), shot, run in zip(CASES, shots, runs, strict=True):
        assert (shot.verdict, shot.ename, shot.certain) == ("crash", ename, certain), (cell, shot.reason, shot)
        assert (run.verdict, run.ename, run.certain) == ("crash", ename, certain), (cell, run.reason, run)
        assert run.mode == shot.mode == ("portable" if kind == "portable" else "transplant"), (run.mode, shot.mode)
