"""Diagnostics that rely on stale facts are read again once the kernel can answer: never a state where the
facts are stale, the kernel is free and nothing will refresh them (the e2e `jupyter-deny` failure: the status
stayed "kernel facts stale" after the last `idle` had passed).

Real kernel, the real server over stdio. The kernel is held by events the test controls, never by time: a
completer hook in the test's kernel holds the kernel's shell until a file exists. Another client's
`complete_request` is a request CRANE's watcher does not take for a user run (the kernel is busy, but no
`idle` event follows it), as are CRANE's own sandbox exports and other clients' comm messages.
"""

from __future__ import annotations

from pathlib import Path

import pytest_asyncio

from .conftest import Kernel, Notebook, attach, crane_diags, last_status, start_client, stop_client, wait_for

HOLD = "crane_test_hold:"
REGISTER = f"""
def _register_hold():
    import os, time
    def hold(self, event=None):  # completing '{HOLD}<path>' holds the kernel's shell until <path> exists
        path, end = event.line.split({HOLD!r}, 1)[1].strip(), time.monotonic() + 300
        while not os.path.exists(path) and time.monotonic() < end:
            time.sleep(0.01)
        return []
    get_ipython().Completer.use_jedi = False
    get_ipython().set_hook("complete_command", hold, re_key=".*{HOLD}")
_register_hold()
del _register_hold
"""


@pytest_asyncio.fixture
async def quiet_client(kernel, tmp_path):
    """The server with no speculative runs: the checks alone publish, and nothing else of CRANE's runs in the
    kernel (a sandbox export would hold it too)."""
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}, init_options={"crane": {"speculative": {"enabled": False}}})
    yield c
    await stop_client(c)


def hold_shell(kernel: Kernel, release: Path) -> str:
    """Another client's `complete_request` that holds the kernel's shell until `release` exists."""
    code = f"{HOLD}{release}"
    return kernel.conn.client.complete(code, len(code))


def wait_code(release: Path) -> str:
    return f"import os, time\nwhile not os.path.exists({str(release)!r}):\n    time.sleep(0.01)\n"


def facts_of(client, uri: str) -> list[str]:
    return [d.data["facts"] for d in crane_diags(client, uri) or []]


def settled(client, nb: Notebook, count: int) -> bool:
    """`count` live diagnostics on the cell and a status that no longer says stale."""
    return facts_of(client, nb.cells[0]) == ["live"] * count and not last_status(client, nb.uri).stale


async def test_stale_facts_are_read_again_once_the_kernel_answers(quiet_client, kernel, notebook_path, tmp_path):
    client = quiet_client
    kernel.run(REGISTER)
    nb = Notebook(client, notebook_path, ["print(never_defined)\n"])
    await attach(client, nb, kernel)
    await wait_for(lambda: settled(client, nb, 1), what="NameError from live facts")

    # 1. The probe times out behind a request the watcher does not follow (no idle event will come).
    release = tmp_path / "release-1"
    hold_shell(kernel, release)
    nb.set_text(0, "print(never_defined)\nprint(also_undefined)\n")  # new names: the facts are asked for
    await wait_for(lambda: last_status(client, nb.uri).stale, what="status says stale")
    assert facts_of(client, nb.cells[0]) == ["stale"]  # only the name the last facts knew
    release.touch()
    await wait_for(lambda: settled(client, nb, 2), timeout=20, what="live facts again, the status not stale")

    # 2. A user request runs (busy), then the re-check its `idle` starts times out behind a request the
    # watcher does not follow: that was the last event; the facts are read again all the same.
    run_release, shell_release = tmp_path / "release-2", tmp_path / "release-3"
    msg_id = kernel.conn.client.execute(wait_code(run_release), silent=True, store_history=False)
    try:
        await wait_for(lambda: last_status(client, nb.uri).state == "busy", what="busy status")
        hold_shell(kernel, shell_release)  # queued behind the user request
        nb.set_text(0, "\nprint(never_defined)\nprint(also_undefined)\n")
        first = await wait_for(lambda: (x := client.diagnostics.get(nb.cells[0])) and x[0].range.start.line == 1 and x,
                               what="edit checked while busy")
        assert [d.data["facts"] for d in first] == ["stale", "stale"]
        await wait_for(lambda: last_status(client, nb.uri).stale, what="status says stale")
        run_release.touch()  # the user request ends: `idle`, and its re-check's probe waits behind the hold
        again = await wait_for(lambda: (x := client.diagnostics.get(nb.cells[0])) is not first and x,
                               what="the re-check after idle published")
        assert [d.data["facts"] for d in again] == ["stale", "stale"]
        assert last_status(client, nb.uri).stale
    finally:
        run_release.touch()
        shell_release.touch()
        kernel.conn._shell_reply(msg_id, 30, "the held run")
    await wait_for(lambda: settled(client, nb, 2), timeout=20, what="live facts again, the status not stale")
