"""Hostile code through `crane mcp`, as the real kernel would take it: a cell that kills its own process group
(the kernel's, in the kernel) is a predicted crash; a signal to the kernel's parent (the Jupyter server, the
editor) is refused and reported in `blocked`; a file deleted in the private layer is reported in `absorbed`
and stays on disk. The user's kernel is proven unchanged and alive."""

from __future__ import annotations

from pathlib import Path

from crane.kernel.untouched import Untouched

from .conftest import mcp_client


async def test_hostile_code_is_reported_as_the_kernel_would_take_it(kernel, conn, workdir):
    keep = Path(workdir) / "keep-me.txt"
    keep.write_text("precious")
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
            for code in ("import os, signal\nos.killpg(0, signal.SIGKILL)\nprint('survived')",
                         "import os, signal\nos.kill(0, signal.SIGTERM)\nprint('survived')"):
                pred = (await client.call_tool("crane_check_code", {"code": code})).structured_content
                assert pred["prediction"] == "crash" and pred["decided_by"] == "sandbox", pred
                assert pred["findings"][0]["ename"] == "DeadKernelError", pred
                assert "process group" in pred["findings"][0]["message"], pred
            parent = (await client.call_tool("crane_try_code", {
                "code": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('after')"})).structured_content
            assert parent["outcome"] == "blocked" and "after" not in parent.get("stdout", ""), parent
            assert any("kernel's parent" in b for b in parent["blocked"]), parent
            gone = (await client.call_tool("crane_try_code", {
                "code": f"import os\nos.remove({str(keep)!r})\nprint(os.path.exists({str(keep)!r}))"})
                    ).structured_content
            assert gone["outcome"] == "no-crash" and gone["stdout"].strip() == "False", gone
            assert any("keep-me.txt" in a and "private layer" in a for a in gone["absorbed"]), gone
    assert check.unchanged, check.changes()
    assert keep.read_text() == "precious" and conn.is_alive()
