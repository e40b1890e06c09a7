"""Talking to a kernel over its channels, privately.

Private requests are `silent=True, store_history=False`: they do not increment the execution count, do not
enter `In`/`Out`, and send no `execute_input`/`execute_result`. Results come back through
`user_expressions`. iopub traffic that is not ours is ignored. Every request has a timeout; a dead kernel or
a timed-out request raises a clear `KernelError`.

`run_cell` is the only non-private request: the CLI uses it to replay a notebook's history in a kernel CRANE
started itself (never in a user's kernel).

Transport-agnostic: the channel client is jupyter_client's `BlockingKernelClient` (ZeroMQ, from a connection
file) or `crane.kernel.ws_client.WebSocketKernelClient` (a kernel behind a Jupyter Server), which offers the
same methods; `attach` and `watch_client` take a connection file path or a `crane.kernel.target.KernelTarget`.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any, Literal

import msgspec

from crane import pyast
from crane.kernel.errors import ConnectionLost, KernelDead, KernelError, KernelNotStarted, KernelTimeout
from crane.kernel.target import KernelTarget, as_target

# how long a kernel reached through its connection file may miss heartbeats before it counts as dead (jupyter_client
# pings once a second and re-pings at once after a miss: five chances)
HEARTBEAT_GRACE_S = 5.0


class CellRun(msgspec.Struct):
    """The outcome of running one cell (replay)."""

    status: Literal["ok", "error", "aborted"]
    execution_count: int | None = None
    ename: str | None = None
    evalue: str | None = None
    traceback: list[str] = []
    stdout: str = ""
    stderr: str = ""
    elapsed_s: float = 0.0


class PrivateReply(msgspec.Struct):
    status: str
    user_expressions: dict[str, Any] = {}
    ename: str | None = None
    evalue: str | None = None
    execution_count: int | None = None  # the reply's: the count of the last user cell (ipykernel: the shell's, less one)


def literal_value(entry: dict[str, Any] | None, what: str, error: type[KernelError] = KernelError) -> Any:
    """The Python literal a `user_expressions` entry evaluated to (`ast.literal_eval`, never `eval`); `error`
    with the kernel's error when it failed or the reply is not a literal. The one decoder of private replies."""
    if not entry:
        raise error(f"{what}: the kernel returned no result")
    if entry.get("status") != "ok":
        raise error(f"{what} failed in the kernel: {entry.get('ename', 'Error')}: {entry.get('evalue', '')}")
    text = entry.get("data", {}).get("text/plain", "")
    try:
        return pyast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise error(f"{what}: unreadable reply from the kernel ({exc}): {text[:200]!r}") from None


class KernelConnection:
    """A channel client to one kernel, with private requests and timeouts. Thread-safe per request."""

    def __init__(self, client: Any, owner: Any = None, connection_file: str | None = None):
        self.client = client  # BlockingKernelClient, or WebSocketKernelClient (same methods)
        self.owner = owner  # the KernelManager (or ServerKernel) when CRANE started the kernel
        self.connection_file = connection_file
        self.target: KernelTarget | None = KernelTarget.local(connection_file) if connection_file else None
        self._lock = threading.Lock()
        if not client.channels_running:
            client.start_channels()

    # -- construction -------------------------------------------------------------------------------
    @staticmethod
    def watch_client(where: str | Path | KernelTarget) -> Any:
        """A second client for following a kernel: iopub and heartbeat channels only, so it never competes
        with a request connection for messages (see crane.lsp.kernel_watch). For a server kernel: a websocket
        of its own (its own session), whose heartbeat is the websocket's liveness."""
        target = as_target(where)
        if target.server is not None:
            from crane.kernel.ws_client import WebSocketKernelClient

            ws = WebSocketKernelClient(target.server, target.kernel_id or "")
            ws.start_channels(shell=False, iopub=True, stdin=False, hb=True, control=False)
            ws.sync_iopub()  # the server subscribes a new websocket to iopub only after the handshake
            return ws
        from jupyter_client import BlockingKernelClient  # lazily: ~70 ms the daemon's start does not need

        client = BlockingKernelClient()
        try:
            client.load_connection_file(str(target.connection_file))
        except Exception as exc:
            raise KernelError(f"cannot read connection file {target.connection_file}: {exc}") from exc
        client.start_channels(shell=False, iopub=True, stdin=False, hb=True, control=False)
        return client

    @classmethod
    def attach(cls, where: str | Path | KernelTarget, timeout: float = 10.0) -> KernelConnection:
        """Connect to a running kernel: from its connection file, or on a Jupyter Server (a `KernelTarget`)."""
        target = as_target(where)
        if target.server is not None:
            from crane.kernel.ws_client import WebSocketKernelClient

            ws = WebSocketKernelClient(target.server, target.kernel_id or "", connect_timeout=max(timeout, 1.0))
            conn = cls(ws)  # opens the websocket; ServerError (token, address, unknown kernel) raises here
            conn.target = target
            try:
                conn.wait_ready(timeout)
            except KernelError:
                conn.close()
                raise
            return conn
        path = Path(str(target.connection_file))
        if not path.is_file():
            raise KernelError(f"connection file not found: {path}")
        from jupyter_client import BlockingKernelClient

        kc = BlockingKernelClient()
        try:
            kc.load_connection_file(str(path))
        except Exception as exc:
            raise KernelError(f"cannot read connection file {path}: {exc}") from exc
        conn = cls(kc, connection_file=str(path))
        try:
            conn.wait_ready(timeout)
        except KernelError:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        try:
            self.client.stop_channels()
        except Exception:
            pass

    # -- liveness -----------------------------------------------------------------------------------
    def is_alive(self) -> bool:
        """The kernel's process runs (a kernel CRANE started), or it answers its heartbeat. A kernel known by its
        connection file alone has the heartbeat only, whose one missed reply (a second's window: a loaded machine,
        the first ping of a fresh connection) says nothing yet: "dead" is the heartbeat silent for
        `HEARTBEAT_GRACE_S`, waited for on the heartbeat's own next replies."""
        if self.owner is not None:
            try:
                return bool(self.owner.is_alive())
            except Exception:
                return False
        heartbeat = getattr(self.client, "_hb_channel", None) is not None
        deadline = time.monotonic() + (HEARTBEAT_GRACE_S if heartbeat else 0.0)
        while True:
            try:
                if self.client.is_alive():
                    return True
            except Exception:
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def wait_ready(self, timeout: float) -> None:
        """Wait until the kernel answers a comm_info request.

        Not kernel_info: IPython 9's kernel_info reply carries the shell's banner, whose tip is drawn with the
        global `random.choice` — every kernel_info request moves the user's `random` state. comm_info reads the
        kernel's comm table only, and is answered on the shell channel as kernel_info is (protocol 5.1+)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                msg_id = self.client.comm_info()
                self._await_shell_reply(msg_id, deadline, timeout)
                # ZMQ "slow joiner": the shell reply can arrive before our iopub subscription is live, and a
                # request sent then would miss its own idle status. Every request produces iopub status
                # messages, so seeing one proves the subscription works; otherwise ask again.
                try:
                    self.client.get_iopub_msg(timeout=0.2)
                    break
                except queue.Empty:
                    if time.monotonic() >= deadline:
                        raise KernelTimeout(f"kernel iopub channel not ready within {timeout:.0f} s") from None
        self._drain_iopub()

    def _await_shell_reply(self, msg_id: str, deadline: float, timeout: float) -> None:
        while True:
            self._check_owner_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KernelTimeout(f"kernel did not answer within {timeout:.0f} s")
            try:
                msg = self.client.get_shell_msg(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return

    def _check_owner_alive(self) -> None:
        if self.owner is not None and not self.owner.is_alive():
            raise self._dead("the kernel process has died")

    def _dead(self, message: str) -> KernelDead:
        """The error for a kernel that stopped answering; a lost server connection says why instead."""
        reason = getattr(self.client, "lost_reason", "")
        return ConnectionLost(reason) if reason else KernelDead(message)

    def _drain_iopub(self) -> None:
        try:
            while True:
                self.client.get_iopub_msg(timeout=0)
        except queue.Empty:
            pass

    # -- requests -----------------------------------------------------------------------------------
    def _alive_since(self, last_hb: float, what: str) -> float:
        """While a request waits: at most once a second, the kernel's process asked whether it lives (KernelDead
        if not); the time it was last asked."""
        now = time.monotonic()
        if now - last_hb <= 1.0:
            return last_hb
        if not self.is_alive():
            raise self._dead(f"{what}: the kernel died") from None  # (raised while a queue.Empty is handled)
        return now

    def _shell_reply(self, msg_id: str, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last_hb = time.monotonic()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KernelTimeout(f"{what}: no reply within {timeout:g} s (the kernel may be busy)")
            try:
                msg = self.client.get_shell_msg(timeout=min(remaining, 0.2))
            except queue.Empty:
                last_hb = self._alive_since(last_hb, what)
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def _started(self, msg_id: str, since: float, within: float, what: str) -> dict[str, Any] | None:
        """Wait until the kernel starts on the request `msg_id`: its iopub `busy` status for that request (None), or
        the request's reply if that is read first; KernelNotStarted `within` seconds after `since` (the kernel is running
        something else, a cell, or is stuck). The shell channel is read between iopub waits, so a status missed on
        iopub costs a few polls, never a timeout while the reply is there."""
        deadline = since + within
        last_hb = time.monotonic()
        while True:
            try:
                while True:  # (a reply to an earlier request that timed out is not ours: dropped, as _shell_reply does)
                    msg = self.client.get_shell_msg(timeout=0)
                    if msg["parent_header"].get("msg_id") == msg_id:
                        return msg
            except queue.Empty:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KernelNotStarted(f"{what}: not started within {within:g} s (the kernel may be busy)")
            try:
                msg = self.client.get_iopub_msg(timeout=min(remaining, 0.05))
            except queue.Empty:
                last_hb = self._alive_since(last_hb, what)
                continue
            content = msg.get("content") or {}
            if (msg.get("parent_header") or {}).get("msg_id") == msg_id and msg.get("msg_type") == "status" \
                    and content.get("execution_state") == "busy":
                return None

    def private(self, user_expressions: dict[str, str], code: str = "", timeout: float = 5.0,
                start_timeout: float | None = None) -> PrivateReply:
        """Run `code` silently (no history, no execution count) and evaluate `user_expressions`. `start_timeout`:
        the kernel must start on the request within it (its iopub `busy` for the request), else KernelNotStarted (a
        KernelTimeout, as for a busy kernel); once started, the reply may take until `timeout` from the request. So one
        request both finds a busy kernel quickly and may run long (the transplant's export: transplant._export)."""
        with self._lock:
            self._drain_iopub()
            t0 = time.monotonic()
            msg_id = self.client.execute(
                code,
                silent=True,
                store_history=False,
                user_expressions=user_expressions,
                allow_stdin=False,
                stop_on_error=False,
            )
            early = None
            if start_timeout is not None and start_timeout < timeout:
                early = self._started(msg_id, t0, start_timeout, "private request")
            reply = early or self._shell_reply(msg_id, max(0.001, timeout - (time.monotonic() - t0)),
                                               "private request")
            self._drain_iopub()
        content = reply["content"]
        return PrivateReply(
            status=content.get("status", "error"),
            user_expressions=content.get("user_expressions", {}) or {},
            ename=content.get("ename"),
            evalue=content.get("evalue"),
            execution_count=count if type(count := content.get("execution_count")) is int else None,
        )

    def evaluate(self, expression: str, timeout: float = 5.0) -> Any:
        """Evaluate one expression privately and return its value as a Python literal."""
        reply = self.private({"v": expression}, timeout=timeout)
        if reply.status != "ok":
            raise KernelError(f"private request failed: {reply.ename}: {reply.evalue}")
        return literal_value(reply.user_expressions.get("v"), "private request")

    def run_cell(self, code: str, timeout: float = 600.0) -> CellRun:
        """Run a cell as a user would (history, outputs). Only for kernels CRANE owns (replay)."""
        start = time.monotonic()
        with self._lock:
            self._drain_iopub()
            msg_id = self.client.execute(code, silent=False, store_history=True, allow_stdin=False)
            run = CellRun(status="ok")
            out: list[str] = []
            err: list[str] = []
            idle = False
            deadline = start + timeout
            while not idle:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KernelTimeout(f"cell did not finish within {timeout:g} s")
                try:
                    msg = self.client.get_iopub_msg(timeout=min(remaining, 0.5))
                except queue.Empty:
                    self._check_owner_alive()
                    if self.owner is None and not self.is_alive():
                        raise self._dead("the kernel died while running a cell") from None
                    continue
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                mt, content = msg["msg_type"], msg["content"]
                if mt == "stream":
                    (out if content.get("name") == "stdout" else err).append(content.get("text", ""))
                elif mt == "error":
                    run.status = "error"
                    run.ename = content.get("ename")
                    run.evalue = content.get("evalue")
                    run.traceback = content.get("traceback", [])
                elif mt == "execute_input":
                    run.execution_count = content.get("execution_count")
                elif mt == "status" and content.get("execution_state") == "idle":
                    idle = True
            reply = self._shell_reply(msg_id, max(1.0, deadline - time.monotonic()), "cell")
        content = reply["content"]
        if content.get("status") == "aborted":
            run.status = "aborted"
        elif content.get("status") == "error" and run.status != "error":
            # (an error the kernel showed no traceback for: a handler of the notebook's, `set_custom_exc`, printed
            # its own; the reply still says the cell failed, as the notebook's front end shows it)
            run.status = "error"
            run.ename, run.evalue = content.get("ename"), content.get("evalue")
            run.traceback = list(content.get("traceback") or [])
        run.stdout = "".join(out)[-4000:]
        run.stderr = "".join(err)[-4000:]
        run.elapsed_s = time.monotonic() - start
        return run
