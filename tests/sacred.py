"""Helpers for the tests that prove the user's kernel is sacred (sandbox, agent, LSP), on crane.kernel.untouched.

`IopubWatcher` is a second client on the kernel's iopub channel, as the user's notebook frontend would be: it
records every message in a thread, so a test can assert that CRANE sent no output (stream, display, result,
error, execute_input) — only the busy/idle status every request produces. `kernel_state` fingerprints what
the user owns: namespace keys and object ids, execution count, In, Out, the history session and the user's
IPython event callbacks (the probe adds one of its own, an execution counter, which is left out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jupyter_client import BlockingKernelClient

from crane.kernel.untouched import OUTPUT_TYPES, STATE_EXPR, IopubRecorder, kernel_state

if TYPE_CHECKING:
    from jupyter_client.connect import KernelConnectionInfo

    from crane.kernel.target import KernelTarget

__all__ = ["OUTPUT_TYPES", "STATE_EXPR", "IopubWatcher", "kernel_state"]


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
