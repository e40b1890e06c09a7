"""Issue 41 through `crane_try_code` (a real `crane mcp` over stdio, real kernels on IPython 8 and 9): a raising cell
that makes CRANE's record say no-crash and reaches the seal's own C call — its pointer class's `__call__`, an argument
converter (`c_ulong.from_param`, `argtypes` set back), or a Python signal handler set while the record is made
(tests/sandbox/test_seal_call.py) — never comes back `no-crash` (each did on the fork path before); an honest crash
still comes back a crash, a clean cell clean; the user's kernel is unchanged."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox.test_seal_call import ATTACKS, RECORD
from .conftest import mcp_client


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel9(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("mcpseal"), python=kernel_python(request.param))
    assert k.connection.run_cell("base = 1", timeout=120).status == "ok"
    yield request.param, k
    k.shutdown()


async def test_try_code_never_takes_a_seal_the_cell_reached(kernel9):
    env, kernel = kernel9
    conn = kernel.connection
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
            for name, attack in ATTACKS.items():
                res = (await client.call_tool("crane_try_code", {"code": RECORD + attack + "raise E()\n"}))
                out = res.structured_content
                assert out["outcome"] != "no-crash", (name, out)
            honest = (await client.call_tool("crane_try_code", {"code": "1 / 0"})).structured_content
            assert honest["outcome"] == "crash" and honest["ename"] == "ZeroDivisionError", honest
            clean = (await client.call_tool("crane_try_code", {"code": "y = base + 1"})).structured_content
            assert clean["outcome"] == "no-crash", clean
    assert check.unchanged, (env, check.changes())
