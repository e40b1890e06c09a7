"""`crane mcp --notebook NB`: the notebook's recorded history replayed in a fresh kernel CRANE owns, in the
background, so the server answers `initialize` and `tools/list` at once (a notebook with training cells takes
longer than any client waits for a server to start).

Tools ask `connection(cancel, wait_s)`: the kernel once the replay is done; while it goes on they wait up to
`wait_s` and then get `ReplayPending`, whose message gives the replay's progress (the check tools answer
`unknown` with it, the others a result with `isError`). A replay that failed (no kernel could start) is a
`KernelUnavailable` with the reason, on every call.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from crane.mcp.follow import KernelUnavailable

log = logging.getLogger(__name__)


class ReplayPending(KernelUnavailable):
    """The notebook's history is still replaying; the message says how far it got."""


class BackgroundReplay:
    """Start a kernel and replay `nb`'s executed history in it on a thread of its own."""

    def __init__(self, nb: Any, path: str, python: str | None = None, cell_timeout: float = 600.0):
        from crane.notebook.history import executed_history

        self.nb, self.path, self.python, self.cell_timeout = nb, path, python, cell_timeout
        self.history = executed_history(nb)
        self.done_cells = 0
        self.current: int | None = None  # the cell number replaying now
        self.failed: list[Any] = []  # HistoryRun of cells that raised
        self.error: str | None = None
        self.kernel: Any = None
        self._started = time.monotonic()
        self._ready = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="crane-mcp-replay", daemon=True)

    @property
    def describe(self) -> str:
        return f"replay of {self.path}"

    def start(self) -> BackgroundReplay:
        self._thread.start()
        return self

    def _run(self) -> None:
        from crane.engine import notebook_file
        from crane.kernel.launch import LOCAL
        from crane.kernel.replay import replay

        try:
            self.kernel = LOCAL.start(notebook_file(self.nb), python=self.python)
            if self._closed.is_set():
                self.kernel.shutdown()
                return
            for cell in self.history:
                if self._closed.is_set():
                    return
                self.current = cell.number
                (run,) = replay(self.kernel.connection, [cell], cell_timeout=self.cell_timeout)
                if run.status == "error":
                    self.failed.append(run)
                self.done_cells += 1
            self.current = None
            if self.failed:
                first = self.failed[0]
                log.warning("%d of %d replayed cells raised (first: cell %s: %s: %s)", len(self.failed),
                            len(self.history), first.number, first.ename, first.evalue)
        except Exception as exc:  # the kernel would not start, or died during the replay
            if self._closed.is_set():  # the server stopped it
                return
            log.warning("replaying %s failed: %s", self.path, exc)
            self.error = f"{type(exc).__name__}: {exc}" if not str(exc).startswith(type(exc).__name__) else str(exc)
        finally:
            self._ready.set()

    def progress(self) -> str:
        """How far the replay got, for a tool result or a progress notification."""
        elapsed = time.monotonic() - self._started
        if self.error:
            return f"the replay of {os.path.basename(self.path)} failed: {self.error}"
        if self._ready.is_set():
            return f"the notebook's history is replayed ({len(self.history)} cells)"
        name = os.path.basename(self.path)
        if self.kernel is None:
            return f"replaying the history of {name}: starting its kernel ({elapsed:.0f} s)"
        return (f"replaying the history of {name}: cell {self.current} ({self.done_cells} of {len(self.history)} "
                f"cells done, {elapsed:.0f} s)")

    def fraction(self) -> tuple[int, int]:
        return self.done_cells, max(1, len(self.history))

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.error is None

    def connection(self, cancel: threading.Event | None = None, wait_s: float = 10.0) -> Any:
        """The replayed kernel's connection; waits up to `wait_s` (less if `cancel` is set) while it replays."""
        deadline = time.monotonic() + wait_s
        while not self._ready.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
                raise ReplayPending(self.progress() + "; the tools answer once it is done: call again shortly")
        if self.error is not None:
            raise KernelUnavailable(self.progress() + " (fix the notebook's environment, or start `crane mcp` "
                                    "with --python PYTHON; then restart it)")
        conn = self.kernel.connection
        if not conn.is_alive():
            raise KernelUnavailable(f"the replay kernel of {self.path} died; restart `crane mcp`")
        return conn

    def close(self) -> None:
        self._closed.set()
        if self.kernel is not None:
            try:
                self.kernel.shutdown()
            except Exception:
                log.debug("shutting the replay kernel down failed", exc_info=True)
