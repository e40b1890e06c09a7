"""Issue 42 (h5): the repair agent on a live kernel whose crash is only "likely" in the sandbox.

The kernel refuses the fork (a stand-in `cupy`), so the agent's sandbox is a copy of its state (a
`TransplantSession`). The notebook gave `pandas.DataFrame` a property the copy cannot carry: the copy's
`df.h5_tag` raises AttributeError, the kernel runs the cell clean. The agent still repairs the cell, but the
model is told the crash is only likely, the acceptance it gets back and the proposal (`crashCertain: false`, the
reason, its summary, the editor's markdown) say "verified against a likely crash". Before, the proposal read as a
plain verified fix of a crash the kernel does not raise. The user's kernel is unchanged (`Untouched`).
"""

from __future__ import annotations

import sys

import pytest

from crane.agent.fork_sandbox import fork_or_replay_factory
from crane.agent.loop import start_fix
from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.lsp.agent_bridge import render
from crane.notebook.model import load_notebook

from ..likely_copy import FIX, SETUP
from ..likely_copy import LIKELY as TARGET
from .conftest import code, settings_for, write_notebook
from .fake_agent_server import tool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")


def test_the_agent_says_its_fix_is_verified_against_a_likely_crash(model, tmp_path):
    k = start_kernel(tmp_path)
    try:
        conn = k.connection
        assert conn.run_cell(SETUP, timeout=120).status == "ok"
        assert conn.run_cell(TARGET, timeout=60).status == "ok"  # (the kernel runs it clean)
        nb = load_notebook(write_notebook(tmp_path / "likely.ipynb", [code(SETUP, 1), code(TARGET)]))
        model.reset(tool("edit_cell", "use the column", cell=2, source=FIX),
                    tool("execute_cell", "check", cell=2),
                    tool("finish", "done", explanation="read the column"))
        with Untouched(conn) as watch:
            p = start_fix(nb, 2, settings_for(model), sandbox_factory=fork_or_replay_factory(conn))
        assert watch.unchanged, (watch.changes(), watch.outputs)
    finally:
        k.shutdown()
    assert p.fixed and p.evidence is not None and p.evidence.status == "ok", p
    assert p.evidence.sandbox == "transplant", p.evidence  # a copy of the kernel's state, not a fork (said "fork")
    assert p.crash_certain is False, p  # (before: no such field, and a plain "fixed")
    assert "likely" in p.crash_doubt and "patched the library class DataFrame" in p.crash_doubt, p.crash_doubt
    assert p.verification == "verified against a likely crash"
    assert "fixed (verified against a likely crash)" in p.summary(), p.summary()
    prompt = model.requests[0]["messages"][1]["content"]
    assert "AttributeError" in prompt and "patched the library class DataFrame" in prompt, prompt
    assert "the user's kernel may not raise it" in prompt, prompt
    accepted = p.log[-1].result
    assert accepted.startswith("accepted:") and "verified against a likely crash" in accepted, accepted
    md = render(p)
    assert "**Verified against a likely crash**" in md and "patched the library class DataFrame" in md, md
