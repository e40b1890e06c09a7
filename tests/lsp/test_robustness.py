"""The daemon never dies from a bad message: hypothesis-generated notebook notifications (valid, half-valid
and garbage), malformed JSON-RPC, unknown cells; afterwards it still answers and still diagnoses.

Driven over raw stdio JSON-RPC (not pytest-lsp), so that invalid messages reach the server as sent and
every byte the server writes to stdout is checked to be a well-formed LSP message."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from .conftest import REPO, SERVER_CMD, TIMEOUT_SCALE

NB = "file:///tmp/crane-fuzz/nb.ipynb"
CELLS = [f"vscode-notebook-cell:/tmp/crane-fuzz/nb.ipynb#W{i}sZmlsZQ%3D%3D" for i in range(4)]
URIS = [NB, *CELLS, "", "untitled:Untitled-1.ipynb", "file:///tmp/a%20b.ipynb", "vscode-notebook-cell:/x#%ZZ", "x"]


class RawServer:
    """The server as a subprocess, spoken to with raw Content-Length framed JSON."""

    def __init__(self, tmp_path) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO / "server"), JUPYTER_RUNTIME_DIR=str(tmp_path))
        env.pop("XDG_RUNTIME_DIR", None)
        self.proc = subprocess.Popen(SERVER_CMD, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.inbox: queue.Queue = queue.Queue()
        self.bad_output: list[bytes] = []
        self._id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None  # stdout=PIPE
        while True:
            header = out.readline()
            if not header:
                return
            if not header.startswith(b"Content-Length: "):
                self.bad_output.append(header)
                continue
            length = int(header.split(b":")[1])
            while out.readline() not in (b"\r\n", b""):
                pass
            body = out.read(length)
            try:
                self.inbox.put(json.loads(body))
            except ValueError:
                self.bad_output.append(body)

    def send_raw(self, body: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None  # stdin=PIPE
        stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        stdin.flush()

    def notify(self, method: str, params) -> None:
        self.send_raw(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode())

    def request(self, method: str, params, timeout: float = 10.0) -> dict:
        self._id += 1
        rid = self._id
        self.send_raw(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode())
        return self.wait(lambda m: m.get("id") == rid and "method" not in m, timeout)

    def wait(self, pred, timeout: float = 10.0) -> dict:
        # a bound on a failure, scaled on loaded machines like the other LSP tests' waits (a server's first start
        # under load, compiling its sources, took over 10 s to answer initialize)
        deadline = time.monotonic() + timeout * TIMEOUT_SCALE
        while time.monotonic() < deadline:
            try:
                msg = self.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if "method" in msg and "id" in msg:  # server → client request (progress create...): accept
                self.send_raw(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": None}).encode())
            if pred(msg):
                return msg
        raise AssertionError("no matching message from the server")

    def close(self) -> None:
        try:
            self.request("shutdown", None, timeout=5)
            self.notify("exit", None)
            self.proc.wait(5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = RawServer(tmp_path_factory.mktemp("fuzz-runtime"))
    caps = {"notebookDocument": {"synchronization": {"dynamicRegistration": True, "executionSummarySupport": True}}}
    s.request("initialize", {"processId": None, "rootUri": None, "capabilities": caps})
    s.notify("initialized", {})
    yield s
    s.close()


# -- strategies -------------------------------------------------------------------------------------------
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.text(max_size=20))
junk = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8)
uri = st.sampled_from(URIS)
source = st.one_of(
    st.sampled_from(["x = 1\n", "print(y)\n", "def f(:\n", "import nope_mod\n", "%matplotlib inline\n!ls\n", "", "\x00", "é" * 50]),
    st.text(max_size=200),
)
position = st.fixed_dictionaries({"line": st.integers(-1, 5), "character": st.integers(-1, 50)})
text_item = st.fixed_dictionaries({"uri": uri, "languageId": st.sampled_from(["python", "markdown", "r"]), "version": st.integers(0, 9), "text": source})
cell = st.fixed_dictionaries({"kind": st.sampled_from([1, 2, 7]), "document": uri}, optional={"executionSummary": st.fixed_dictionaries({"executionOrder": st.integers(0, 5)}, optional={"success": st.booleans()})})

did_open = st.fixed_dictionaries(
    {
        "notebookDocument": st.fixed_dictionaries({"uri": uri, "notebookType": st.sampled_from(["jupyter-notebook", "interactive"]), "version": st.integers(0, 9), "cells": st.lists(cell, max_size=4)}),
        "cellTextDocuments": st.lists(text_item, max_size=4),
    }
)
content_change = st.fixed_dictionaries(
    {
        "document": st.fixed_dictionaries({"uri": uri, "version": st.integers(0, 99)}),
        "changes": st.lists(
            st.one_of(
                st.fixed_dictionaries({"text": source}),
                st.fixed_dictionaries({"range": st.fixed_dictionaries({"start": position, "end": position}), "text": source}),
            ),
            max_size=2,
        ),
    }
)
structure = st.fixed_dictionaries(
    {"array": st.fixed_dictionaries({"start": st.integers(-2, 6), "deleteCount": st.integers(0, 6)}, optional={"cells": st.lists(cell, max_size=2)})},
    optional={"didOpen": st.lists(text_item, max_size=2), "didClose": st.lists(st.fixed_dictionaries({"uri": uri}), max_size=2)},
)
did_change = st.fixed_dictionaries(
    {
        "notebookDocument": st.fixed_dictionaries({"uri": uri, "version": st.integers(0, 99)}),
        "change": st.fixed_dictionaries(
            {},
            optional={
                "cells": st.fixed_dictionaries(
                    {}, optional={"structure": structure, "data": st.lists(cell, max_size=2), "textContent": st.lists(content_change, max_size=2)}
                ),
                "metadata": junk,
            },
        ),
    }
)
ident = st.fixed_dictionaries({"notebookDocument": st.fixed_dictionaries({"uri": uri})})
did_close = st.fixed_dictionaries({"notebookDocument": st.fixed_dictionaries({"uri": uri}), "cellTextDocuments": st.lists(st.fixed_dictionaries({"uri": uri}), max_size=3)})

message = st.one_of(
    st.tuples(st.just("notebookDocument/didOpen"), st.one_of(did_open, junk)),
    st.tuples(st.just("notebookDocument/didChange"), st.one_of(did_change, did_change, junk)),
    st.tuples(st.just("notebookDocument/didSave"), st.one_of(ident, junk)),
    st.tuples(st.just("notebookDocument/didClose"), st.one_of(did_close, junk)),
)


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # shrinking a server session takes minutes; the example is printed
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(message, min_size=1, max_size=8), uri, position)
def test_fuzzed_notebook_notifications_never_kill_the_server(server, messages, hover_uri, pos):
    for method, params in messages:
        server.notify(method, params)
    reply = server.request("textDocument/hover", {"textDocument": {"uri": hover_uri}, "position": pos})
    assert "result" in reply or "error" in reply
    reply = server.request("workspace/executeCommand", {"command": "crane.checkNotebook", "arguments": [NB]})
    assert "result" in reply or "error" in reply
    assert server.proc.poll() is None
    assert server.bad_output == []


def test_malformed_json_rpc_and_still_diagnosing(server):
    server.send_raw(b"{not json")
    server.send_raw(b'{"jsonrpc": "2.0", "id": 999, "method": "textDocument/hover", "params": {"textDocument": 5}}')
    server.send_raw(json.dumps({"jsonrpc": "2.0", "id": 1000, "method": "crane/attachKernel", "params": [1, 2]}).encode())
    server.send_raw(json.dumps({"jsonrpc": "2.0", "id": 1001, "method": "workspace/executeCommand", "params": {"command": "crane.diagnoseCell", "arguments": [{"x": 1}]}}).encode())
    assert "error" in server.wait(lambda m: m.get("id") == 1000)
    assert "error" in server.wait(lambda m: m.get("id") == 1001)
    # still alive and still diagnosing a well-formed notebook
    nb = "file:///tmp/crane-fuzz/after.ipynb"
    cell_uri = "vscode-notebook-cell:/tmp/crane-fuzz/after.ipynb#W0sZmlsZQ%3D%3D"
    server.notify(
        "notebookDocument/didOpen",
        {
            "notebookDocument": {"uri": nb, "notebookType": "jupyter-notebook", "version": 1, "cells": [{"kind": 2, "document": cell_uri}]},
            "cellTextDocuments": [{"uri": cell_uri, "languageId": "python", "version": 1, "text": "print(not_defined_anywhere)\n"}],
        },
    )
    msg = server.wait(
        lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == cell_uri and m["params"]["diagnostics"],
        timeout=15,
    )
    assert msg["params"]["diagnostics"][0]["code"] == "undefined-name"
    assert server.proc.poll() is None and server.bad_output == []
