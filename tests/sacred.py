"""Helpers for the tests that prove the user's kernel is sacred (sandbox, agent, LSP), on crane.kernel.untouched.

`IopubWatcher` is a second client on the kernel's iopub channel, as the user's notebook frontend would be: it
records every message in a thread, so a test can assert that CRANE sent no output (stream, display, result,
error, execute_input) — only the busy/idle status every request produces. `kernel_state` fingerprints what
the user owns: namespace keys and object ids, execution count, In, Out, the history session and the user's
IPython event callbacks (the probe adds one of its own, an execution counter, which is left out). `settle` waits
until a watcher holds everything the kernel published so far (before a test clears it), on an event, not a pause.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from jupyter_client import BlockingKernelClient

from crane.kernel.untouched import OUTPUT_TYPES, STATE_EXPR, IopubRecorder, kernel_state

if TYPE_CHECKING:
    from jupyter_client.connect import KernelConnectionInfo

    from crane.kernel.target import KernelTarget

__all__ = ["OUTPUT_TYPES", "STATE_EXPR", "IopubWatcher", "kernel_state", "settle"]


class IopubWatcher(IopubRecorder):
    """Records iopub traffic from `connection` (connection info dict, a connection file path, or a
    `crane.kernel.target.KernelTarget`: a kernel on a Jupyter Server, watched over a websocket of its own)."""

    def __init__(self, connection: KernelConnectionInfo | str | KernelTarget):
        if isinstance(connection, dict):
            client = BlockingKernelClient()
            client.load_connection_info(connection)
            client.start_channels(shell=False, stdin=False, hb=False, control=False)
            super().__init__(client=client)
        else:
            super().__init__(connection)


def settle(watcher: IopubRecorder, conn: Any, timeout: float = 120.0) -> None:
    """Wait until `watcher` has recorded every message the kernel published before now (a run's last outputs and its
    idle status), so that a `clear()` after it leaves none of them to arrive later. The kernel publishes in order:
    once the watcher holds the idle status of a comm_info request sent now (it reads the comm table only: no state of
    the user's moves), everything before it is in. A fixed pause lost that race on a loaded machine, where the
    watcher's thread could wait longer than the pause for a CPU. `conn` is a KernelConnection; the bound ends a
    failing test."""
    msg_id = conn.client.comm_info()
    deadline = time.monotonic() + timeout

    def answered() -> bool:
        return any(m["msg_type"] == "status" and m["content"].get("execution_state") == "idle"
                   and m["parent_header"].get("msg_id") == msg_id for m in watcher.messages)

    with watcher._seen:
        while not answered():
            left = deadline - time.monotonic()
            assert left > 0, ("the watcher never recorded the kernel's answer to a comm_info request", watcher.errors,
                              watcher._thread.is_alive())
            watcher._seen.wait(min(left, 1.0))
