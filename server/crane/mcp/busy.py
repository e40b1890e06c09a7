"""Whether another client's cell runs in the kernel `crane mcp` serves, so that its tools ask a busy kernel nothing
(a private request would only queue behind the cell until its timeout). Runs in the `crane mcp` process.

`BusyWatch` reads the kernel's iopub on a thread and a client of its own (`KernelConnection.watch_client`: iopub
and heartbeat only, never competing with the tools' connection for messages). A cell runs from its
`execute_input` (published for a request that is not silent: a user's cell, not a front-end's or another tool's
silent probe, which ends in moments) to its `idle` status; the tools' own requests (their connection's session) are
not cells. The shell runs one request at a time, so any execute request that starts (ours included) ends what was
known to run. What the watch may have missed makes it forget what it knew (a restart's `starting` status, a
websocket reconnection, a read error): not knowing that a cell runs is the old path — a request that waits for its
timeout — never a wrong answer."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

log = logging.getLogger(__name__)


class BusyWatch:
    """Follows one kernel's iopub until `stop()`; `busy` says another client's cell runs now."""

    def __init__(self, target: Any, own_session: str):
        from crane.kernel.client import KernelConnection

        self._client = KernelConnection.watch_client(target)
        self._own = own_session
        self._running: str | None = None  # msg_id of another client's cell (execute_input seen, not yet idle)
        self.seen = 0  # other clients' execute requests seen starting (for logs and tests)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._reconnects = getattr(self._client, "reconnects", 0)
        self._thread = threading.Thread(target=self._follow, name="crane-mcp-busy", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._running is not None

    def stop(self) -> None:
        self._stopping.set()

    def _forget(self) -> None:
        with self._lock:
            self._running = None

    def _follow(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    msg = self._client.get_iopub_msg(timeout=0.1)
                except queue.Empty:
                    msg = None
                except Exception:  # a closed socket at shutdown, a dropped websocket
                    if self._stopping.is_set():
                        break
                    log.debug("reading the kernel's iopub failed", exc_info=True)
                    self._forget()
                    self._stopping.wait(0.2)
                    continue
                reconnects = getattr(self._client, "reconnects", 0)
                if reconnects != self._reconnects:  # the gap's statuses may be lost
                    self._reconnects = reconnects
                    self._forget()
                if msg is not None:
                    self._status(msg)
        finally:
            try:
                self._client.stop_channels()
            except Exception:  # a dead kernel's sockets
                log.debug("closing the busy watch's client failed", exc_info=True)

    def _status(self, msg: dict[str, Any]) -> None:
        kind = msg.get("msg_type")
        content = msg.get("content") or {}
        parent = msg.get("parent_header") or {}
        if kind == "status" and content.get("execution_state") in ("starting", "restarting"):
            self._forget()
            return
        pid = parent.get("msg_id")
        if parent.get("msg_type") != "execute_request" or not pid:
            return
        theirs = parent.get("session") != self._own
        with self._lock:
            if kind == "status" and content.get("execution_state") == "busy":
                self._running = None  # one request at a time: whatever ran before has ended
                self.seen += theirs
            elif kind == "execute_input" and theirs:
                self._running = pid
            elif kind == "status" and content.get("execution_state") == "idle" and pid == self._running:
                self._running = None
