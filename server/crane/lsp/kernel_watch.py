"""Following an attached kernel: its iopub traffic and its heartbeat, on a thread of its own.

The watcher has its own client (iopub + heartbeat channels only; for a kernel on a Jupyter Server, a websocket
of its own whose "heartbeat" is that websocket's liveness), so it never competes with the probe connection
for messages. It reports, through `on_event` (called on the watcher thread):

- `WatchEvent("busy")` when another client's `execute_request` starts (goes busy), and `WatchEvent("idle")`
  when no such request runs any more;
- `WatchEvent("finished", code, execution_count, success, seconds)` when another client's request that was
  shown on iopub (`execute_input`, with the count it ran under) goes idle; `seconds` is how long it ran (from
  its `execute_input` to its `idle`), which tells the sandbox when a cell is too long for a full-size run.
  Only a candidate user run: the Jupyter extension also sends requests of its own on the user's session
  (startup code, the variables view, other extensions' code through its kernels API) with
  `store_history=False`, which carry the same count and leave it where it was; the supervisor (kernels.py)
  counts a run only when the execution count advanced;
- `WatchEvent("restarted")` on a `starting`/`restarting` status, a `shutdown_reply` on iopub, or an
  `iopub_welcome` after the first (our subscription was renewed: a new kernel behind the same address);
- `WatchEvent("dead")` when the heartbeat stops (silent for `crane.kernel.client.HEARTBEAT_GRACE_S`: one missed
  reply on a loaded machine is not a death), and `WatchEvent("alive")` when it comes back;
- `WatchEvent("resync")` when the watcher's connection was renewed (a kernel behind a Jupyter Server: the
  websocket dropped and reconnected): iopub messages of the gap may be lost, so the state may have changed.

Traffic whose parent is CRANE's own session (the probe's silent requests) is ignored — every session this
daemon opened on any kernel (`DAEMON_SESSIONS`: probe, sandbox and agent connections of every notebook), so
that two notebooks attached to one kernel do not take each other's private requests for user activity (each
would invalidate the other's sandbox results, over and over). `busy` tells, at any time, whether a user
request is running: the probe uses it to avoid queueing behind a user cell. `cell_running` is narrower: a cell
runs, i.e. another client's execute request that is not silent (its `execute_input` shown) until its `idle`, the
rule of `crane mcp`'s busy watch (`crane.mcp.busy`); a silent request (the Jupyter extension's variable view, a
tool's probe) ends in moments and is no cell. The shell runs one request at a time, so any execute request that
starts (the daemon's own included) ends the cell known to run: a missed `idle` is forgotten, never kept. `activity`
counts what may have changed the kernel's state since the watch began: every other client's request that
can run code (execute, also silent or expression-only; comm messages; anything but the read-only requests
below), restarts, deaths and reconnections (what ran in the gap is unknown). It is bumped on the watcher
thread as the message is read, before any event.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger(__name__)


WatchKind = Literal["busy", "idle", "finished", "restarted", "dead", "alive", "resync"]

# Sessions of the kernel connections this daemon opened (any notebook, any kernel): never user activity.
DAEMON_SESSIONS: set[str] = set()

# Requests that run no user code: they do not count as activity.
READ_ONLY_REQUESTS = frozenset({
    "kernel_info_request", "comm_info_request", "complete_request", "inspect_request", "is_complete_request",
    "history_request",
})


@dataclass(frozen=True)
class WatchEvent:
    kind: WatchKind
    code: str | None = None
    execution_count: int | None = None
    success: bool | None = None
    seconds: float | None = None


class _Shared(set):
    """A watcher's own ignored sessions; each one added is also added to DAEMON_SESSIONS."""

    def __init__(self, items=()):
        super().__init__(items)
        DAEMON_SESSIONS.update(items)

    def add(self, item: str) -> None:
        super().add(item)
        DAEMON_SESSIONS.add(item)


class KernelWatch:
    """An iopub + heartbeat listener for one kernel, on a daemon thread it owns.

    It owns its thread rather than subclassing `threading.Thread`: a subclass shares the standard library's
    private names (Python 3.13 gives every Thread a `_handle`, which hid a `_handle` method here), and
    tests/architecture/test_stdlib_subclasses.py keeps CRANE's stdlib subclasses off them.
    """

    def __init__(
        self,
        where: Any,  # a connection file path, or a crane.kernel.target.KernelTarget (a server kernel)
        on_event: Callable[[WatchEvent], None],
        ignore_sessions: set[str] | None = None,
        heartbeat_interval: float = 0.5,
        local_pid: int | None = None,
    ):
        from crane.kernel.client import KernelConnection
        from crane.kernel.target import as_target

        self.target = as_target(where)
        self._thread = threading.Thread(target=self.run, name=f"crane-watch-{self.target.short()}", daemon=True)
        self.on_event = on_event
        self.ignore_sessions = _Shared(ignore_sessions or ())
        self.heartbeat_interval = heartbeat_interval
        # A local kernel's process: when it is gone, the kernel died or restarted even if iopub missed the
        # "starting" status (a SUB socket re-subscribes after a restart and can miss the first messages).
        self.local_pid = local_pid
        self._client = KernelConnection.watch_client(self.target)
        self._stopping = threading.Event()
        self._running: dict[str, dict] = {}  # user execute_request msg_id -> {"code", "count", "ok"}
        self._busy_parents: set[str] = set()
        self._cell: str | None = None  # msg_id of another client's cell (execute_input seen, not yet idle)
        self._lock = threading.Lock()
        self.alive = True
        self.last_activity = time.monotonic()
        self.activity = 0  # other clients' requests that may have changed the kernel's state, restarts, deaths
        self._welcomed = False  # ipykernel >= 7 welcomes each new iopub subscriber: the first is our own start
        self._reconnects = 0  # the websocket client's reconnections already reported
        self._silent_since: float | None = None  # when the heartbeat was first seen missing (None: beating)

    @property
    def busy(self) -> bool:
        """A user request is running in the kernel right now."""
        with self._lock:
            return bool(self._busy_parents)

    @property
    def cell_running(self) -> bool:
        """Another client's cell runs in the kernel right now (not a silent request: see the module's doc)."""
        with self._lock:
            return self._cell is not None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def run(self) -> None:
        last_hb = time.monotonic()
        try:
            while not self._stopping.is_set():
                try:
                    msg = self._client.get_iopub_msg(timeout=0.1)
                except queue.Empty:
                    msg = None
                except Exception:  # a closed socket during shutdown
                    if self._stopping.is_set():
                        break
                    log.exception("iopub read failed")
                    time.sleep(0.2)
                    msg = None
                if msg is not None:
                    self.last_activity = time.monotonic()
                    self._handle(msg)
                if time.monotonic() - last_hb >= self.heartbeat_interval:
                    last_hb = time.monotonic()
                    self._check_heartbeat()
                    self._check_process()
        finally:
            try:
                self._client.stop_channels()
            except Exception:
                pass

    # -- heartbeat -------------------------------------------------------------------------------
    def _check_heartbeat(self) -> None:
        try:
            beating = bool(self._client.hb_channel.is_beating())
        except Exception:
            beating = False
        from crane.kernel import client as kernel_client

        now = time.monotonic()
        if beating:
            self._silent_since = None
        elif self._silent_since is None:
            self._silent_since = now
        # one missed reply (jupyter_client gives a second: a loaded machine) is not a death: dead is the heartbeat
        # silent for HEARTBEAT_GRACE_S (a kernel whose process is gone is "restarted" at once: _check_process)
        silent = not beating and now - (self._silent_since or now) >= kernel_client.HEARTBEAT_GRACE_S
        reconnects = getattr(self._client, "reconnects", 0)
        if beating and reconnects != self._reconnects:
            self._reconnects = reconnects
            with self._lock:  # a run we saw start may have ended during the gap
                self._busy_parents.clear()
                self._running.clear()
                self._cell = None
                self.activity += 1  # and what ran in the gap is unknown
            self._emit(WatchEvent("resync"))
        if beating and not self.alive:
            self.alive = True
            self._emit(WatchEvent("alive"))
        elif silent and self.alive:
            self.alive = False
            with self._lock:
                self._busy_parents.clear()
                self._running.clear()
                self._cell = None
                self.activity += 1
            self._emit(WatchEvent("dead"))

    def _check_process(self) -> None:
        if self.local_pid is not None and not process_exists(self.local_pid):
            log.info("kernel process %s is gone: the kernel died or restarted", self.local_pid)
            self.local_pid = None  # once: the attachment is verified and renewed
            with self._lock:
                self._busy_parents.clear()
                self._running.clear()
                self._cell = None
                self.activity += 1
            self._emit(WatchEvent("restarted"))

    # -- iopub -----------------------------------------------------------------------------------
    def _handle(self, msg: dict) -> None:
        parent = msg.get("parent_header") or {}
        mtype = msg.get("msg_type") or msg.get("header", {}).get("msg_type")
        content = msg.get("content") or {}
        if mtype == "status" and content.get("execution_state") in ("starting", "restarting"):
            with self._lock:
                self._busy_parents.clear()
                self._running.clear()
                self._cell = None
                self.activity += 1
            self._emit(WatchEvent("restarted"))
            return
        if mtype == "shutdown_reply" or (mtype == "iopub_welcome" and self._welcomed):
            # A restart that iopub's "starting" may not show (a subscriber that reconnects misses it; a kernel
            # behind a Jupyter Server restarted through its REST API): the kernel announced its shutdown, or a
            # fresh kernel welcomed our (re)subscription. The identity check tells a restart from a blip.
            with self._lock:
                self.activity += 1
            self._emit(WatchEvent("restarted"))
            return
        if mtype == "iopub_welcome":
            self._welcomed = True
            return
        if (mtype == "status" and content.get("execution_state") == "busy"
                and parent.get("msg_type") == "execute_request"):
            with self._lock:  # one request at a time: whatever cell ran before has ended
                self._cell = None
        if parent.get("session") in self.ignore_sessions or parent.get("session") in DAEMON_SESSIONS:
            return
        if mtype == "status" and content.get("execution_state") == "busy" and (
            parent.get("msg_type") not in READ_ONLY_REQUESTS
        ):
            with self._lock:
                self.activity += 1
        pid = parent.get("msg_id")
        if not pid or parent.get("msg_type") != "execute_request":
            return
        if mtype == "status":
            state = content.get("execution_state")
            if state == "busy":
                with self._lock:
                    first = not self._busy_parents
                    self._busy_parents.add(pid)
                if first:
                    self._emit(WatchEvent("busy"))
            elif state == "idle":
                with self._lock:
                    was_busy = pid in self._busy_parents
                    if self._cell == pid:
                        self._cell = None
                    self._busy_parents.discard(pid)
                    now_idle = was_busy and not self._busy_parents
                    run = self._running.pop(pid, None)
                if run is not None:
                    self._emit(WatchEvent("finished", run["code"], run["count"], run["ok"],
                                          round(time.monotonic() - run["t0"], 3)))
                if now_idle:
                    self._emit(WatchEvent("idle"))
        elif mtype == "execute_input":
            with self._lock:
                self._cell = pid
                self._running[pid] = {"code": content.get("code", ""), "count": content.get("execution_count"), "ok": True,
                                      "t0": time.monotonic()}
        elif mtype == "error":
            with self._lock:
                if pid in self._running:
                    self._running[pid]["ok"] = False

    def _emit(self, event: WatchEvent) -> None:
        try:
            self.on_event(event)
        except Exception:
            log.exception("kernel watch handler failed on %s", event.kind)


def process_exists(pid: int) -> bool:
    """A live (not zombie) process with this pid exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True
