"""auto mode against a real kernel: the sandbox confirms a rule finding with the real exception (code
"sandbox"), finds a crash the rules miss, keeps the rules' finding when it cannot decide (blocked network
access), leaves a clean never-run cell clean, follows the kernel's state; `crane.runSpeculatively`."""

from __future__ import annotations

import asyncio
import os

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from crane.lsp.messages import DiagnosticData, SpeculativeResult, decode_params
from crane.sandbox.verdict import SandboxVerdict

from ..library_versions import kernel_library
from .conftest import Notebook, crane_diags, last_status, start_client, stop_client, wait_for

SETUP = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nlst = [1, 2, 3]\n"


@pytest.fixture(scope="module")
def auto_kernel(kernel):
    kernel.run(SETUP)
    return kernel


@pytest_asyncio.fixture
async def client(auto_kernel, tmp_path):
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}, mode=None)  # the default: auto
    yield c
    await stop_client(c)


async def attach(client, nb, kernel):
    res = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": kernel.connection_file}
    )
    assert res.attached, res.message


def sandboxed(client, uri):
    d = crane_diags(client, uri)
    return d if d and d[0].data.get("sandbox") else None


def sandbox_of(diagnostic) -> SandboxVerdict:
    """A diagnostic's `data.sandbox`, decoded as the client would: the sandbox's one record, nested whole."""
    data = decode_params(diagnostic.data, DiagnosticData)
    assert isinstance(data.sandbox, SandboxVerdict), diagnostic.data
    return data.sandbox


def speculative(res) -> SandboxVerdict:
    """A `crane.runSpeculatively` result, decoded: the cell's record is its `sandbox`."""
    return decode_params(res, SpeculativeResult).sandbox


async def test_sandbox_confirms_finds_keeps_and_clears(client, auto_kernel, notebook_path):
    nb = Notebook(
        client,
        notebook_path,
        [
            "total = df['zzz'].sum()\n",  # the rules: KeyError; the sandbox confirms it
            "for i in range(5):\n    print(lst[i])\n",  # the rules miss it; the sandbox: IndexError on line 2
            "print(df.shape)\n",  # never executed, clean: stays clean
            "open('out.txt', 'w').write('x')\nimport socket\nsocket.create_connection(('127.0.0.1', 9))\n"
            "print(undefined_zz)\n",  # the write goes to a private layer, the network is blocked: the rules stand
        ],
    )
    await attach(client, nb, auto_kernel)

    d0 = await wait_for(lambda: sandboxed(client, nb.cells[0]), timeout=30, what="KeyError confirmed by the sandbox")
    assert d0[0].code == "sandbox" and d0[0].source == "crane"
    assert d0[0].message.startswith("KeyError: 'zzz'") and d0[0].range.start.line == 0
    assert d0[0].severity == types.DiagnosticSeverity.Error
    v0 = sandbox_of(d0[0])
    assert v0.verdict == "crash" and v0.ename == "KeyError" and d0[0].data["ename"] == "KeyError"

    d1 = await wait_for(lambda: sandboxed(client, nb.cells[1]), timeout=30, what="IndexError found by the sandbox")
    assert d1[0].code == "sandbox" and d1[0].message.startswith("IndexError: list index out of range")
    assert d1[0].range.start.line == 1

    d3 = await wait_for(lambda: sandboxed(client, nb.cells[3]), timeout=30, what="blocked verdict on cell 4")
    assert d3[0].code == "undefined-name" and d3[0].message.startswith("NameError")  # the rules' finding stays
    v3 = sandbox_of(d3[0])
    assert v3.verdict == "blocked" and "127.0.0.1" not in (d3[0].message or "")
    assert not (notebook_path.parent / "out.txt").exists()
    assert v3.mode == "layered" and v3.scale == "full" and v3.denied, v3
    assert crane_diags(client, nb.cells[2]) == []
    status = await wait_for(lambda: (last_status(client, nb.uri) or None) and getattr(last_status(client, nb.uri), "sandbox", None)
                            and last_status(client, nb.uri), timeout=10, what="the sandbox mode in the kernel status")
    assert status.sandbox == "layered" and status.sandboxReason is None

    # on demand, with the captured output
    res = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.runSpeculatively", arguments=[nb.cells[1]])
    )
    v = speculative(res)
    assert v.verdict == "crash" and v.ename == "IndexError" and v.line == 2
    assert v.stdout == "1\n2\n3\n" and res["cellUri"] == nb.cells[1] and res["cell"] == 2
    assert "IndexError" in res["markdown"] and "stdout" in res["markdown"] and "1\n2\n3" in res["markdown"]
    clean = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.runSpeculatively", arguments=[nb.cells[2]])
    )
    v = speculative(clean)
    assert v.verdict == "no-crash" and v.stdout == "(3, 1)\n" and v.ename is None
    shown = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.runSpeculatively", arguments=[{"cellUri": nb.cells[0]}])
    )
    assert speculative(shown).verdict == "crash" and speculative(shown).ename == "KeyError"
    nb.set_text(2, "df.a.sum()\n")
    out = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.runSpeculatively", arguments=[nb.cells[2]])
    )
    # the kernel's own repr of a numpy scalar (the kernel runs this interpreter): numpy 2 writes np.int64(6)
    six = "np.int64(6)" if kernel_library("numpy") >= (2, 0) else "6"
    assert [(d.kind, d.text) for d in speculative(out).displays] == [("execute_result", six)]

    # the user's kernel changes: the sandbox's crash on cell 2 no longer holds
    auto_kernel.run("lst.extend([4, 5])")
    await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], timeout=30, what="IndexError gone after the kernel changed")
    auto_kernel.run("del lst[3:]")
    await wait_for(lambda: sandboxed(client, nb.cells[1]), timeout=30, what="IndexError back")

    # an edit: the new text is checked (rules first, then the sandbox)
    nb.set_text(0, "total = df['a'].sum()\n")
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], timeout=30, what="cleared after the fix")


async def test_run_speculatively_needs_a_kernel(tmp_path):
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}, mode=None)
    try:
        nb = Notebook(c, tmp_path / "nokernel.ipynb", ["x = 1\n"])
        await wait_for(lambda: crane_diags(c, nb.cells[0]) is not None, what="checked")
        with pytest.raises(JsonRpcException, match="needs an attached kernel"):
            await c.workspace_execute_command_async(
                types.ExecuteCommandParams(command="crane.runSpeculatively", arguments=[nb.cells[0]])
            )
        with pytest.raises(JsonRpcException, match="not a cell of an open notebook"):
            await c.workspace_execute_command_async(
                types.ExecuteCommandParams(command="crane.runSpeculatively", arguments=["vscode-notebook-cell:/x#y"])
            )
    finally:
        await stop_client(c)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


async def test_a_speculation_stops_when_the_user_runs_a_cell(client, auto_kernel, notebook_path):
    # while a speculative run lasts, every page the user's cell changes is copied: it must end at once
    nb = Notebook(client, notebook_path, ["import time\ntime.sleep(120)\n"])
    await attach(client, nb, auto_kernel)
    kpid = auto_kernel.conn.evaluate("__import__('os').getpid()")
    task = asyncio.ensure_future(client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="crane.runSpeculatively", arguments=[nb.cells[0]])))
    await wait_for(lambda: _children(kpid), timeout=60, what="a sandbox child of the kernel")
    auto_kernel.run("user_ran = 1")
    res = await asyncio.wait_for(task, 60)
    assert speculative(res).verdict == "unavailable" and "started running a cell" in str(res), res
    await wait_for(lambda: not _children(kpid), timeout=30, what="the sandbox's processes gone")
