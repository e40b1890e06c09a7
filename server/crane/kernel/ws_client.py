"""A blocking kernel client over a Jupyter Server's kernel channels websocket.

`WebSocketKernelClient` offers what `crane.kernel.client.KernelConnection` and the kernel watcher use from
jupyter_client's `BlockingKernelClient` — `session.session`, `start_channels`/`stop_channels`,
`channels_running`, `execute`, `comm_info`, `get_shell_msg`/`get_iopub_msg`/`get_control_msg` with timeouts (raising
`queue.Empty`), `is_alive` and `hb_channel.is_beating()` — so the probe, the sandbox, sessions and the
watcher run unchanged on a kernel behind JupyterHub, a remote Jupyter Server or Enterprise Gateway.

Wire: `GET <base>api/kernels/<id>/channels?session_id=<our session>` with `Authorization: token T`, asking for
the `v1.kernel.websocket.jupyter.org` subprotocol (falling back to the legacy JSON protocol when the server
does not select it); see `ws_protocol`. The server signs the messages for the kernel: the client needs no key.

One reader thread per client receives every frame and sorts messages into per-channel queues (only the
channels asked for in `start_channels`; the others are dropped, and each queue is bounded, oldest dropped).
It pings the server every `ping_interval` seconds; when the socket drops (or nothing, not even a pong, comes
back for `ping_interval + pong_timeout`), it reconnects with the same session id, so jupyter_server replays the
messages it buffered meanwhile. Requests sent while reconnecting wait for it. When the kernel is gone (HTTP 404),
the token is refused, or no reconnection succeeds within `reconnect_window` seconds (`ServerSpec.reconnect_s`,
default 10), the client is lost:
`is_alive()` is False, the heartbeat stops beating and sends raise `ConnectionLost` with the reason.
"""

from __future__ import annotations

import collections
import logging
import queue
import socket
import threading
import time
import uuid
from typing import Any

import websocket
from jupyter_client.session import Session

from crane.kernel.errors import ConnectionLost, KernelError, ServerAuthError, ServerNotFound, ServerUnreachable
from crane.kernel.target import ServerSpec, check_kernel_id
from crane.kernel.ws_protocol import V1_PROTOCOL, decode_json, decode_v1, encode_json, encode_v1

log = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000  # messages kept per channel before the oldest are dropped


class _BoundedQueue:
    """A FIFO whose `put` never blocks: past `limit` the oldest message is dropped. `get` like queue.Queue."""

    def __init__(self, limit: int = QUEUE_LIMIT):
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._limit = limit
        self.dropped = 0

    def put(self, item: Any) -> None:
        with self._cond:
            if len(self._items) >= self._limit:
                self._items.popleft()
                self.dropped += 1
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout: float | None = None) -> Any:
        with self._cond:
            if not self._items:
                if timeout is not None and timeout <= 0:
                    raise queue.Empty
                end = None if timeout is None else time.monotonic() + timeout
                while not self._items:
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        raise queue.Empty
                    self._cond.wait(left)
            return self._items.popleft()

    def clear(self) -> None:
        with self._cond:
            self._items.clear()


class _Heartbeat:
    """`hb_channel` look-alike: beating while the websocket is up (or briefly reconnecting) and the server has
    not reported the kernel dead."""

    def __init__(self, client: WebSocketKernelClient):
        self._client = client

    def is_beating(self) -> bool:
        return self._client.is_alive()


class WebSocketKernelClient:
    """A BlockingKernelClient look-alike for one kernel on a Jupyter Server (see the module docstring)."""

    def __init__(self, spec: ServerSpec, kernel_id: str, *, connect_timeout: float = 10.0,
                 reconnect_window: float | None = None, ping_interval: float = 5.0, pong_timeout: float = 5.0,
                 protocol: str | None = V1_PROTOCOL):
        self.spec = spec
        self.kernel_id = check_kernel_id(kernel_id)
        # Builds message headers only: the server signs what it forwards to the kernel with the kernel's key,
        # so this key is never used (an empty one would make jupyter_client warn about unsigned messages).
        self.session = Session(key=uuid.uuid4().hex.encode(), username="crane", session=str(uuid.uuid4()))
        self.connect_timeout = connect_timeout
        self.reconnect_window = reconnect_window if reconnect_window is not None else spec.reconnect_s
        self.ping_interval = ping_interval
        self.pong_timeout = pong_timeout
        self.protocol_wanted = protocol
        self.protocol: str | None = None  # the subprotocol the server selected (None: legacy JSON)
        self.hb_channel = _Heartbeat(self)
        self._queues = {name: _BoundedQueue() for name in ("shell", "iopub", "control", "stdin")}
        self._wanted: set[str] = set()
        self._ws: websocket.WebSocket | None = None
        self._send_lock = threading.Lock()
        self._state_cond = threading.Condition()
        self._state = "new"  # new | connected | reconnecting | lost | closed
        self._lost_reason = ""
        self._kernel_dead = False
        self._reader: threading.Thread | None = None
        self._last_heard = 0.0
        self._last_ping = 0.0
        self.reconnects = 0  # successful reconnections (for tests and logs)
        self._synced = threading.Event()
        self._sync_ids: set[str] = set()

    # -- BlockingKernelClient surface -------------------------------------------------------------
    @property
    def channels_running(self) -> bool:
        return self._state in ("connected", "reconnecting")

    def start_channels(self, shell: bool = True, iopub: bool = True, stdin: bool = True, hb: bool = True,
                       control: bool = True) -> None:
        """Open the websocket (raises `ServerError`/`KernelError` at once when it cannot) and start reading."""
        if self.channels_running:
            return
        self._wanted = {name for name, on in (("shell", shell), ("iopub", iopub), ("stdin", stdin),
                                              ("control", control)) if on}
        self._ws = self._connect()
        with self._state_cond:
            self._state = "connected"
            self._state_cond.notify_all()
        self._last_heard = self._last_ping = time.monotonic()
        self._reader = threading.Thread(target=self._read_loop, name=f"crane-ws-{self.kernel_id[:8]}", daemon=True)
        self._reader.start()

    def sync_iopub(self, timeout: float = 5.0) -> bool:
        """Wait until the server relays this socket's iopub (True), at most `timeout` s (False).

        jupyter_server answers the websocket handshake before it has subscribed the new connection to the
        kernel's iopub: messages of that moment (a user cell that starts) would be missed by a watcher. A
        `comm_info_request` on the control channel (answered even while a cell runs) is handled once the
        connection is set up, and its busy/idle status comes back on iopub: the subscription is live then. Not
        kernel_info: IPython 9 draws the banner's tip from the user's global `random` on every kernel_info
        request (`crane.kernel.client.KernelConnection.wait_ready`)."""
        if not self.channels_running:
            return False
        self._synced.clear()
        msg_id = self._send("control", "comm_info_request", {})
        with self._state_cond:
            self._sync_ids.add(msg_id)
        try:
            return self._synced.wait(timeout)
        finally:
            with self._state_cond:
                self._sync_ids.discard(msg_id)

    def stop_channels(self) -> None:
        with self._state_cond:
            if self._state == "closed":
                return
            self._state = "closed"
            self._state_cond.notify_all()
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.send_close()  # a clean goodbye; the reader is woken by the shutdown below
            except Exception:
                pass
            try:
                ws.abort()
            except Exception:
                pass
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=2)
        if ws is not None:
            try:
                ws.shutdown()
            except Exception:
                pass

    def is_alive(self) -> bool:
        return self._state in ("connected", "reconnecting") and not self._kernel_dead

    def execute(self, code: str, silent: bool = False, store_history: bool = True,
                user_expressions: dict[str, str] | None = None, allow_stdin: bool | None = None,
                stop_on_error: bool = True) -> str:
        content = {"code": code, "silent": silent, "store_history": store_history,
                   "user_expressions": user_expressions or {}, "allow_stdin": bool(allow_stdin),
                   "stop_on_error": stop_on_error}
        return self._send("shell", "execute_request", content)

    def comm_info(self, target_name: str | None = None) -> str:
        return self._send("shell", "comm_info_request", {} if target_name is None else {"target_name": target_name})

    def get_shell_msg(self, timeout: float | None = None) -> dict:
        return self._queues["shell"].get(timeout)

    def get_iopub_msg(self, timeout: float | None = None) -> dict:
        return self._queues["iopub"].get(timeout)

    def get_control_msg(self, timeout: float | None = None) -> dict:
        return self._queues["control"].get(timeout)

    def get_stdin_msg(self, timeout: float | None = None) -> dict:
        return self._queues["stdin"].get(timeout)

    # -- state --------------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    @property
    def lost_reason(self) -> str:
        return self._lost_reason

    def drop_connection(self) -> None:
        """Cut the socket without closing the client, as a network failure would (the reader reconnects)."""
        ws = self._ws
        if ws is not None and ws.sock is not None:
            try:
                ws.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _lose(self, reason: str) -> None:
        with self._state_cond:
            if self._state in ("closed", "lost"):
                return
            self._state = "lost"
            self._lost_reason = reason
            self._state_cond.notify_all()
        log.warning("kernel %s: %s", self.kernel_id, reason)

    def _wait_connected(self) -> websocket.WebSocket:
        with self._state_cond:
            end = time.monotonic() + self.reconnect_window + self.connect_timeout
            while self._state == "reconnecting":
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._state_cond.wait(left)
            if self._state == "connected" and self._ws is not None:
                return self._ws
            if self._state == "lost":
                raise ConnectionLost(self._lost_reason)
            if self._state == "closed":
                raise KernelError("the kernel connection is closed")
            raise ConnectionLost(f"no connection to the Jupyter server at {self.spec.display}")

    # -- sending ------------------------------------------------------------------------------------
    def _send(self, channel: str, msg_type: str, content: dict) -> str:
        msg = self.session.msg(msg_type, content)
        for _attempt in (0, 1):
            ws = self._wait_connected()
            try:
                with self._send_lock:
                    if self.protocol == V1_PROTOCOL:
                        ws.send(encode_v1(channel, msg), websocket.ABNF.OPCODE_BINARY)
                    else:
                        ws.send(encode_json(channel, msg))
                return msg["header"]["msg_id"]
            except (websocket.WebSocketException, OSError) as exc:
                # the socket broke under us: the reader notices too and reconnects; send once more after it
                log.info("kernel %s: send failed (%s): waiting for the reconnection", self.kernel_id, exc)
                self._mark_reconnecting(ws)
        raise ConnectionLost(f"could not send to the Jupyter server at {self.spec.display}")

    def _mark_reconnecting(self, ws: websocket.WebSocket) -> None:
        with self._state_cond:
            if self._state == "connected" and self._ws is ws:
                self._state = "reconnecting"
                self._state_cond.notify_all()
        try:
            ws.abort()
        except Exception:
            pass

    # -- connecting ---------------------------------------------------------------------------------
    def _connect(self) -> websocket.WebSocket:
        url = self.spec.channels_url(self.kernel_id, self.session.session)
        where = f"the Jupyter server at {self.spec.display}"
        sslopt: dict[str, Any] = {}
        ctx = self.spec.ssl_context()
        if ctx is not None:
            sslopt["context"] = ctx
        header = [f"{k}: {v}" for k, v in self.spec.headers().items()]
        try:
            try:
                ws = websocket.create_connection(
                    url, timeout=self.connect_timeout, header=header, suppress_origin=True, sslopt=sslopt,
                    subprotocols=[self.protocol_wanted] if self.protocol_wanted else None,
                    skip_utf8_validation=True, enable_multithread=True,
                )
            except websocket.WebSocketBadStatusException:
                raise
            except websocket.WebSocketException as exc:
                if not self.protocol_wanted or "Header" not in str(exc):
                    raise
                # the server did not accept the v1 subprotocol: speak the legacy JSON protocol
                log.info("kernel %s: %s does not offer %s; using the JSON protocol", self.kernel_id,
                         self.spec.display, self.protocol_wanted)
                self.protocol_wanted = None
                ws = websocket.create_connection(
                    url, timeout=self.connect_timeout, header=header, suppress_origin=True, sslopt=sslopt,
                    skip_utf8_validation=True, enable_multithread=True,
                )
        except websocket.WebSocketBadStatusException as exc:
            code = exc.status_code
            if code in (401, 403):
                how = "no token was given (--token or JUPYTER_TOKEN)" if not self.spec.token else "check the token"
                raise ServerAuthError(f"{where} refused the kernel channels (HTTP {code}): {how}", code) from None
            if code == 404:
                raise ServerNotFound(f"{where} has no kernel {self.kernel_id} (it was shut down?)", code) from None
            if code in (301, 302, 303, 307, 308):
                raise ServerAuthError(f"{where} redirected the kernel channels request: the token was not "
                                      "accepted, or the URL is not the server's base URL", code) from None
            raise ServerUnreachable(f"{where} refused the kernel channels (HTTP {code})", code) from None
        except (websocket.WebSocketException, OSError) as exc:
            raise ServerUnreachable(f"cannot open the kernel channels at {where}: {type(exc).__name__}: {exc}") from None
        self.protocol = ws.getsubprotocol() or None
        if self.protocol not in (None, V1_PROTOCOL):
            ws.close()
            raise KernelError(f"{where} chose an unknown kernel websocket protocol {self.protocol!r}")
        ws.settimeout(min(1.0, self.ping_interval))
        _quick_ack(ws)
        return ws

    def _reconnect(self) -> bool:
        """Reconnect with the same session id; False (and lost) when it cannot be done in time."""
        with self._state_cond:
            if self._state != "connected" and self._state != "reconnecting":
                return False
            self._state = "reconnecting"
            self._state_cond.notify_all()
        old, self._ws = self._ws, None
        if old is not None:
            try:
                old.abort()
                old.close(timeout=0)
            except Exception:
                pass
        end = time.monotonic() + self.reconnect_window
        delay = 0.05
        last = ""
        while self._state == "reconnecting":
            try:
                ws = self._connect()
            except (ServerNotFound, ServerAuthError) as exc:
                self._lose(f"lost the kernel: {exc}")
                return False
            except KernelError as exc:
                last = str(exc)
                if time.monotonic() + delay >= end:
                    self._lose(f"the connection to the Jupyter server at {self.spec.display} dropped and could "
                               f"not be re-established within {self.reconnect_window:g} s ({last})")
                    return False
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            with self._state_cond:
                if self._state != "reconnecting":  # closed meanwhile
                    ws.close()
                    return False
                self._ws = ws
                self._state = "connected"
                self._state_cond.notify_all()
            self.reconnects += 1
            self._last_heard = self._last_ping = time.monotonic()
            log.info("kernel %s: reconnected to %s", self.kernel_id, self.spec.display)
            return True
        return False

    # -- reading ------------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        while self._state in ("connected", "reconnecting"):
            ws = self._ws
            if ws is None or self._state == "reconnecting":
                if not self._reconnect():
                    break
                continue
            try:
                opcode, data = ws.recv_data(control_frame=True)
            except websocket.WebSocketTimeoutException:
                self._keepalive(ws)
                continue
            except (websocket.WebSocketException, OSError, ValueError) as exc:
                if self._state != "connected":
                    continue
                log.info("kernel %s: websocket dropped (%s)", self.kernel_id, exc)
                self._mark_reconnecting(ws)
                continue
            self._last_heard = time.monotonic()
            _quick_ack(ws)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                if self._state == "connected":
                    log.info("kernel %s: the server closed the websocket", self.kernel_id)
                    self._mark_reconnecting(ws)
                continue
            if opcode in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
                self._dispatch(opcode, data)
            self._keepalive(ws)

    def _keepalive(self, ws: websocket.WebSocket) -> None:
        now = time.monotonic()
        if now - self._last_heard > self.ping_interval + self.pong_timeout:
            log.info("kernel %s: no answer from the server for %.0f s", self.kernel_id, now - self._last_heard)
            self._mark_reconnecting(ws)
            return
        if now - self._last_ping >= self.ping_interval:
            self._last_ping = now
            try:
                with self._send_lock:
                    ws.ping()
            except (websocket.WebSocketException, OSError):
                self._mark_reconnecting(ws)

    def _dispatch(self, opcode: int, data: Any) -> None:
        try:
            if self.protocol == V1_PROTOCOL:
                channel, msg = decode_v1(data)
            else:
                channel, msg = decode_json(data, binary=opcode == websocket.ABNF.OPCODE_BINARY)
        except ValueError as exc:
            log.warning("kernel %s: ignored a malformed message: %s", self.kernel_id, exc)
            return
        parent_id = (msg.get("parent_header") or {}).get("msg_id")
        if parent_id and parent_id in self._sync_ids:  # sync_iopub's own request: not for the caller
            if channel == "iopub":
                self._synced.set()
            return
        if channel == "iopub" and msg.get("msg_type") == "status":
            state = (msg.get("content") or {}).get("execution_state")
            if state == "dead":  # the server's restarter gave up on the kernel
                self._kernel_dead = True
            elif state in ("starting", "restarting", "idle", "busy"):
                self._kernel_dead = False
        if channel in self._wanted:
            q = self._queues.get(channel)
            if q is not None:
                q.put(msg)


_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def _quick_ack(ws: websocket.WebSocket) -> None:
    """Acknowledge received data at once (Linux; re-armed after every frame, the kernel clears it).

    jupyter_server does not set TCP_NODELAY on kernel websockets, so its execute_reply waits behind the iopub
    `busy` it wrote just before until we acknowledge that one; a delayed ACK (40 ms) would then add 40 ms to
    every request. Browsers hide this with their own ACK policy; a plain socket needs the hint."""
    if _QUICKACK is None or ws.sock is None:
        return
    try:
        ws.sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
    except OSError:
        pass
