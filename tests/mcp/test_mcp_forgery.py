"""Issue 41 through the MCP tools, against a real kernel and a real `crane mcp` over stdio: a cell that writes a
forged "no-crash" record on every descriptor it finds, or rewrites CRANE's reply writer (S1), then crashes, never
comes back `no-crash` from `crane_try_code`, and `crane_fixes` never calls such a crashing cell clean; each
result says who wrote it (`integrity`); the user's kernel is unchanged."""

from __future__ import annotations

from pathlib import Path

from crane.kernel.untouched import Untouched

from ..cli.conftest import make_notebook
from ..sandbox.forgeries import REACH, S1
from .conftest import CELLS, mcp_client


def _cf(kernel) -> str:
    return str(kernel.manager.connection_file)


async def test_try_code_never_takes_a_record_the_cell_wrote(kernel, conn):
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", _cf(kernel)) as client:
            honest = (await client.call_tool("crane_try_code", {"code": "1 / 0"})).structured_content
            assert honest["outcome"] == "crash" and honest["ename"] == "ZeroDivisionError", honest
            assert honest["integrity"]["channelChecked"] is True, honest
            for name in ("fstat-fifo", "dup-every-fd"):
                code = "import os, json\n" + REACH[name] + "1 / 0\n"
                res = (await client.call_tool("crane_try_code", {"code": code})).structured_content
                assert res["outcome"] != "no-crash", res
                if res["outcome"] == "blocked":
                    assert res["reason"].startswith("the cell wrote into CRANE's result channel"), res
                    assert res["integrity"]["channelChecked"] is False, res
            tampered = (await client.call_tool("crane_try_code", {"code": S1 + "raise KeyError('orig')"}))
            assert tampered.structured_content["outcome"] in ("blocked", "crash"), tampered.structured_content
    assert check.unchanged, check.changes()


async def test_fixes_never_call_a_forging_crash_clean(kernel, conn, workdir: Path):
    forging = "import os, json\n" + S1 + REACH["fstat-fifo"] + "total = df['Price'].sum()"
    nb = make_notebook(workdir / "forging.ipynb", [*CELLS[:2], (forging, None)])
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", _cf(kernel)) as client:
            res = await client.call_tool("crane_fixes", {"notebook": str(nb), "cell": 3, "budget_s": 120})
            assert not res.is_error, res.content
            out = res.structured_content
            assert out["status"] != "clean", out
    assert check.unchanged, check.changes()
