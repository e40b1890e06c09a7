"""Fixtures for the language-server tests: a real kernel (started like VS Code's, with
`__vsc_ipynb_file__` set and its connection file in a private runtime dir) and the real server over stdio
(pytest-lsp), with notebook and work-done-progress capabilities declared."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp.client import LanguageClient, make_test_lsp_client

REPO = Path(__file__).resolve().parents[2]
# The server's interpreter: the tests' own, or CRANE_SERVER_PYTHON (`make test-python` runs the tests that follow
# a kernel again with the server on every other Python the machine has: build/daemon-py3XX).
SERVER_PYTHON = os.environ.get("CRANE_SERVER_PYTHON") or sys.executable
SERVER_CMD = [SERVER_PYTHON, "-m", "crane.lsp", "--log-level", "info"]

CAPABILITIES = types.ClientCapabilities(
    notebook_document=types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities(
            dynamic_registration=True, execution_summary_support=True
        )
    ),
    window=types.WindowClientCapabilities(work_done_progress=True, show_message=None),
    text_document=types.TextDocumentClientCapabilities(
        hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(related_information=True, version_support=True),
    ),
)


class Kernel:
    """A kernel the test owns (the stand-in for the one VS Code runs)."""

    def __init__(self, runtime_dir: Path, notebook: Path):
        from crane.kernel.manager import start_kernel

        self.runtime_dir = runtime_dir
        self.notebook = notebook
        old = os.environ.get("JUPYTER_RUNTIME_DIR")
        os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime_dir)
        try:
            self.owned = start_kernel(notebook.parent)
        finally:
            if old is None:
                os.environ.pop("JUPYTER_RUNTIME_DIR", None)
            else:
                os.environ["JUPYTER_RUNTIME_DIR"] = old
        self.conn = self.owned.connection
        # VS Code's raw kernels keep their connection file in the runtime dir as kernel-v3<hex>.json
        self.connection_file = str(runtime_dir / f"kernel-v3{uuid.uuid4().hex}.json")
        shutil.copyfile(self.owned.manager.connection_file, self.connection_file)
        self.run(f"__vsc_ipynb_file__ = {str(notebook)!r}")

    def run(self, code: str):
        res = self.conn.run_cell(code, timeout=60)
        assert res.status == "ok", (res.ename, res.evalue)
        return res

    def shutdown(self) -> None:
        self.owned.shutdown()
        Path(self.connection_file).unlink(missing_ok=True)  # as VS Code does when it disposes a kernel


class TcpKernel(Kernel):
    """A kernel whose connection file (TCP, ports kept across restarts, as VS Code's raw kernels do) lives in
    the runtime dir: for the death/restart tests."""

    def __init__(self, runtime_dir: Path, notebook: Path):
        from jupyter_client import KernelManager

        from crane.kernel.client import KernelConnection
        from crane.kernel.manager import KERNEL_ENV

        self.runtime_dir = runtime_dir
        self.notebook = notebook
        self.connection_file = str(runtime_dir / f"kernel-v3{uuid.uuid4().hex}.json")
        self.km = KernelManager(connection_file=self.connection_file, transport="tcp", ip="127.0.0.1")
        spec = self.km.kernel_spec
        assert spec is not None
        spec.argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        self.km.start_kernel(cwd=str(notebook.parent), env={**os.environ, **KERNEL_ENV})
        self.conn = KernelConnection(self.km.blocking_client(), owner=self.km)
        self.conn.wait_ready(60)
        self.run(f"__vsc_ipynb_file__ = {str(notebook)!r}")

    def shutdown(self) -> None:
        self.conn.close()
        try:
            self.km.shutdown_kernel(now=True)
        except Exception:
            pass
        Path(self.connection_file).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def runtime_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runtime")


@pytest.fixture(scope="module")
def notebook_path(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("nb")
    (d / "data.csv").write_text("a,b\n1,2\n")
    p = d / "analysis.ipynb"
    p.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    return p


@pytest.fixture(scope="module")
def kernel(runtime_dir, notebook_path):
    k = Kernel(runtime_dir, notebook_path)
    yield k
    k.shutdown()


async def start_client(env: dict[str, str] | None = None, init_options: Any = None, mode: str | None = "static") -> LanguageClient:
    """The server over stdio. `mode` ("static" unless given: the rules alone, fast and deterministic; None: the
    server's default, auto) is put into the initialization options when they do not name one."""
    client = make_test_lsp_client()
    client.kernel_status = []  # type: ignore[attr-defined]
    client.diagnoses = []  # type: ignore[attr-defined]
    client.agent_steps = []  # type: ignore[attr-defined]
    if mode is not None:
        init_options = dict(init_options or {})
        section = dict(init_options.get("crane", {}))
        section.setdefault("mode", mode)
        init_options["crane"] = section

    @client.feature("crane/agentStep")
    def _step(ls, params):
        client.agent_steps.append(params)  # type: ignore[attr-defined]

    @client.feature("crane/kernelStatus")
    def _status(ls, params):
        client.kernel_status.append(params)  # type: ignore[attr-defined]

    @client.feature("crane/diagnosis")
    def _diagnosis(ls, params):
        client.diagnoses.append(params)  # type: ignore[attr-defined]

    full_env = dict(os.environ)
    full_env.pop("XDG_RUNTIME_DIR", None)
    full_env["PYTHONPATH"] = str(REPO / "server")
    full_env.update(env or {})
    await client.start_io(*SERVER_CMD, env=full_env)
    client.init_result = await client.initialize_session(  # type: ignore[attr-defined]
        types.InitializeParams(
            capabilities=CAPABILITIES,
            initialization_options=init_options,
            root_uri=None,
        )
    )
    return client


async def stop_client(client: LanguageClient) -> None:
    # the server exits once its threads end (an agent step or a sandbox run being stopped): scaled like the waits.
    # Its stderr is read until it has exited (pytest-lsp's `stop` ends that reading first, then waits for the exit
    # without end: a server still logging filled the pipe and both waited for ever); one that has not exited by
    # then is killed, and the teardown says so.
    bound = 10 * TIMEOUT_SCALE
    try:
        await asyncio.wait_for(client.shutdown_session(), timeout=bound)
    except TimeoutError:
        raise AssertionError(f"the server had not exited {bound:g} s after shutdown and exit") from None
    finally:
        server = client._server
        if server is not None and server.returncode is None:
            server.kill()
        await client.stop()


@pytest_asyncio.fixture
async def static_client(tmp_path):
    """A server that finds no kernel (an empty runtime dir)."""
    client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)})
    yield client
    await stop_client(client)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_static_client(tmp_path_factory):
    """One server that finds no kernel for a module's tests (a server's start is most of a static test's CPU):
    for tests that each open a notebook of their own, in a folder of their own, and read only its diagnostics,
    status and progress. Such a test runs in the module's event loop: `@pytest.mark.asyncio(loop_scope="module")`."""
    client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path_factory.mktemp("runtime"))})
    yield client
    await stop_client(client)


# -- notebook helpers -----------------------------------------------------------------------------------
class Notebook:
    """A notebook open in the server, driven the way vscode-languageclient does."""

    def __init__(self, client: LanguageClient, path: Path, sources: list[str], kinds: list[str] | None = None):
        self.client = client
        self.uri = path.as_uri()
        self.version = 1
        self.cells: list[str] = []
        self.sources: list[str] = list(sources)
        self.cell_versions: dict[str, int] = {}
        self._n = 0
        items = []
        nb_cells = []
        for i, src in enumerate(sources):
            uri = self._new_uri()
            self.cells.append(uri)
            self.cell_versions[uri] = 1
            kind = types.NotebookCellKind.Markup if kinds and kinds[i] == "markdown" else types.NotebookCellKind.Code
            nb_cells.append(types.NotebookCell(kind=kind, document=uri))
            items.append(
                types.TextDocumentItem(
                    uri=uri, language_id="python" if kind == types.NotebookCellKind.Code else "markdown", version=1, text=src
                )
            )
        client.notebook_document_did_open(
            types.DidOpenNotebookDocumentParams(
                notebook_document=types.NotebookDocument(
                    uri=self.uri, notebook_type="jupyter-notebook", version=1, cells=nb_cells
                ),
                cell_text_documents=items,
            )
        )

    def _new_uri(self) -> str:
        # VS Code style: the notebook path, a fragment naming the cell handle (opaque to the server)
        self._n += 1
        return self.uri.replace("file://", "vscode-notebook-cell://", 1) + f"#W{self._n}sZmlsZQ%3D%3D"

    def set_text(self, index: int, text: str) -> None:
        uri = self.cells[index]
        self.version += 1
        self.cell_versions[uri] += 1
        old = self.sources[index]
        lines = old.split("\n")
        self.sources[index] = text
        self.client.notebook_document_did_change(
            types.DidChangeNotebookDocumentParams(
                notebook_document=types.VersionedNotebookDocumentIdentifier(version=self.version, uri=self.uri),
                change=types.NotebookDocumentChangeEvent(
                    cells=types.NotebookDocumentCellChanges(
                        text_content=[
                            types.NotebookDocumentCellContentChanges(
                                document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.cell_versions[uri]),
                                changes=[
                                    types.TextDocumentContentChangePartial(
                                        range=types.Range(
                                            types.Position(0, 0), types.Position(len(lines) - 1, len(lines[-1]))
                                        ),
                                        text=text,
                                    )
                                ],
                            )
                        ]
                    )
                ),
            )
        )

    def executed(self, index: int, order: int, success: bool = True) -> None:
        """The client's execution summary for a cell that ran."""
        self.version += 1
        self.client.notebook_document_did_change(
            types.DidChangeNotebookDocumentParams(
                notebook_document=types.VersionedNotebookDocumentIdentifier(version=self.version, uri=self.uri),
                change=types.NotebookDocumentChangeEvent(
                    cells=types.NotebookDocumentCellChanges(
                        data=[
                            types.NotebookCell(
                                kind=types.NotebookCellKind.Code,
                                document=self.cells[index],
                                execution_summary=types.ExecutionSummary(execution_order=order, success=success),
                            )
                        ]
                    )
                ),
            )
        )

    def insert(self, index: int, text: str) -> str:
        uri = self._new_uri()
        self.version += 1
        self.cells.insert(index, uri)
        self.sources.insert(index, text)
        self.cell_versions[uri] = 1
        self.client.notebook_document_did_change(
            types.DidChangeNotebookDocumentParams(
                notebook_document=types.VersionedNotebookDocumentIdentifier(version=self.version, uri=self.uri),
                change=types.NotebookDocumentChangeEvent(
                    cells=types.NotebookDocumentCellChanges(
                        structure=types.NotebookDocumentCellChangeStructure(
                            array=types.NotebookCellArrayChange(
                                start=index, delete_count=0, cells=[types.NotebookCell(kind=types.NotebookCellKind.Code, document=uri)]
                            ),
                            did_open=[types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)],
                        )
                    )
                ),
            )
        )
        return uri

    def delete(self, index: int) -> str:
        uri = self.cells.pop(index)
        self.sources.pop(index)
        self.version += 1
        self.client.notebook_document_did_change(
            types.DidChangeNotebookDocumentParams(
                notebook_document=types.VersionedNotebookDocumentIdentifier(version=self.version, uri=self.uri),
                change=types.NotebookDocumentChangeEvent(
                    cells=types.NotebookDocumentCellChanges(
                        structure=types.NotebookDocumentCellChangeStructure(
                            array=types.NotebookCellArrayChange(start=index, delete_count=1),
                            did_close=[types.TextDocumentIdentifier(uri=uri)],
                        )
                    )
                ),
            )
        )
        return uri

    def close(self) -> None:
        self.client.notebook_document_did_close(
            types.DidCloseNotebookDocumentParams(
                notebook_document=types.NotebookDocumentIdentifier(uri=self.uri),
                cell_text_documents=[types.TextDocumentIdentifier(uri=u) for u in self.cells],
            )
        )


# Waits are for events (a condition polled until it holds); their timeouts only bound a failure, so they are
# scaled up on loaded machines (CI) without slowing a passing run.
TIMEOUT_SCALE = float(os.environ.get("CRANE_TEST_TIMEOUT_SCALE", "3"))


async def wait_for(predicate: Callable[..., Any], timeout: float = 10.0, what: str = "condition") -> Any:
    timeout *= TIMEOUT_SCALE
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.02)


def crane_diags(client: LanguageClient, uri: str):
    """The last diagnostics published for `uri`, or None when none were published yet."""
    d = client.diagnostics.get(uri)
    return None if d is None else list(d)


def last_status(client, notebook_uri: str | None = None):
    for s in reversed(client.kernel_status):
        if notebook_uri is None or s.notebookUri == notebook_uri:
            return s
    return None


# -- a live kernel and a server that reaches it only through crane/attachKernel ------------------------------
SETUP = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', None]})\n"


@pytest.fixture(scope="module")
def live_kernel(kernel):
    kernel.run(SETUP)
    return kernel


@pytest_asyncio.fixture
async def client(live_kernel, tmp_path):
    # An empty runtime dir: the kernel is reached only through crane/attachKernel here.
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)})
    yield c
    await stop_client(c)


async def attach(client, nb: Notebook, kernel: Kernel):
    """Attach `nb` to `kernel` by `crane/attachKernel` (as the VS Code client's kernel bridge does)."""
    result = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": kernel.connection_file}
    )
    assert result.attached, result.message
    assert result.kernel.source == "request"
    return result
