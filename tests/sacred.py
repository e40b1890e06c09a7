"""Helpers for the tests that prove the user's kernel is sacred (sandbox, agent, LSP).

`IopubWatcher` is a second client on the kernel's iopub channel, as the user's notebook frontend would be: it
records every message in a thread, so a test can assert that CRANE sent no output (stream, display, result,
error, execute_input) — only the busy/idle status every request produces. `kernel_state` fingerprints what
the user owns: namespace keys and object ids, execution count, In, Out, the history session and the user's
IPython event callbacks (the probe adds one of its own, an execution counter, which is left out).
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING

from jupyter_client import BlockingKernelClient

if TYPE_CHECKING:
    from jupyter_client.connect import KernelConnectionInfo

    from crane.kernel.target import KernelTarget

OUTPUT_TYPES = {"stream", "display_data", "update_display_data", "execute_result", "error", "execute_input",
                "clear_output"}


class IopubWatcher:
    """Records iopub traffic from `connection` (connection info dict, a connection file path, or a
    `crane.kernel.target.KernelTarget`: a kernel on a Jupyter Server, watched over a websocket of its own)."""

    def __init__(self, connection: KernelConnectionInfo | str | KernelTarget):
        from crane.kernel.target import KernelTarget

        if isinstance(connection, KernelTarget):
            from crane.kernel.client import KernelConnection

            self.client = KernelConnection.watch_client(connection)
        else:
            self.client = BlockingKernelClient()
            if isinstance(connection, dict):
                self.client.load_connection_info(connection)
            else:
                self.client.load_connection_file(str(connection))
            self.client.start_channels(shell=False, stdin=False, hb=False, control=False)
        self.messages: list[dict] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                msg = self.client.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            except Exception:
                return
            self.messages.append(msg)

    def outputs(self) -> list[dict]:
        return [m for m in self.messages if m["msg_type"] in OUTPUT_TYPES]

    def clear(self) -> None:
        self.messages.clear()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(2)
        self.client.stop_channels()


STATE_EXPR = (
    "(lambda ip: {'ns': sorted((k, id(v)) for k, v in ip.user_ns.items()), 'count': ip.execution_count, "
    "'In': list(ip.user_ns.get('In', [])), 'Out': sorted(ip.user_ns.get('Out', {}).keys()), "
    "'hist': ip.history_manager.session_number, "
    "'events': sorted((e, [id(c) for c in cs if type(c).__module__ != '_crane_probe']) "
    "for e, cs in ip.events.callbacks.items())})(get_ipython())"
)


def kernel_state(conn) -> dict:
    """The fingerprint, read with one private request (which itself changes none of it)."""
    return conn.evaluate(STATE_EXPR)
