"""Issue 42 (h5): `crane_fixes` says when the crash it repairs is only "likely" (`crane mcp` over stdio, a real
kernel, the MCP SDK's client).

The kernel refuses the fork (a stand-in `cupy`), so the search runs on a copy of its state. The notebook gave
`pandas.DataFrame` a property the copy cannot carry: the copy's `df.h5_tag` raises AttributeError, which the kernel
does not (it runs the cell clean). The result carries `crash_certain: false` with the reason, and every fix is
"verified against a likely crash"; a KeyError of the same kernel is `crash_certain: true`, its fixes "verified".
The kernel is unchanged (`Untouched`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched

from ..cli.conftest import make_notebook
from ..likely_copy import SETUP
from .conftest import mcp_client

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

CELLS: list[tuple[str, int | str | None]] = [(SETUP, 1), ("print(df.h5_tag)", None), ("print(df['h5_tag'])", None)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("h5-mcp")


@pytest.fixture(scope="module")
def kernel(workdir):
    k = start_kernel(workdir)
    assert k.connection.run_cell(SETUP, timeout=120).status == "ok"
    assert k.connection.run_cell(CELLS[1][0], timeout=60).status == "ok"  # (clean in the kernel)
    yield k
    k.shutdown()


async def test_crane_fixes_says_a_fix_is_verified_against_a_likely_crash(kernel, workdir):
    conn = kernel.connection
    notebook = make_notebook(workdir / "likely.ipynb", CELLS)
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
            likely = await client.call_tool("crane_fixes", {"notebook": str(notebook), "cell": 2, "budget_s": 120})
            certain = await client.call_tool("crane_fixes", {"notebook": str(notebook), "cell": 3, "budget_s": 120})
    assert check.unchanged, check.changes()
    assert not likely.is_error and not certain.is_error, (likely.content, certain.content)
    out = likely.structured_content
    assert out["status"] == "fixed" and out["crash"].startswith("AttributeError"), out
    assert out["crash_certain"] is False and "patched the library class DataFrame" in out["crash_doubt"], out
    assert out["fixes"] and all(f["verification"] == "verified against a likely crash" for f in out["fixes"]), out
    out = certain.structured_content
    assert out["status"] == "fixed" and out["crash"].startswith("KeyError"), out
    assert out["crash_certain"] is True and "crash_doubt" not in out, out
    assert out["fixes"] and all(f["verification"] == "verified" for f in out["fixes"]), out
