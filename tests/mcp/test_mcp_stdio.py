"""`crane mcp` over stdio, with the MCP SDK's own client, against a real kernel: every tool, the sandbox's
confinement (a crash, a clean run, a file write and a network attempt that reach nothing), the user's kernel
proven unchanged (crane.kernel.untouched), bad arguments answered with `isError` results (an unknown tool with an
MCP error) by a server that keeps serving, and a dead kernel reported as a tool error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.mcp.tools import TOOLS

from .conftest import mcp_client, resource_text, text_of

TOOL_NAMES = {t.name for t in TOOLS}


def _cf(kernel) -> str:
    return str(kernel.manager.connection_file)


async def test_lists_tools_with_schemas_and_reads_facts(kernel, conn):
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", _cf(kernel)) as client:
            tools = (await client.list_tools()).tools
            assert {t.name for t in tools} == TOOL_NAMES
            for t in tools:
                assert t.input_schema["type"] == "object" and t.output_schema and t.output_schema["type"] == "object"
                assert t.annotations is not None and t.annotations.read_only_hint is True
            every = await client.call_tool("crane_kernel_facts", {})
            assert not every.is_error, every.content
            facts = every.structured_content["facts"]
            assert {"df", "n", "pd"} <= set(facts), facts.keys()
            assert "In" not in facts and "get_ipython" not in facts
            one = (await client.call_tool("crane_kernel_facts", {"names": ["df", "nope"]})).structured_content
            assert set(one["facts"]) == {"df"} and one["undefined"] == ["nope"]
            df = one["facts"]["df"]
            assert df["type"].endswith("DataFrame") and df["shape"] == [3, 2]
            cols = {c["name"]: c for c in df["columns"]}
            assert cols["price"]["n_nan"] == 1, cols
            text = json.loads(text_of(await client.call_tool("crane_kernel_facts", {"names": ["n"]})))
            assert text["facts"]["n"]["type"] == "int"
    assert check.unchanged, check.changes()


async def test_check_code_and_cell(kernel, conn, notebook):
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", _cf(kernel)) as client:
            static = (await client.call_tool("crane_check_code",
                                             {"code": "df['Price'].sum()", "mode": "static"})).structured_content
            assert static["prediction"] == "crash" and static["decided_by"] == "rules"
            assert static["findings"][0]["ename"] == "KeyError" and static["findings"][0]["evidence"]
            auto = (await client.call_tool("crane_check_code", {"code": "m = n * 2\nm / 0"})).structured_content
            assert auto["prediction"] == "crash" and auto["decided_by"] == "sandbox", auto
            assert auto["sandbox"]["ename"] == "ZeroDivisionError" and auto["findings"][0]["line"] == 2
            clean = (await client.call_tool("crane_check_code", {"code": "df['price'].sum()"})).structured_content
            assert clean["prediction"] == "no-crash" and clean["sandbox"]["outcome"] == "no-crash", clean
            cell = (await client.call_tool("crane_check_cell",
                                           {"notebook": str(notebook), "cell": 3})).structured_content
            assert cell["prediction"] == "crash" and cell["cell"] == 3 and cell["notebook"] == str(notebook)
            assert cell["findings"][0]["ename"] == "KeyError"
            ok = (await client.call_tool("crane_check_cell", {"notebook": str(notebook), "cell": 2,
                                                             "mode": "static"})).structured_content
            assert ok["prediction"] == "no-crash"
    assert check.unchanged, check.changes()


async def test_try_code_crash_clean_write_network(kernel, conn, workdir, listener):
    target = Path(workdir) / "written_by_agent.txt"
    before = sorted(os.listdir(workdir))
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", _cf(kernel)) as client:
            crash = (await client.call_tool("crane_try_code", {"code": "x = 1\nraise ValueError('boom')",
                                                              "budget_s": 30})).structured_content
            assert crash["outcome"] == "crash" and crash["ename"] == "ValueError" and crash["line"] == 2
            assert crash["exception"] == "ValueError: boom" and crash["traceback"]
            clean = (await client.call_tool("crane_try_code", {"code": "n = 0\ndf.loc[0, 'price'] = -1\n"
                                                              "print('n is', n, df['price'].iloc[0])"})
                     ).structured_content
            assert clean["outcome"] == "no-crash" and "n is 0 -1.0" in clean["stdout"], clean
            big = (await client.call_tool("crane_try_code", {"code": "print('x' * 100000)"})).structured_content
            assert big["stdout_truncated"] is True and len(big["stdout"]) < 20000
            write = (await client.call_tool("crane_try_code", {"code": f"open({str(target)!r}, 'w').write('hi')"})
                     ).structured_content
            assert write["outcome"] in ("no-crash", "blocked"), write  # a private layer, or refused
            net = (await client.call_tool("crane_try_code", {
                "code": f"import socket\ns = socket.create_connection(('127.0.0.1', {listener.port}), timeout=2)\n"
                        "s.sendall(b'leak')"})).structured_content
            assert net["outcome"] in ("blocked", "crash"), net
            assert net["blocked"] or net["ename"] in ("PermissionError", "OSError"), net
    assert check.unchanged, check.changes()
    assert not target.exists() and sorted(os.listdir(workdir)) == before
    assert listener.received == []
    assert conn.private({"n": "n", "p": "float(df['price'].iloc[0])"}).user_expressions["n"]["data"][
        "text/plain"] == "42"


async def test_fixes_verified_edits(kernel, conn, notebook):
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", _cf(kernel)) as client:
            res = await client.call_tool("crane_fixes", {"notebook": str(notebook), "cell": 3, "budget_s": 120})
            assert not res.is_error, res.content
            out = res.structured_content
            assert out["status"] == "fixed" and out["crash"].startswith("KeyError"), out
            first = out["fixes"][0]
            assert "df['price']" in first["new_source"] and first["old_source"] == "total = df['Price'].sum()"
            assert first["diff"].startswith("--- a/analysis.ipynb (cell 3)")
            clean = (await client.call_tool("crane_fixes", {"notebook": str(notebook), "cell": 2})).structured_content
            assert clean["status"] == "clean" and not clean.get("fixes")
    assert check.unchanged, check.changes()


async def test_bad_arguments_are_errors_and_the_server_keeps_serving(kernel, conn, notebook):
    bad: list[tuple[str, dict[str, Any]]] = [
        ("crane_try_code", {}),  # missing code
        ("crane_try_code", {"code": 3}),
        ("crane_try_code", {"code": "1", "budget_s": -1}),
        ("crane_try_code", {"code": "1", "budget_s": "soon"}),
        ("crane_check_cell", {"notebook": str(notebook), "cell": 0}),
        ("crane_kernel_facts", {"names": "df"}),
        ("crane_kernel_facts", {"surprise": 1}),
    ]
    async with mcp_client("--connection-file", _cf(kernel)) as client:
        for name, args in bad:
            res = await client.call_tool(name, args)
            assert res.is_error and "invalid arguments" in text_of(res), (name, args, res)
        with pytest.raises(MCPError) as err:
            await client.call_tool("crane_no_such_tool", {})
        assert err.value.code == -32602
        # errors of the work itself: a tool result with isError and the reason
        missing = await client.call_tool("crane_check_cell", {"notebook": str(notebook.parent / "nope.ipynb"),
                                                              "cell": 1})
        assert missing.is_error and "cannot read the notebook" in text_of(missing)
        past = await client.call_tool("crane_check_cell", {"notebook": str(notebook), "cell": 99})
        assert past.is_error and "99" in text_of(past)
        nobook = await client.call_tool("crane_fixes", {"cell": 1})
        assert nobook.is_error and "no notebook given" in text_of(nobook)
        ok = await client.call_tool("crane_kernel_facts", {"names": ["n"]})
        assert ok.structured_content["facts"]["n"]["type"] == "int"


async def test_dead_kernel_is_a_clear_tool_error(tmp_path):
    k = start_kernel(tmp_path)
    try:
        async with mcp_client("--connection-file", str(k.manager.connection_file)) as client:
            assert not (await client.call_tool("crane_kernel_facts", {})).is_error
            k.manager.shutdown_kernel(now=True)
            res = await client.call_tool("crane_try_code", {"code": "1"})
            assert res.is_error and "kernel" in text_of(res), res.content
            res = await client.call_tool("crane_kernel_facts", {})
            assert res.is_error and "kernel" in text_of(res)
            assert (await client.list_tools()).tools  # still serving
    finally:
        k.shutdown()


async def test_notebook_mode_replays_and_serves_resources(notebook, tmp_path):
    async with mcp_client("--notebook", str(notebook), "--replay-wait", "300") as client:
        facts = (await client.call_tool("crane_kernel_facts", {"names": ["n"]})).structured_content
        assert facts["facts"]["n"]["value"] == "42"
        cell = (await client.call_tool("crane_check_cell", {"cell": 3, "mode": "static"})).structured_content
        assert cell["prediction"] == "crash" and cell["notebook"] == str(notebook)
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert uris == {"crane://kernel/facts", "crane://notebook/cells"}
        cells = json.loads(resource_text(await client.read_resource("crane://notebook/cells")))
        assert [c["number"] for c in cells] == [1, 2, 3, 4] and cells[2]["source"] == "total = df['Price'].sum()"
        facts_res = json.loads(resource_text(await client.read_resource("crane://kernel/facts")))
        assert "df" in facts_res["facts"]


def test_usage_errors_exit_2(tmp_path):
    import subprocess
    import sys

    def crane_mcp(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "crane", "mcp", *args], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)

    r = crane_mcp()
    assert r.returncode == 2 and "give one kernel" in r.stderr and r.stdout == ""
    r = crane_mcp("--server", "http://127.0.0.1:1/")
    assert r.returncode == 2 and "--kernel-id" in r.stderr
    r = crane_mcp("--notebook", "x.ipynb", "--http", "0.0.0.0:1234")
    assert r.returncode == 2 and "loopback" in r.stderr


async def test_serves_other_requests_while_a_sandbox_run_goes_on(kernel):
    import time

    import anyio

    finished: dict[str, float] = {}
    async with mcp_client("--connection-file", _cf(kernel)) as client:

        async def slow() -> None:
            res = await client.call_tool("crane_try_code", {"code": "import time\ntime.sleep(4)\nprint('slept')",
                                                            "budget_s": 60})
            assert res.structured_content["outcome"] == "no-crash", res.content
            finished["run"] = time.monotonic()

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await anyio.wait_all_tasks_blocked()
            assert {t.name for t in (await client.list_tools()).tools} == TOOL_NAMES
            finished["list"] = time.monotonic()
    assert finished["list"] < finished["run"]
