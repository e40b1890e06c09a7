"""The LLM layer in the server, through the real litellm over HTTP to the fake OpenAI-compatible server of
tests/llm: `crane.diagnoseCell` with a model (explanation, tokens, session totals), a failing model (the
rules' diagnosis with a note, no crash), llm-mode diagnostics (debounced, cached), and no litellm import at
server start."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
import pytest_asyncio
from lsprotocol import types

from tests.llm.fake_llm_server import VALID_ANSWER, FakeLLMServer, Reply

from .conftest import REPO, Notebook, crane_diags, start_client, stop_client, wait_for

MODEL = "openai/gpt-4o-mini"  # priced in litellm's bundled table
# The server's first model request comes after it imports litellm (about 4 s of CPU: 40 s at load 12, over 100 s
# at load 25): a wait for it is bounded for that (scaled by wait_for), and its test gets pytest's timeout twice over.
FIRST_REQUEST_S = 80


@pytest.fixture(scope="module")
def llm_server():
    server = FakeLLMServer().start()
    yield server
    server.stop()


def llm_env(tmp_path) -> dict[str, str]:
    return {
        "JUPYTER_RUNTIME_DIR": str(tmp_path),
        "OPENAI_API_KEY": "sk-crane-lsp-test",
        "CRANE_CACHE_DIR": str(tmp_path / "cache"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "",  # the server must set it itself before importing litellm
        "NO_PROXY": "127.0.0.1,localhost",
        "HTTP_PROXY": "",
        "HTTPS_PROXY": "",
    }


@pytest_asyncio.fixture
async def client(llm_server, tmp_path):
    llm_server.reset()
    c = await start_client(
        env=llm_env(tmp_path),
        init_options={"crane": {"llm": {"model": MODEL, "apiBase": llm_server.api_base, "retries": 0}}},
    )
    yield c
    await stop_client(c)


async def diagnose(client, uri):
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.diagnoseCell", arguments=[uri]))


@pytest.mark.timeout(600)
async def test_diagnose_cell_with_a_model(client, llm_server, tmp_path):
    nb = Notebook(
        client,
        tmp_path / "ages.ipynb",
        ["# Ages", "import pandas as pd\ndf = pd.DataFrame({'name': ['a'], 'age': [3]})\n", "x = 1\nprint(df['Age'])\n"],
        kinds=["markdown", "code", "code"],
    )
    nb.executed(1, order=1)
    nb.executed(2, order=2, success=False)
    await wait_for(lambda: crane_diags(client, nb.cells[2]) is not None, what="checked")
    result = await diagnose(client, nb.cells[2])
    assert result["source"] == "llm" and result["cell"] == 3
    md = result["markdown"]
    assert VALID_ANSWER["explanation"] in md and "use df['age']" in md
    assert "1,000 prompt + 100 completion tokens" in md and "session: 1 request(s)" in md
    assert result["usage"]["promptTokens"] == 1000 and result["usage"]["completionTokens"] == 100
    assert result["usage"]["costUsd"] == pytest.approx(1000 * 0.15e-6 + 100 * 0.6e-6)
    assert result["session"]["requests"] == 1
    assert result["verdict"]["ename"] == "KeyError" and result["verdict"]["source"] == "llm"
    await wait_for(lambda: client.diagnoses and client.diagnoses[-1].source == "llm", what="crane/diagnosis")
    # the prompt: the executed history and the target, and the note that it failed last run
    (req,) = llm_server.requests
    user = req["body"]["messages"][-1]["content"]
    assert "pd.DataFrame" in user and "print(df['Age'])" in user and "raised an exception when it last ran" in user
    assert req["headers"].get("Authorization") == "Bearer sk-crane-lsp-test"

    # the same question again: served from the LLM layer's cache, not paid again
    again = await diagnose(client, nb.cells[2])
    assert len(llm_server.requests) == 1 and again["cached"] is True and again["session"]["cacheHits"] == 1

    # the model fails: the rules' diagnosis, with a clear note, and the server lives on
    llm_server.reset(Reply.error(400, "model not found"))
    nb.set_text(2, "x = 2\nprint(df['Age'])\n")
    await asyncio.sleep(0.1)
    failed = await diagnose(client, nb.cells[2])
    assert failed["source"] == "rules" and failed["usage"] is None
    assert "No LLM diagnosis" in failed["markdown"] and MODEL in failed["note"]
    assert "### Cell 3" in failed["markdown"]


@pytest.mark.timeout(600)
async def test_llm_mode_diagnostics_for_undecided_cells(llm_server, tmp_path):
    llm_server.reset()
    llm_server.default = Reply.answer(explanation="s.upper() fails: s is an int in this notebook.", line=2,
                                      exception="AttributeError", confidence=0.6)
    c = await start_client(
        env=llm_env(tmp_path),
        init_options={"crane": {"mode": "llm", "llm": {"model": MODEL, "apiBase": llm_server.api_base, "retries": 0}}},
    )
    try:
        t0 = time.monotonic()
        nb = Notebook(c, tmp_path / "m.ipynb", ["s = 1\n", "print('x')\nprint(s.upper())\n", "print(nope)\n"])
        nb.executed(0, order=1)
        await wait_for(lambda: crane_diags(c, nb.cells[2]), what="the rules' NameError")
        await wait_for(lambda: llm_server.requests, timeout=FIRST_REQUEST_S, what="the model asked")
        d = await wait_for(lambda: crane_diags(c, nb.cells[1]), timeout=15, what="the model's diagnostic")
        # debounced: asked no sooner than 2 s after the cell came (the request's own arrival time: "nothing asked
        # yet" read when the rules' diagnostic came raced a loaded machine, where that took longer than 2 s)
        assert llm_server.requests[0]["at"] - t0 >= 2.0
        # issue 32: nothing checked the claim: the model's suspicion, an Information (confidence capped)
        assert d[0].code == "llm-suspicion" and d[0].source == "crane"
        assert d[0].severity == types.DiagnosticSeverity.Information
        assert d[0].message.startswith("AttributeError: s.upper() fails") and d[0].range.start.line == 1
        # asked about the undecided never-run cell only: not the executed one, not the one the rules decided
        assert len(llm_server.requests) == 1
        assert "print(s.upper())" in llm_server.requests[0]["body"]["messages"][-1]["content"]
        assert crane_diags(c, nb.cells[2])[0].code == "undefined-name"
        # typing, then back to the same text: no new question
        nb.set_text(1, "print('y')\n")
        await asyncio.sleep(0.3)
        nb.set_text(1, "print('x')\nprint(s.upper())\n")
        await wait_for(lambda: (d := crane_diags(c, nb.cells[1])) and d[0].code == "llm-suspicion",
                       what="cached answer shown")
        await asyncio.sleep(2.5)
        # no new question about the same text (a pause of the test past the 2 s delay between the two edits may
        # have asked about the passing text: a legitimate question, not this one)
        asked = [r for r in llm_server.requests if "print(s.upper())" in r["body"]["messages"][-1]["content"]]
        assert len(asked) == 1, llm_server.requests
    finally:
        await stop_client(c)


def test_server_start_imports_no_litellm():
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "from crane.lsp.server import server\n"
        "from lsprotocol import types\n"
        "from crane.lsp import lifecycle\n"
        "server.window_show_message = lambda *a: None\n"
        "lifecycle.initialize(server, types.InitializeParams(capabilities=types.ClientCapabilities(),"
        " initialization_options={'crane': {'mode': 'llm', 'llm': {'model': 'openai/x', 'apiBase': 'http://127.0.0.1:9/v1'}}}))\n"
        "assert server.settings.llm.model == 'openai/x'\n"
        "print(json.dumps({'litellm': 'litellm' in sys.modules, 's': time.perf_counter() - t}))\n"
    )
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO / "server"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["litellm"] is False
