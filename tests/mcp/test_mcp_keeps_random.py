"""Every `crane mcp` tool on a user's kernel that seeded `random` leaves that state as it was (a real `crane mcp`
over stdio, real kernels on IPython 8 and 9), with the rest of the kernel-unchanged proof.

IPython 9 draws the banner's tip of each kernel_info reply with the global `random.choice`: the server's attach
waited for the kernel with kernel_info requests and so moved the user's `random` state (it waits with comm_info
requests now; tests/kernel/test_attach_keeps_random.py has the canary)."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched

from ..cli.conftest import make_notebook
from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import CELLS, mcp_client


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def seeded(request, tmp_path_factory):
    work = tmp_path_factory.mktemp("mcprng")
    k = start_kernel(work, python=kernel_python(request.param))
    for source, count in CELLS:
        if count is not None:
            assert k.connection.run_cell(source, timeout=120).status == "ok"
    assert k.connection.run_cell("import random\nrandom.seed(9)\nu = random.random()", timeout=60).status == "ok"
    yield request.param, k, make_notebook(work / "analysis.ipynb", CELLS)
    k.shutdown()


async def test_every_tool_keeps_the_random_state(seeded):
    env, kernel, nb = seeded
    with Untouched(kernel.connection) as check:
        async with mcp_client("--connection-file", str(kernel.manager.connection_file), cwd=nb.parent) as client:
            facts = (await client.call_tool("crane_kernel_facts", {"names": ["df"]})).structured_content
            assert facts["facts"]["df"]["shape"] == [3, 2], facts
            cell = (await client.call_tool("crane_check_cell", {"cell": 3, "notebook": str(nb)})).structured_content
            assert cell["prediction"] == "crash", cell
            code = (await client.call_tool("crane_check_code", {"code": "df['x']"})).structured_content
            assert code["prediction"] == "crash", code
            run = (await client.call_tool("crane_try_code", {"code": "import random\nrandom.random()\n1 / 0"}))
            assert run.structured_content["outcome"] == "crash", run.structured_content
            fixes = (await client.call_tool("crane_fixes", {"cell": 3, "notebook": str(nb)})).structured_content
            assert fixes["status"] == "fixed", fixes
    assert check.unchanged, (env, check.changes(), check.hits)
