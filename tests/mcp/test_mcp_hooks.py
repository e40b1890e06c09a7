"""Issue 41 through the MCP tools (a real `crane mcp` over stdio, real kernels): a crashing cell that keeps a hook on
past CRANE's epilogue — a tracer on CRANE's frames (IPython 8 and 9 kernels), `sys.monitoring` callbacks (3.12 and
3.13 kernels), or, on 3.13 (PEP 667), writes into CRANE's frames' locals — never comes back `no-crash` from
`crane_try_code`, and `crane_fixes` never calls it clean: each attack makes every record it can reach say no-crash
and, where it can, the sealed read's code clean (tests/sandbox/test_sealed_session_state.py's attacks, which forged
fork sessions' replies before they ran untraced and were checked from their constants; the CLI's twin:
tests/cli/test_fix_offline_hooks.py). An honest crash stays that crash; the user's kernel is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched

from ..cli.conftest import make_notebook
from ..cli.test_fix_offline_hooks import SAFE
from ..kernel_envs import kernel_python, python_kernel
from ..sandbox.test_sealed_session_state import COMMON, MONITOR, TRACER, WRITER
from .conftest import CELLS, mcp_client

CRASHING = "total = df['Price'].sum()\n"  # (KeyError: the column is 'price')
CASES = {
    ("ipython8", "tracer"): TRACER, ("ipython9", "tracer"): TRACER,
    ("3.12", "monitoring"): MONITOR, ("3.13", "monitoring"): MONITOR,
    ("3.13", "write"): WRITER + "_write_locals()\n",
}


@pytest.fixture(scope="module", params=sorted({kernel for kernel, _ in CASES}))
def hooked_kernel(request, tmp_path_factory):
    python = kernel_python(request.param) if request.param.startswith("ipython") else python_kernel(request.param)
    workdir = tmp_path_factory.mktemp("mcphooks")
    k = start_kernel(workdir, python=python)
    for source, count in CELLS[:2]:  # (the notebook's executed cells: the kernel's state)
        assert count is not None and k.connection.run_cell(source, timeout=120).status == "ok"
    yield request.param, k, workdir
    k.shutdown()


@pytest.mark.parametrize("attack", ["tracer", "monitoring", "write"])
async def test_a_crash_with_a_hook_kept_past_the_epilogue_is_never_clean_through_mcp(hooked_kernel, attack):
    kernel_name, kernel, workdir = hooked_kernel
    if (kernel_name, attack) not in CASES:
        pytest.skip(f"{attack} is not an attack on a {kernel_name} kernel (see CASES)")
    cell = CASES[kernel_name, attack].replace(COMMON, COMMON.replace(*SAFE)) + CRASHING
    nb = make_notebook(Path(workdir) / f"hooked-{attack}.ipynb", [*CELLS[:2], (cell, None)])
    before = nb.read_bytes()
    conn = kernel.connection
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
            tried = (await client.call_tool("crane_try_code", {"code": cell})).structured_content
            assert tried["outcome"] != "no-crash", tried
            honest = (await client.call_tool("crane_try_code", {"code": CRASHING})).structured_content
            assert (honest["outcome"], honest["ename"]) == ("crash", "KeyError"), honest
            res = await client.call_tool("crane_fixes", {"notebook": str(nb), "cell": 3, "budget_s": 120})
            assert not res.is_error, res.content
            assert res.structured_content["status"] != "clean", res.structured_content
    assert check.unchanged, (kernel_name, check.changes())
    assert nb.read_bytes() == before
