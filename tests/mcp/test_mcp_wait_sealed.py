"""Issue 41 through `crane_try_code` (a real `crane mcp` over stdio, real kernels on IPython 8 and 9): a cell that
rebinds CRANE's record writer (no-crash), patches `c_ulong.from_param` so that the code saying the cell ended its
process becomes the clean one, then ends its process (`os._exit`, `os.abort`) comes back the crash it is
(DeadKernelError): before shared/seal.wait_sealed called through the C call slot, it came back `no-crash`
(tests/sandbox/test_wait_sealed_signal.py); the same for one whose Python handler would seal again in the wait. The
user's kernel is unchanged."""

from __future__ import annotations

from crane.kernel.untouched import Untouched

from ..sandbox.test_wait_sealed_signal import CONVERTER, ENDS, RESEAL
from .conftest import mcp_client
from .test_mcp_seal_call import kernel9  # noqa: F401 - the kernels, IPython 8 and 9 (a fixture)


async def test_try_code_a_cell_that_ends_its_process_is_that_crash(kernel9):  # noqa: F811
    env, kernel = kernel9
    conn = kernel.connection
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
            for name, attack in {"converter": CONVERTER, "reseal": RESEAL}.items():
                for end in ENDS.values():
                    out = (await client.call_tool("crane_try_code", {"code": attack + end})).structured_content
                    assert (out["outcome"], out.get("ename")) == ("crash", "DeadKernelError"), (name, out)
            honest = (await client.call_tool("crane_try_code", {"code": "1 / 0"})).structured_content
            assert (honest["outcome"], honest.get("ename")) == ("crash", "ZeroDivisionError"), honest
    assert check.unchanged, (env, check.changes())
