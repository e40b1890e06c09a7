"""Issue 45 through the real server: after the user's cell imports a library in the attached kernel, the
server starts that kernel's copy-path worker with it, before any cell is checked (the notebook has no code cell),
at background priority; it ends with the kernel. The portable sandbox is asked for, so every run needs a worker
(pandas stands for TensorFlow, whose import takes ~15 s)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from .conftest import Kernel, Notebook, attach, start_client, stop_client, wait_for

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")


def _workers(server_pid: int) -> list[psutil.Process]:
    """The server's transplant workers (their IPYTHONDIR lies in a crane-tw- home)."""
    out = []
    for p in psutil.Process(server_pid).children():
        try:
            if "crane-tw-" in p.environ().get("IPYTHONDIR", ""):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _mapped(p: psutil.Process, part: str) -> bool:
    try:
        return any(part in m.path for m in p.memory_maps(grouped=True))
    except psutil.Error:
        return False


async def test_the_kernels_worker_is_started_before_any_check(runtime_dir, tmp_path):
    notebook = tmp_path / "prewarm.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    kernel = Kernel(runtime_dir, notebook)
    client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path / "empty")}, mode="auto",
                                init_options={"crane": {"sandbox": "portable"}})
    try:
        server = client._server
        assert server is not None
        nb = Notebook(client, Path(notebook), ["# notes only: nothing to check"], kinds=["markdown"])
        await attach(client, nb, kernel)
        kernel.run("import pandas as pd")
        workers = await wait_for(lambda: [w for w in _workers(server.pid) if _mapped(w, "/pandas/")] or None,
                                 timeout=120, what="a worker that imported pandas")
        assert len(workers) == 1, workers  # one per kernel
        assert workers[0].nice() == 19
        kernel.shutdown()
        await wait_for(lambda: _workers(server.pid) == [], timeout=30, what="the worker ended with its kernel")
    finally:
        await stop_client(client)
        kernel.shutdown()
