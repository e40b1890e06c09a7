"""The server's `exit` while litellm's import is under way (a model request's first step): the process ends
promptly, without waiting for the import: after `shutdown` and `exit` (code 0), after `exit` alone (no `shutdown`
first: an editor that gives up on its server; code 1, the LSP's) and when its stdin closes (the editor died; code
1). The import is held (never let finish) by a finder that the server's interpreter installs at start (a
`sitecustomize` on its path): it blocks the import of `litellm` on a FIFO no one opens, as a slow import on a
loaded machine would, only for ever. Real server over stdio, real
model request path (mode llm, a never-run cell no rule decides); the test waits on the server's log line that
the import started, never on time."""

from __future__ import annotations

import asyncio
import os

import pytest
from pytest_lsp.client import LanguageClient

from .conftest import REPO, TIMEOUT_SCALE, Notebook, start_client, stop_client, wait_for
from .test_llm import FIRST_REQUEST_S, MODEL, llm_env

HOLD = '''import os, sys


class _HoldLitellm:
    """Blocks the first import of litellm until the FIFO is opened for writing (the test never does)."""

    def find_spec(self, name, path=None, target=None):
        if name == "litellm" and self in sys.meta_path:
            sys.meta_path.remove(self)
            open(os.environ["CRANE_TEST_LITELLM_HOLD"]).close()
        return None


sys.meta_path.insert(0, _HoldLitellm())
'''


async def _held_import(tmp_path) -> LanguageClient:
    """A server in mode llm whose import of litellm, begun by a model request, never ends."""
    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    (hold_dir / "sitecustomize.py").write_text(HOLD)
    fifo = tmp_path / "litellm-hold"
    os.mkfifo(fifo)
    env = {**llm_env(tmp_path), "PYTHONPATH": os.pathsep.join([str(hold_dir), str(REPO / "server")]),
           "CRANE_TEST_LITELLM_HOLD": str(fifo)}
    c = await start_client(
        env=env,
        init_options={"crane": {"mode": "llm", "llm": {"model": MODEL, "apiBase": "http://127.0.0.1:9/v1",
                                                        "retries": 0}}},
    )
    try:
        nb = Notebook(c, tmp_path / "m.ipynb", ["s = 1\n", "print(s)\n"])
        nb.executed(0, order=1)
        await wait_for(lambda: any("importing litellm" in m.message for m in c.log_messages),
                       timeout=FIRST_REQUEST_S, what="the server's log line that litellm's import started")
    except BaseException:
        await stop_client(c)
        raise
    return c


async def _ends_alone(c: LanguageClient, after: str) -> int:
    """The server's exit code once it has ended by itself (scaled like stop_client's bound); killed and failed
    when it has not."""
    server = c._server
    assert server is not None
    bound = 10 * TIMEOUT_SCALE
    try:
        await asyncio.wait_for(server.wait(), timeout=bound)
    except TimeoutError:
        raise AssertionError(f"the server had not exited {bound:g} s after {after}") from None
    finally:
        if server.returncode is None:
            server.kill()
        await c.stop()
    code = server.returncode
    assert code is not None  # it has ended
    return code


@pytest.mark.timeout(300)
async def test_exit_does_not_wait_for_the_litellm_import(tmp_path):
    c = await _held_import(tmp_path)
    await stop_client(c)  # shutdown, exit: fails (and kills the server) when it has not exited within its bound
    assert c._server is not None and c._server.returncode == 0


@pytest.mark.timeout(300)
async def test_exit_without_shutdown_does_not_wait_for_the_litellm_import(tmp_path):
    c = await _held_import(tmp_path)
    c.exit(None)
    code = await _ends_alone(c, "`exit` without `shutdown`")
    assert code == 1, f"exit code {code}: the LSP's 1 for an `exit` without `shutdown` (negative: killed by a signal)"


@pytest.mark.timeout(300)
async def test_closed_stdin_does_not_wait_for_the_litellm_import(tmp_path):
    c = await _held_import(tmp_path)
    assert c._server is not None and c._server.stdin is not None
    c._server.stdin.close()
    code = await _ends_alone(c, "its stdin closed")
    assert code == 1, f"exit code {code}: 1 for an input that ended without `shutdown` (negative: killed by a signal)"
