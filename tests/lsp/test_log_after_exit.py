"""The server after `exit`, while a model request it started is still in flight: its logs cannot be forwarded any
more (the LSP channel is closed) and none may loop back through `window/logMessage` — each failed send was logged
as an error, which was forwarded, failed, and was logged again, a traceback on stderr per turn of the event loop
for as long as the request ran (hundreds of kilobytes; a client no longer reading stderr deadlocked the exit).
Real server over stdio, real litellm over HTTP to tests/llm's fake server, which holds its reply past the exit."""

from __future__ import annotations

import pytest

from tests.llm.fake_llm_server import FakeLLMServer, Reply

from .conftest import Notebook, start_client, stop_client, wait_for
from .test_llm import FIRST_REQUEST_S, MODEL, llm_env

HOLD_S = 4.0  # the model's reply comes this long after the request: the server exits only after it


@pytest.fixture
def llm_server():
    server = FakeLLMServer().start()
    yield server
    server.stop()


@pytest.mark.timeout(600)
async def test_logs_after_exit_are_written_once_and_never_sent_back(llm_server, tmp_path, capfd):
    # an unusable reply, held past the exit: the server logs it (after its exit) and asks again (held again)
    held = Reply(content="not a diagnosis", delay_s=HOLD_S)
    llm_server.default = held
    c = await start_client(
        env=llm_env(tmp_path),
        init_options={"crane": {"mode": "llm", "llm": {"model": MODEL, "apiBase": llm_server.api_base, "retries": 0}}},
    )
    try:
        nb = Notebook(c, tmp_path / "m.ipynb", ["s = 1\n", "print(s.upper())\n"])
        nb.executed(0, order=1)
        await wait_for(lambda: llm_server.requests, timeout=FIRST_REQUEST_S, what="the model asked")
        capfd.readouterr()  # what the server wrote before its exit
    finally:
        await stop_client(c)  # shutdown, exit, and the process's end: it waits for the held replies, then leaves
    err = capfd.readouterr().err
    assert c._server is not None and c._server.returncode == 0
    # what the server logged after its exit is on stderr once (pygls' own failed send for `exit`, then at most a
    # few of CRANE's records), not re-sent and re-logged in a loop while the reply was held
    assert err.count("Error sending data") <= 5, (err.count("Error sending data"), len(err), err[-3000:])
    assert len(err) < 64 * 1024, len(err)  # under a pipe's buffer: a client that stopped reading never blocks it
