"""`crane mcp`'s tools while another client's cell runs in the kernel (a real kernel, the real follower and its
iopub watch, the tools' backend in process): a check answers from static facts, a run is `unavailable`, facts and
fixes are a `ToolFailure`, each saying the kernel runs a cell — without sending the kernel a request that would
queue behind the cell until its timeout; once the cell ends, the facts are live again. A silent request of another
client (a front-end's probe) is no cell.

Every wait ends on an event (the watch seeing the kernel's statuses), never on the machine's speed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from crane.kernel.manager import start_kernel
from crane.mcp.backend import BUSY, Attached, KernelTools, ToolFailure
from crane.mcp.busy import BusyWatch
from crane.mcp.follow import FileLocator, KernelFollower
from crane.mcp.schemas import CheckCodeArgs, FactsArgs, FixesArgs, TryCodeArgs

from ..cli.conftest import make_notebook

WAIT_S = 120.0  # generous: the machine may be loaded


def _until(predicate: Callable[[], object], what: str, step: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, what
        if step is not None:
            step()
        time.sleep(0.05)


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[object, KernelFollower, KernelTools]]:
    kernel = start_kernel(tmp_path)
    follower = KernelFollower(FileLocator(str(kernel.manager.connection_file)))
    tools = KernelTools(Attached(conn=None, describe="the test's kernel", follow=lambda cancel: follower.connection(),
                                 busy=follower.busy, served=[str(tmp_path)]))
    try:
        yield kernel, follower, tools
    finally:
        follower.close()
        kernel.shutdown()


def test_a_busy_kernel_is_asked_nothing_and_answered_at_once(served, tmp_path):
    kernel, follower, tools = served
    kernel.connection.run_cell("v = 1", timeout=60)
    assert "v" in tools.for_call(None).facts(FactsArgs(names=["v"])).facts  # attached, watched
    user = kernel.manager.client()  # the user's front-end
    user.start_channels()
    watch = follower._watch
    assert isinstance(watch, BusyWatch)
    # the watch's subscription is live once it has seen another client's request start: the user's front-end sends
    # silent ones (nothing of the kernel's state changes), each answered before the next, until the watch saw one
    deadline = time.monotonic() + WAIT_S
    while not watch.seen:
        assert time.monotonic() < deadline, "the watch never saw the kernel's statuses"
        msg_id = user.execute("pass", silent=True, store_history=False)
        while user.get_shell_msg(timeout=WAIT_S)["parent_header"].get("msg_id") != msg_id:
            pass
    # a silent request (a front-end's or another tool's probe) is no cell: while it runs, the tools still ask
    gate = tmp_path / "silent-request-may-end"
    seen = watch.seen
    msg_id = user.execute(f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)",
                          silent=True, store_history=False)
    _until(lambda: watch.seen > seen, "the watch never saw the silent request start")
    assert not follower.busy()
    gate.write_text("open")
    while user.get_shell_msg(timeout=WAIT_S)["parent_header"].get("msg_id") != msg_id:
        pass
    flag = tmp_path / "user-cell-may-end"
    try:
        user.execute(f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.05)")
        _until(follower.busy, "the watch never saw the user's cell start")
        call = tools.for_call(None)
        static = call.check_code(CheckCodeArgs(code="v + 1", mode="static"))
        auto = call.check_code(CheckCodeArgs(code="v + 1", budget_s=5))
        run = call.try_code(TryCodeArgs(code="v + 1", budget_s=5))
        with pytest.raises(ToolFailure, match="running a cell"):
            call.facts(FactsArgs(names=["v"]))
        nb = make_notebook(tmp_path / "nb.ipynb", [("w = v + 1", None)])
        with pytest.raises(ToolFailure, match="running a cell"):
            call.fixes(FixesArgs(cell=1, notebook=str(nb)))
        assert follower.busy(), "the user's cell cannot have ended: the flag is not written"
        assert static.prediction == "unknown" and static.facts_mode == "static" and static.facts_error == BUSY, static
        assert auto.prediction == "unknown" and auto.sandbox is not None, auto
        assert auto.sandbox.outcome == "unavailable" and auto.sandbox.reason == BUSY, auto
        assert run.outcome == "unavailable" and run.reason == BUSY, run
    finally:
        flag.write_text("done")
    _until(lambda: not follower.busy(), "the watch never saw the user's cell end")
    after = tools.for_call(None).check_code(CheckCodeArgs(code="v + 1", mode="static"))
    assert after.facts_mode == "live" and after.prediction == "no-crash", after
    user.stop_channels()
