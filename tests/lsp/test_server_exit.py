"""The server's exit after `shutdown` and `exit` (crane.commands.serve._leave): it ends with code 0 (1 without the
`shutdown`, the LSP's code), and what it started ends with it: the kernel's warm sandbox worker (a child of the
server) is gone once the process has exited, while the user's kernel, which the server did not start, is still
there and still answers."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from .conftest import Kernel, Notebook, attach, start_client, stop_client, wait_for
from .test_exit_during_import import _ends_alone
from .test_prewarm_lsp import _mapped, _workers

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")


async def test_exit_ends_what_the_server_started(runtime_dir, tmp_path):
    notebook = tmp_path / "exit.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    kernel = Kernel(runtime_dir, notebook)
    try:
        client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path / "empty")}, mode="auto",
                                    init_options={"crane": {"sandbox": "portable"}})
        server = client._server
        assert server is not None
        try:
            nb = Notebook(client, Path(notebook), ["# notes only"], kinds=["markdown"])
            await attach(client, nb, kernel)
            kernel.run("import pandas as pd")
            workers = await wait_for(lambda: [w for w in _workers(server.pid) if _mapped(w, "/pandas/")] or None,
                                     timeout=120, what="a warm worker for the kernel")
        finally:
            await stop_client(client)
        assert server.returncode == 0  # a clean shutdown, then exit
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert alive == [], alive  # the worker the server started ended with it
        assert kernel.run("1 + 1").status == "ok"  # the user's kernel did not
    finally:
        kernel.shutdown()


@pytest.mark.parametrize("how", ["exit", "stdin closed"])
async def test_leaving_without_shutdown_exits_with_code_1(tmp_path, how):
    """The LSP's exit code: 1 when the client sends `exit` without a `shutdown` request before it (an editor that
    gives up on its server), and when its input ends without one (the editor died); 0 only after `shutdown`."""
    client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)})
    server = client._server
    assert server is not None and server.stdin is not None
    if how == "exit":
        client.exit(None)
    else:
        server.stdin.close()
    code = await _ends_alone(client, how)
    assert code == 1, f"exit code {code} after {how} without shutdown (negative: killed by a signal)"
