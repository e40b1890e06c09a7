"""`crane_kernel_facts` with no names lists the user's variables through the probe (its request sealed and guarded:
kernel/hooks_off.py), never by an expression that looks names up in the notebook's namespace: a notebook that
shadows `list`, `sorted` and `isinstance` (a common slip: `list = [...]`) and keeps a trace function on got an error
or had its own code called by CRANE's listing before (the listing's `sorted(...)` and `isinstance` were the
notebook's). The list keeps the user's variables, not IPython's (`In`, `Out`, `get_ipython`), not private names;
the kernel is unchanged."""

from __future__ import annotations

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched

from .conftest import mcp_client

SETUP = """
import sys
CALLS = []
def sorted(*a, **k):
    CALLS.append('sorted')
    return []
def isinstance(*a, **k):
    CALLS.append('isinstance')
    return False
list = [3, 1, 2]
price = 4.5
_private = 1
def _tracer(frame, event, arg):  # a hook of the notebook's that sees a frame of CRANE's kernel-side code
    if event == 'call' and frame.f_code.co_filename.startswith('<crane'):
        CALLS.append('trace ' + frame.f_code.co_filename)
    return None
"""


async def test_the_listing_runs_none_of_the_notebooks_names(tmp_path):
    k = start_kernel(tmp_path)
    try:
        conn = k.connection
        assert conn.run_cell(SETUP, timeout=60).status == "ok"
        assert conn.run_cell("sys.settrace(_tracer)", timeout=60).status == "ok"
        with Untouched(conn) as watch:
            async with mcp_client("--connection-file", str(k.manager.connection_file)) as client:
                every = await client.call_tool("crane_kernel_facts", {})
        assert watch.unchanged, watch.changes()
        assert not every.is_error, every.content
        facts = every.structured_content["facts"]
        assert {"list", "price", "sorted", "isinstance", "CALLS"} <= set(facts), facts.keys()
        assert not {"In", "Out", "get_ipython", "_private", "exit"} & set(facts), facts.keys()
        assert conn.run_cell("sys.settrace(None)", timeout=60).status == "ok"
        assert conn.evaluate("CALLS[:5]") == [], conn.evaluate("len(CALLS)")
    finally:
        k.shutdown()
