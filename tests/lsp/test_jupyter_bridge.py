"""The server's side of reaching a kernel owned by Microsoft's Jupyter extension (issue 12), with real
ipykernels and the real server:

- the question the VS Code client asks through the extension's kernels API (`CONNECTION_FILE_PROBE` in
  vscode-client/src/common/jupyterApi.ts), sent as that API sends it (`silent=False, store_history=False`),
  prints the connection file and changes nothing the user owns;
- naming the live file already attached changes only how the kernel is said to be found (defect 2);
- the extension's own requests on the user's session are not user runs: only an advancing execution count
  is (defect 3);
- a restart that replaces the process and its connection file lets the old kernel go at once, and the new
  file is attached when the client names it (defect 1);
- discovery looks in the extension's fallback folder and in the classic runtime folder whatever
  `JUPYTER_DATA_DIR`/`XDG_DATA_HOME` say (defect 7).
"""

from __future__ import annotations

import json
import os
import re
import signal
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from crane.lsp.discovery import runtime_dirs
from crane.lsp.messages import AttachKernelParams, InvalidParams, decode_params
from tests.sacred import kernel_state

from .conftest import Kernel, Notebook, crane_diags, last_status, start_client, stop_client, wait_for

REPO = Path(__file__).resolve().parents[2]
EMPTY_NB = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def client_probe() -> str:
    source = (REPO / "vscode-client" / "src" / "common" / "jupyterApi.ts").read_text(encoding="utf-8")
    m = re.search(r'CONNECTION_FILE_PROBE =\s*"((?:[^"\\]|\\.)*)"', source)
    assert m, "CONNECTION_FILE_PROBE not found in jupyterApi.ts"
    return json.loads(f'"{m.group(1)}"')


def run_like_the_jupyter_extension(conn, code: str) -> tuple[str, list[str]]:
    """One `execute_request` as vscode-jupyter sends its own or another extension's code on the user's
    session (`executeSilentlyAndEmitOutput`); returns its stdout and the iopub message types it caused."""
    client = conn.client
    msg_id = client.execute(code, silent=False, store_history=False, allow_stdin=False, stop_on_error=False)
    stdout, types = [], []
    while True:
        msg = client.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        types.append(msg["msg_type"])
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            stdout.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert_reply_ok(client, msg_id, 30)
    return "".join(stdout), types


def assert_reply_ok(client, msg_id: str, timeout: float) -> None:
    """Read the shell channel up to `msg_id`'s reply and check that it ran."""
    reply = client.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=timeout)
    assert reply["content"]["status"] == "ok", reply["content"]


def notebook_file(d: Path, name: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text(EMPTY_NB)
    return p


async def attach(client, nb: Notebook, connection_file: str, source: str = "jupyter-extension"):
    return await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": connection_file, "source": source}
    )


def logs(client) -> list[str]:
    return [m.message for m in client.log_messages]


@asynccontextmanager
async def live_name_error(tmp_path: Path, name: str):
    """A kernel of the test's, the server attached to it for a notebook whose cell reads an undefined name, the
    live NameError published: yields (kernel, client, notebook, the kernel's execution count then)."""
    rt = tmp_path / "rt"
    rt.mkdir()
    nbp = notebook_file(tmp_path / "nb", name)
    kernel = Kernel(rt, nbp)
    client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path / "empty")})
    try:
        nb = Notebook(client, nbp, ["print(zz_var)\n"])
        assert (await attach(client, nb, kernel.connection_file, "request")).attached
        await wait_for(lambda: (d := crane_diags(client, nb.cells[0])) and d[0].data["facts"] == "live", what="live NameError")
        yield kernel, client, nb, kernel.conn.evaluate("get_ipython().execution_count")
    finally:
        await stop_client(client)
        kernel.shutdown()


def test_the_probe_prints_the_connection_file_and_leaves_the_user_state_alone(tmp_path):
    from crane.kernel.manager import start_kernel

    owned = start_kernel(tmp_path)
    try:
        conn = owned.connection
        conn.run_cell("x = 41 + 1\nx")  # a user cell: In[1], Out[1], `_` = 42
        conn.run_cell("import os")
        before = kernel_state(conn)
        underscores = conn.evaluate("(id(_), _, _i, _ii)")

        stdout, types = run_like_the_jupyter_extension(conn, client_probe())

        assert stdout.strip() == owned.manager.connection_file
        assert "execute_result" not in types and "error" not in types
        assert kernel_state(conn) == before  # keys, ids, count, In, Out, history session
        assert conn.evaluate("(id(_), _, _i, _ii)") == underscores
        assert before["count"] == 3  # the next user cell is still In[3]
    finally:
        owned.shutdown()


async def test_naming_the_attached_kernel_again_changes_only_how_it_was_found(tmp_path):
    """Defect 2: a second attach of the same live file must not reconnect, re-identify nor re-check."""
    rt = tmp_path / "rt"
    rt.mkdir()
    nbp = notebook_file(tmp_path / "nb", "same.ipynb")
    kernel = Kernel(rt, nbp)
    client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(rt)})
    try:
        nb = Notebook(client, nbp, ["print(undefined_q)\n"])
        status = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.kernel is not None and s, timeout=20, what="discovered")
        assert status.kernel.source == "discovery"
        await wait_for(lambda: crane_diags(client, nb.cells[0]), what="live NameError")
        attaches = sum("attached to" in m and "(discovery" in m for m in logs(client))
        assert attaches == 1

        result = await attach(client, nb, kernel.connection_file)
        assert result.attached and result.message.startswith("already attached")
        assert result.kernel.source == "jupyter-extension"
        s = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.kernel.source == "jupyter-extension" and s, what="source")
        assert "through the Jupyter extension" in s.message
        for _ in range(3):  # every cell run used to re-attach
            again = await attach(client, nb, kernel.connection_file)
            assert again.attached and again.message.startswith("already attached")
        assert not [m for m in logs(client) if re.search(r"attached to .*\(jupyter-extension", m)]  # no new connection
    finally:
        await stop_client(client)
        kernel.shutdown()


async def test_only_an_advancing_execution_count_is_a_user_run(tmp_path):
    """Defect 3: the Jupyter extension's own requests (startup code, variables view, other extensions' code)
    go through the user's session with store_history=False: not user runs (no re-check, no identity check)."""
    async with live_name_error(tmp_path, "runs.ipynb") as (kernel, client, nb, count):
        # one after the other, each seen before the next: a request whose end is read while another request
        # runs counts as a run (the count cannot be read then; re-checking is the safe side), see below
        run_like_the_jupyter_extension(kernel.conn, "print('the variables view')")
        await wait_for(lambda: sum("not a user run" in m for m in logs(client)) == 1, what="the first request seen")
        run_like_the_jupyter_extension(kernel.conn, "_vscode_tmp = 1\ndel _vscode_tmp")
        await wait_for(lambda: sum("not a user run" in m for m in logs(client)) == 2, what="both requests seen")
        assert not [m for m in logs(client) if "kernels: a user run" in m]
        assert kernel.conn.evaluate("get_ipython().execution_count") == count

        # The user's next cell runs under the same count the extension's requests carried: it is a run.
        kernel.run("zz_var = 1")
        await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="NameError gone after the user's run")
        assert [m for m in logs(client) if f"kernels: a user run (count {count})" in m]
        assert last_status(client, nb.uri).state in ("idle", "attached")


async def test_a_request_read_while_another_runs_is_not_taken_for_a_restart(tmp_path):
    """The CI failure of stop 47: the extension's request ended while its next one already ran, so the count
    could not be read and the first was counted as a run (the safe side); the second, under the same count,
    then read as "the count went back" and the daemon let a live kernel go as restarted. A request whose
    count is unconfirmed only says the kernel had reached that count."""
    async with live_name_error(tmp_path, "queued.ipynb") as (kernel, client, nb, count):
        c = kernel.conn.client
        # both queued at once: the second (5 s) runs when the first's end is read, and the daemon's own question
        # for the count waits behind it past its 1 s limit
        first = c.execute("import time; time.sleep(0.2)", silent=False, store_history=False, allow_stdin=False)
        second = c.execute("time.sleep(5)", silent=False, store_history=False, allow_stdin=False)
        for msg_id in (first, second):
            assert_reply_ok(c, msg_id, 60)
        await wait_for(lambda: sum(f"(count {count})" in m and ("user run" in m) for m in logs(client)) == 2,
                       timeout=30, what="both requests judged")
        # the first is unconfirmed (a run, the safe side) unless the daemon, held up past the second's end, could
        # read the count after all; the second is never a run: the count stayed
        assert len([m for m in logs(client) if "kernels: a user run" in m]) <= 1
        assert [m for m in logs(client) if "not a user run" in m]
        assert not [m for m in logs(client) if "restarted" in m]
        assert len([m for m in logs(client) if "kernel_attach: attached to" in m]) == 1  # never let go
        assert last_status(client, nb.uri).state in ("idle", "attached", "busy")
        assert kernel.conn.evaluate("get_ipython().execution_count") == count


async def test_a_restart_with_a_new_connection_file_lets_the_old_kernel_go(tmp_path):
    """Defect 1 (server side): the Jupyter extension restarts a kernel by killing its process and deleting
    its connection file, then starts a new process with a new file; the client names the new one."""
    rt = tmp_path / "rt"
    rt.mkdir()
    nbp = notebook_file(tmp_path / "nb", "restart.ipynb")
    old = Kernel(rt, nbp)
    old.run("sales = 1")
    client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path / "empty")})
    new = None
    try:
        nb = Notebook(client, nbp, ["print(sales)\n"])
        assert (await attach(client, nb, old.connection_file)).attached
        await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="sales known to the kernel")

        pid = old.conn.evaluate("__import__('os').getpid()")
        Path(old.connection_file).unlink()
        os.kill(pid, signal.SIGKILL)
        s = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state == "dead" and s, timeout=60, what="let go")
        assert "connection file is gone" in s.message

        new = Kernel(rt, nbp)  # the new process, a new file
        result = await attach(client, nb, new.connection_file)
        assert result.attached and result.kernel.connectionFile == new.connection_file
        d = await wait_for(lambda: (d := crane_diags(client, nb.cells[0])) and d[0].data["facts"] == "live" and d, timeout=20, what="fresh")
        assert d[0].code == "undefined-name"  # the names are gone with the old process
        assert not [x for x in client.kernel_status if "could not attach" in x.message]  # type: ignore[attr-defined]
    finally:
        await stop_client(client)
        old.owned.shutdown()
        if new is not None:
            new.shutdown()


def test_runtime_dirs_cover_the_jupyter_extension_folders(tmp_path):
    """Defect 7: the classic folder is there whatever JUPYTER_DATA_DIR/XDG_DATA_HOME say, and the Jupyter
    extension's fallback folder in its global storage when the client names that storage."""
    storage = tmp_path / "globalStorage" / "ms-toolsai.jupyter"
    fallback = storage / "version-2025.4.1" / "jupyter" / "runtime"
    fallback.mkdir(parents=True)
    (storage / "other").mkdir()
    env = {
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jdata"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"),
        "CRANE_JUPYTER_STORAGE": str(storage),
    }
    dirs = runtime_dirs(env, "linux")
    assert dirs[:4] == [
        str(tmp_path / "run" / "jupyter" / "runtime"),
        str(tmp_path / "home" / ".local" / "share" / "jupyter" / "runtime"),
        str(fallback),
        str(tmp_path / "jdata" / "runtime"),
    ]
    env.pop("JUPYTER_DATA_DIR")
    assert str(tmp_path / "xdg" / "jupyter" / "runtime") in runtime_dirs(env, "linux")
    assert runtime_dirs({"HOME": "/Users/u"}, "darwin")[0] == "/Users/u/Library/Jupyter/runtime"
    assert runtime_dirs({"HOME": "/h", "JUPYTER_RUNTIME_DIR": str(tmp_path)}, "linux")[0] == str(tmp_path)


async def test_discovery_finds_kernels_in_the_jupyter_extension_folders(tmp_path):
    """Defect 7 end to end: one kernel in the extension's fallback folder, one in the classic folder while
    JUPYTER_DATA_DIR and XDG_DATA_HOME point elsewhere; discovery finds both."""
    storage = tmp_path / "globalStorage" / "ms-toolsai.jupyter"
    fallback = storage / "version-2025.4.1" / "jupyter" / "runtime"
    classic = tmp_path / "home" / ".local" / "share" / "jupyter" / "runtime"
    fallback.mkdir(parents=True)
    classic.mkdir(parents=True)
    nb1 = notebook_file(tmp_path / "nb", "fallback.ipynb")
    nb2 = notebook_file(tmp_path / "nb", "classic.ipynb")
    k1, k2 = Kernel(fallback, nb1), Kernel(classic, nb2)
    client = await start_client(env={
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jdata"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "empty"),
        "CRANE_JUPYTER_STORAGE": str(storage),
    })
    try:
        for path, kernel in ((nb1, k1), (nb2, k2)):
            nb = Notebook(client, path, ["print(1)\n"])
            s = await wait_for(lambda nb=nb: (s := last_status(client, nb.uri)) and s.kernel is not None and s, timeout=20, what=path.name)
            assert s.kernel.source == "discovery"
            assert s.kernel.connectionFile == kernel.connection_file
    finally:
        await stop_client(client)
        k1.shutdown()
        k2.shutdown()


def test_discovery_asks_a_young_silent_kernel_again_soon(tmp_path):
    """A kernel the Jupyter extension just started is busy (its startup, the user's first cells) when CRANE
    is declined access: its file is retried every 2 s, while an old silent file (a dead kernel) backs off."""
    from crane.lsp.discovery import SILENT_RETRY_S, Discovery

    young, old = tmp_path / "kernel-v3young.json", tmp_path / "kernel-v3old.json"
    for f in (young, old):
        f.write_text("{}")
    os.utime(old, (1_000_000, 1_000_000))
    d = Discovery(timeout=0.1)
    backoffs = {}
    for f in (young, old):
        key = d._key(str(f))
        assert key is not None
        for _ in range(4):
            d._no_answer(key)
        backoffs[f.name] = d._silent[key][1]
    assert backoffs == {"kernel-v3young.json": SILENT_RETRY_S[0], "kernel-v3old.json": SILENT_RETRY_S[0] * 8}


def test_attach_params_say_how_the_client_learned_the_file():
    p = decode_params({"notebookUri": "file:///a.ipynb", "connectionFile": "/k.json"}, AttachKernelParams)
    assert p.source == "request"
    p = decode_params({"notebookUri": "file:///a.ipynb", "connectionFile": "/k.json", "source": "jupyter-extension"}, AttachKernelParams)
    assert p.source == "jupyter-extension"
    with pytest.raises(InvalidParams, match="source"):
        decode_params({"notebookUri": "file:///a.ipynb", "connectionFile": "/k.json", "source": "discovery"}, AttachKernelParams)
