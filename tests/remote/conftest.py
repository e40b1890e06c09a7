"""Fixtures for the remote-kernel tests: a real Jupyter Server (jupyter_server on 127.0.0.1, with a token)
serving a temporary folder, and a "user's" kernel on it started as JupyterLab would (sessions API)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..jupyter_server_proc import JupyterServerProcess


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Path:
    """The folder the server serves (its root_dir)."""
    root = tmp_path_factory.mktemp("served") / "root"
    root.mkdir()
    (root / "project").mkdir()
    (root / "project" / "data.csv").write_text("a,b\n1,2\n")
    write_notebook(root / "project" / "analysis.ipynb")
    return root


def write_notebook(path: Path) -> Path:
    """An empty notebook file (the server's contents API must know the notebooks CRANE starts kernels for)."""
    path.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    return path


@pytest.fixture(scope="module")
def jserver(served):
    srv = JupyterServerProcess(served)
    yield srv
    srv.stop()


class UserKernel:
    """A kernel on the server opened as a notebook frontend would (a session for project/analysis.ipynb), with
    a websocket of its own, like the user's JupyterLab tab."""

    def __init__(self, srv: JupyterServerProcess, path: str = "project/analysis.ipynb"):
        from crane.kernel.client import KernelConnection
        from crane.kernel.rest import ServerAPI
        from crane.kernel.target import KernelTarget

        self.api = ServerAPI(srv.spec())
        self.session = self.api.start_session(path)
        self.kernel_id = self.session.kernel.id
        self.target = KernelTarget.remote(srv.spec(), self.kernel_id)
        self.frontend = KernelConnection.attach(self.target, timeout=60)

    def run(self, code: str):
        res = self.frontend.run_cell(code, timeout=60)
        assert res.status == "ok", (res.ename, res.evalue)
        return res

    def close(self) -> None:
        self.frontend.close()
        try:
            self.api.delete_session(self.session.id)
        except Exception:
            pass


@pytest.fixture(scope="module")
def user_kernel(jserver):
    k = UserKernel(jserver)
    yield k
    k.close()
