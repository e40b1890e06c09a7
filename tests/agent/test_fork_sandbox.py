"""The agent on a live kernel, as the daemon runs it: a confined fork session of the user's kernel
(crane.sandbox.fork_session). The user's kernel keeps its namespace (keys and ids), execution count, In/Out, and
its iopub carries no output of the agent's runs."""

from __future__ import annotations

import time

import pytest

from crane.agent.fork_sandbox import ForkSandbox, fork_or_replay_factory
from crane.agent.loop import start_fix
from crane.agent.proposal import AgentStep
from crane.kernel.manager import start_kernel
from crane.notebook.model import load_notebook

from ..kernel_envs import KERNEL_ENVS
from ..sacred import settle
from .conftest import KEYERROR_CELLS, KEYERROR_FIX, code, settings_for, write_notebook
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
    settle(uk.watcher, uk.conn)  # the user's runs' messages all in before the watcher is cleared
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


# A user object whose every dunder and missing attribute leaves the process id in a file: the focused ask probes the
# notebook's other variables, and no code of the notebook may run in the user's kernel while it does.
TRAP = """import os
class Trap:
    def _hit(self):
        with open({path!r}, "a") as f:
            f.write(str(os.getpid()) + "\\n")
    def __repr__(self): self._hit(); return "Trap()"
    def __str__(self): self._hit(); return "Trap"
    def __len__(self): self._hit(); return 3
    def __iter__(self): self._hit(); return iter([1, 2, 3])
    def __bool__(self): self._hit(); return True
    def __getitem__(self, key): self._hit(); return 1
    def __getattr__(self, name): self._hit(); raise AttributeError(name)
    def __dir__(self): self._hit(); return []
trap = Trap()"""


@pytest.fixture
def confinement(request):
    """The sandbox the agent's session uses: the OS one (a fork, "auto") or the portable one (a transplant session:
    the namespace exported to a worker)."""
    from crane.sandbox.options import SandboxOptions, active, configure

    before = active()
    configure(SandboxOptions(confinement=request.param))
    yield request.param
    configure(before)


@pytest.mark.parametrize("confinement", ["auto", "portable"], indirect=True)
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_focused_ask_in_a_session_leaves_the_user_kernel_untouched(model, tmp_path, kernel_env, confinement):
    """The model sends the target back unchanged; the focused ask probes the other variables (a trap among them),
    runs a failing change and then the fix in the session (a fork, or the portable sandbox's transplant): the
    user's kernel (IPython 8 and 9) keeps its state, gets no output, and runs none of the notebook's code (the
    trap's methods)."""
    from ..kernel_envs import kernel_python
    from ..sacred import IopubWatcher, kernel_state
    from .fake_agent_server import Turn

    hits = tmp_path / "trap-hits.txt"
    cells = [KEYERROR_CELLS[0], KEYERROR_CELLS[1], code(TRAP.format(path=str(hits)), 2),
             code('mean_age = df["Age"].mean()\nprint(mean_age)', 3, ("KeyError", "'Age'", 1))]
    nb = load_notebook(write_notebook(tmp_path / "trap.ipynb", cells))
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    watcher = IopubWatcher(kernel.manager.get_connection_info())
    try:
        conn = kernel.connection
        for n in (2, 3, 4):
            conn.run_cell(nb.cell(n).source)
        try:
            ForkSandbox(conn).close()
        except Exception as exc:  # pragma: no cover - depends on the machine
            pytest.skip(f"fork sandbox unavailable here: {exc}")
        pid = conn.evaluate("__import__('os').getpid()")
        hits.unlink(missing_ok=True)
        before = kernel_state(conn)
        settle(watcher, conn)  # the setup's messages all in before the watcher is cleared
        watcher.messages.clear()
        model.reset(tool("edit_cell", "same", cell=4, source=nb.cell(4).source),
                    plain=[Turn(text="mean_age = df['AGE'].mean()"), Turn(text='mean_age = df["age"].mean()')])
        sessions: list[str] = []

        def factory(notebook):
            sandbox = fork_or_replay_factory(conn)(notebook)
            sessions.append(type(getattr(sandbox, "session", None)).__name__)
            return sandbox

        p = start_fix(nb, 4, settings_for(model), sandbox_factory=factory)
        assert p.fixed and p.calls.focused_fixed and p.evidence is not None
        assert p.evidence.sandbox == ("portable" if confinement == "portable" else "fork"), p.evidence  # (where it ran)
        assert sessions == ["TransplantSession" if confinement == "portable" else "SandboxSession"]
        ask = model.plain_requests[0]["messages"][1]["content"]
        assert "trap: Trap" in ask  # the trap was among the variables the ask described
        time.sleep(0.3)
        assert [m for m in watcher.messages if m["msg_type"] in OUTPUT] == []
        assert kernel_state(conn) == before
        assert conn.evaluate("'mean_age' in get_ipython().user_ns") is False
        ran_in_user_kernel = [x for x in (hits.read_text().split() if hits.exists() else []) if x == str(pid)]
        assert ran_in_user_kernel == []
        conn.run_cell("repr(trap)")  # the trap itself works: run in the kernel, it leaves the kernel's pid
        assert str(pid) in hits.read_text().split()
    finally:
        watcher.close()
        kernel.shutdown()
