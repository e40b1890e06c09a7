"""Fixtures for the repair-agent tests: the scripted tool-calling model server on 127.0.0.1, notebooks on
disk, a "user kernel" holding the notebook's live state (which must stay untouched), and a replay sandbox
that records what it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crane.agent.sandboxes import ReplaySandbox  # noqa: E402
from crane.kernel.manager import start_kernel  # noqa: E402
from crane.llm.settings import LLMSettings  # noqa: E402

from ..sacred import IopubWatcher, kernel_state
from .fake_agent_server import FakeAgentServer

MODEL = "openai/crane-agent-test"  # not in litellm's price table: tokens only
PRICED = "openai/gpt-4o-mini"  # priced: $0.15 / $0.60 per 1M tokens


def code(source: str, count: int | None = None, error: tuple[str, str, int] | None = None) -> dict:
    outputs = []
    if error:
        ename, evalue, line = error
        outputs.append({"output_type": "error", "ename": ename, "evalue": evalue,
                        "traceback": [f"\x1b[0;31m{ename}\x1b[0m Traceback (most recent call last)",
                                      f"Cell \x1b[0;32mIn[{count or 9}], line {line}\x1b[0m", f"{ename}: {evalue}"]})
    return {"cell_type": "code", "execution_count": count, "id": f"c{abs(hash(source)) % 10**8:08d}",
            "metadata": {}, "outputs": outputs, "source": source.splitlines(keepends=True)}


def markdown(text: str) -> dict:
    return {"cell_type": "markdown", "id": f"m{abs(hash(text)) % 10**8:08d}", "metadata": {},
            "source": text.splitlines(keepends=True)}


def write_notebook(path: Path, cells: list[dict]) -> Path:
    nb = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                      "name": "python3"},
                                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return path


# The KeyError notebook: cell 3 uses a column name with the wrong case.
KEYERROR_CELLS = [
    markdown("# Ages"),
    code('import pandas as pd\ndf = pd.DataFrame({"age": [30, 40, 50], "name": ["a", "b", "c"]})', 1),
    code('mean_age = df["Age"].mean()\nprint(mean_age)', 2, ("KeyError", "'Age'", 1)),
]
KEYERROR_FIX = 'mean_age = df["age"].mean()\nprint(mean_age)'


@pytest.fixture(scope="session")
def agent_server():
    server = FakeAgentServer().start()
    yield server
    server.stop()


@pytest.fixture
def model(agent_server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    agent_server.reset()
    yield agent_server
    agent_server.reset()


def settings_for(server, model: str = MODEL, **kw) -> LLMSettings:
    return LLMSettings(model=model, api_base=server.api_base, timeout_s=10.0, retries=0, cache=False, **kw)


class RecordingSandbox(ReplaySandbox):
    """The replay sandbox, recording every cell source it ran for the agent and every reset."""

    instances: list[RecordingSandbox] = []

    def __init__(self, nb, **kw) -> None:
        self.ran: list[str] = []
        self.events: list[str] = []
        super().__init__(nb, **kw)
        RecordingSandbox.instances.append(self)

    def reset_to_history(self):
        self.events.append("reset")
        super().reset_to_history()

    def run_cell(self, source, timeout=120.0):
        self.ran.append(source)
        self.events.append(source)
        return super().run_cell(source, timeout)


@pytest.fixture
def recording():
    RecordingSandbox.instances.clear()
    yield RecordingSandbox
    RecordingSandbox.instances.clear()


# -- the user's kernel: the notebook's live state, which the agent must never touch -------------------------
class UserKernel:
    def __init__(self, kernel):
        self.kernel = kernel
        self.conn = kernel.connection
        self.watcher = IopubWatcher(kernel.manager.get_connection_info())

    def state(self) -> dict:
        return kernel_state(self.conn)


@pytest.fixture(scope="module")
def user_kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("userkernel"))
    uk = UserKernel(k)
    yield uk
    uk.watcher.close()
    k.shutdown()
