"""The agent on a live kernel, as the daemon runs it: a confined fork session of the user's kernel
(crane.sandbox.fork_session). The user's kernel keeps its namespace (keys and ids), execution count, In/Out, and
its iopub carries no output of the agent's runs."""

from __future__ import annotations

import time

import pytest

from crane.agent.fork_sandbox import ForkSandbox, fork_or_replay_factory
from crane.agent.loop import start_fix
from crane.agent.proposal import AgentStep
from crane.notebook.model import load_notebook

from .conftest import KEYERROR_CELLS, KEYERROR_FIX, settings_for, write_notebook
from .fake_agent_server import tool

OUTPUT = {"stream", "display_data", "execute_result", "error", "execute_input", "update_display_data"}


@pytest.fixture
def live(user_kernel, tmp_path):
    nb = load_notebook(write_notebook(tmp_path / "ages.ipynb", KEYERROR_CELLS))
    uk = user_kernel
    uk.conn.run_cell(nb.cell(2).source)
    uk.conn.run_cell(nb.cell(3).source)
    try:
        ForkSandbox(uk.conn).close()
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"fork sandbox unavailable here: {exc}")
    return nb, uk


def test_agent_in_a_fork_session_leaves_the_user_kernel_untouched(model, live):
    nb, uk = live
    before = uk.state()
    time.sleep(0.2)
    uk.watcher.messages.clear()
    model.reset(tool("execute_cell", "see the error", cell=3),
                tool("inspect", "columns", expression="df.columns.tolist()"),
                tool("edit_cell", "fix", cell=3, source=KEYERROR_FIX),
                tool("execute_cell", "check", cell=3),
                tool("finish", "done", explanation="use 'age'"))
    steps: list[AgentStep] = []
    p = start_fix(nb, 3, settings_for(model), on_step=steps.append, sandbox_factory=fork_or_replay_factory(uk.conn))
    assert p.fixed and p.evidence is not None and p.evidence.sandbox == "fork" and "40.0" in p.evidence.stdout
    assert "raised KeyError" in steps[0].result and "['age', 'name']" in steps[1].result
    assert "ran clean" in steps[3].result
    time.sleep(0.3)
    outputs = [m for m in uk.watcher.messages if m["msg_type"] in OUTPUT]
    assert outputs == []  # nothing the sandbox printed reached the user's frontends
    assert uk.state() == before
    assert uk.conn.evaluate("'mean_age' in get_ipython().user_ns") is False
