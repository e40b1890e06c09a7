"""Issue 30: a passing `unavailable` (the transplant export stopped by its kernel-time cap, or because a request
waited for the kernel) is not kept for the cell's text and kernel state at once: the server tries the cell again,
`MAX_RETRIES` times, then keeps the verdict with its reason (crane.lsp.transient_stops). The server runs over
stdio against a real kernel on the transplant path (a stand-in `jax` module: the kernel refuses to fork)."""

from __future__ import annotations

import pytest
import pytest_asyncio

from crane.lsp.transient_stops import MAX_RETRIES, TransientStops
from crane.sandbox.verdict import SandboxVerdict, unavailable

from .conftest import Kernel, Notebook, crane_diags, start_client, stop_client, wait_for


@pytest.fixture(scope="module")
def transplant_kernel(runtime_dir, notebook_path):
    k = Kernel(runtime_dir, notebook_path)
    k.run("import sys, types\nsys.modules.setdefault('jax', types.ModuleType('jax'))  # no fork: transplant\n"
          "many = [(i, str(i)) for i in range(2_000_000)]")  # pickled in-band: far more than 0.2 s of CPU
    yield k
    k.shutdown()


@pytest_asyncio.fixture
async def client(transplant_kernel, tmp_path):
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}, mode=None,
                           init_options={"crane": {"speculative": {
                               "exportSeconds": 0.2, "watchedExportSeconds": 0.2}}})
    yield c
    await stop_client(c)


async def test_a_passing_stop_is_tried_again_then_kept_with_its_reason(client, transplant_kernel, notebook_path):
    """Every copy of `many` stops at its 0.2 s cap (a passing cause: the same cell may copy when the kernel is
    less busy, or with nothing queued). The verdict shown at last is the one kept after the retries, its reason
    saying how many tries stopped; the old server kept the first stop at once."""
    nb = Notebook(client, notebook_path, ["print(len(many))\nprint(undefined_zz)\n"])
    res = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": transplant_kernel.connection_file})
    assert res.attached, res.message

    def judged():
        d = crane_diags(client, nb.cells[0])
        return d if d and d[0].data.get("sandbox") else None

    d = await wait_for(judged, timeout=120, what="the sandbox's verdict on the cell")
    sandbox = d[0].data["sandbox"]
    assert d[0].code == "undefined-name", d  # the rules decide
    assert sandbox["verdict"] == "unavailable", sandbox
    assert "were not copied" in sandbox["reason"], sandbox
    assert sandbox["reason"].endswith(f"({MAX_RETRIES + 1} tries, each stopped)"), sandbox


def test_transient_stops_retry_per_text_and_state_then_keep():
    stops = TransientStops(limit=2)
    key = ("nb", "cell")
    passing = lambda: SandboxVerdict(verdict="unavailable", reason="stopped", transient=True)  # noqa: E731
    assert stops.settle(key, "a", 1, passing()) == 1
    assert stops.settle(key, "a", 1, passing()) == 2
    v = passing()
    assert stops.settle(key, "a", 1, v) == 0 and v.reason == "stopped (3 tries, each stopped)"  # kept now
    assert len(stops) == 0
    assert stops.settle(key, "a", 1, passing()) == 1  # counted afresh after a kept verdict
    assert stops.settle(key, "b", 1, passing()) == 1  # another text: afresh
    assert stops.settle(key, "b", 2, passing()) == 1  # another kernel state: afresh
    assert stops.settle(key, "b", 2, unavailable("no cloudpickle")) == 0 and len(stops) == 0  # a lasting cause
