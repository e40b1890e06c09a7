"""Attaching to a user's kernel leaves its global `random` state as the user left it (IPython 8 and 9 kernels).

IPython 9's kernel_info reply carries the shell's banner, whose tip is drawn with the global `random.choice`: any
kernel_info request moves the user's `random` state. `KernelConnection.attach` (the door of `crane mcp`, the
language server's `crane/attachKernel` and discovery) waited for the kernel with kernel_info requests, so every
attach moved it on IPython 9; it waits with comm_info requests now. The canary proves the fingerprint
(`crane.kernel.untouched`, which hashes `random.getstate()`) sees what a kernel_info request does there.
"""

from __future__ import annotations

import pytest

from crane.kernel.client import KernelConnection
from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched

from ..kernel_envs import KERNEL_ENVS, kernel_python


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("attachrng"), python=kernel_python(request.param))
    assert k.connection.run_cell("import random\nrandom.seed(7)\nx = random.random()", timeout=120).status == "ok"
    yield request.param, k
    k.shutdown()


def test_attach_and_private_requests_keep_the_random_state(kernel):
    env, k = kernel
    with Untouched(k.connection) as check:
        for _ in range(2):  # a second client too: every attach waits for the kernel anew
            conn = KernelConnection.attach(str(k.manager.connection_file), timeout=60)
            try:
                assert conn.evaluate("1 + 1") == 2
            finally:
                conn.close()
    assert check.unchanged, (env, check.changes(), check.hits)


def test_canary_a_kernel_info_request_is_seen_on_ipython9(kernel):
    env, k = kernel
    conn = k.connection
    with Untouched(conn) as check:
        with conn._lock:
            msg_id = conn.client.kernel_info()
            while conn.client.get_shell_msg(timeout=60)["parent_header"].get("msg_id") != msg_id:
                pass
    if env == "ipython9":
        assert set(check.changes()) == {"rng"}, check.changes()
    else:  # IPython 8's banner has no tip
        assert check.unchanged, check.changes()
