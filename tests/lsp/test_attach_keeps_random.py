"""The language server attached to a user's kernel (`crane/attachKernel`) and running its agent tools there
leaves the kernel's global `random` state as the user seeded it, on IPython 8 and 9 kernels.

IPython 9 draws the banner's tip of every kernel_info reply with the global `random.choice`; the attach waited for
the kernel with kernel_info requests, so attaching moved the user's `random` state (tests/kernel/
test_attach_keeps_random.py has the canary)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import Notebook, attach

SEEDED = "import random\nrandom.seed(11)\nbase = random.random()\n"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def seeded_kernel(request, notebook_path):
    k = start_kernel(notebook_path.parent, python=kernel_python(request.param))
    assert k.connection.run_cell(SEEDED, timeout=120).status == "ok"
    yield request.param, k
    k.shutdown()


async def test_attach_and_tools_keep_the_random_state(client, seeded_kernel, notebook_path):
    env, kernel = seeded_kernel
    nb = Notebook(client, notebook_path, [SEEDED, "y = base + 1\n"])
    nb.executed(0, order=1)
    with Untouched(kernel.connection) as check:
        # (attach reads the connection file alone)
        await attach(client, nb, SimpleNamespace(connection_file=str(kernel.manager.connection_file)))  # type: ignore[arg-type]
        for tool, args in (("crane_kernel_facts", {"names": ["base"]}), ("crane_try_code", {"code": "1 / 0"})):
            res = await client.protocol.send_request_async("crane/lmTool", {"notebookUri": nb.uri, "tool": tool,
                                                                            "input": args})
            assert not getattr(res, "isError", False), res.text
            if tool == "crane_try_code":
                assert json.loads(res.text)["outcome"] == "crash"
    assert check.unchanged, (env, check.changes(), check.hits)
