"""Issue 42 (h5): the language server's verified quick fixes say when the crash they repair is only "likely" (a
real server over stdio, a real kernel).

The kernel refuses the fork (a stand-in `cupy`), so the speculative run and the fix search run on copies of its
state. The notebook gave `pandas.DataFrame` a property the copy cannot carry: the copy's `df.h5_tag` raises
AttributeError, which the kernel does not. The cell's diagnostic data carries the run's `certain: false` and the
reason, and its quick fix is "Use column 'h5_tags' (tested against a likely crash)", not "(tested)" (before). A
KeyError in the same kernel is certain: its fix stays "(tested)". The kernel is unchanged.
"""

from __future__ import annotations

import sys

import pytest
import pytest_asyncio

from ..likely_copy import SETUP
from ..sacred import kernel_state
from .conftest import Notebook, start_client, stop_client, wait_for
from .test_quick_fixes import actions_of, attach, fixes_ready

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")


@pytest_asyncio.fixture
async def client(kernel, tmp_path):
    kernel.run(SETUP)
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}, mode=None)  # auto: the sandbox runs
    yield c
    await stop_client(c)


async def test_a_quick_fix_verified_against_a_likely_crash_says_so(client, kernel, notebook_path):
    before = kernel_state(kernel.conn)
    nb = Notebook(client, notebook_path, ["print(df.h5_tag)\n", "print(df['h5_tag'])\n"])
    await attach(client, nb, kernel)
    likely = await wait_for(lambda: fixes_ready(client, nb.cells[0]), timeout=180, what="a fix for cell 1")
    run = (likely[0].data or {}).get("sandbox") or {}
    assert run.get("verdict") == "crash" and run.get("certain") is False, likely[0].data
    assert "patched the library class DataFrame" in (run.get("reason") or ""), run
    titles = [a.title for a in await actions_of(client, nb.cells[0], likely)]
    assert titles[0] == "Use column 'h5_tags' (tested against a likely crash)", titles
    assert not any(t.endswith("(tested)") for t in titles), titles
    certain = await wait_for(lambda: fixes_ready(client, nb.cells[1]), timeout=180, what="a fix for cell 2")
    assert "certain" not in ((certain[0].data or {}).get("sandbox") or {}), certain[0].data  # (true: omitted)
    titles = [a.title for a in await actions_of(client, nb.cells[1], certain)]
    assert titles[0] == "Use column 'h5_tags' (tested)", titles
    assert kernel_state(kernel.conn) == before
