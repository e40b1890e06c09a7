"""Daemon side of one sandbox run: what its processes write to fds 1/2, and the blocking run's network attempts.

- Output: the run's stdout/stderr are FIFOs in the private directory, drained by one daemon thread from the
  moment they exist: each keeps its first `keep` bytes and drops the rest, so no process of the run (worker
  processes, programs, C code writing to fds 1 and 2) can make the daemon hold or write more, nothing the run
  prints reaches a disk, and a writer never waits long on a full pipe.
- Network (blocking confinement): the child connects to the `notify` socket before confining itself and sends
  its seccomp listener over it; a socket of a network family asked for by any thread of the run, C threads
  included (libzmq, gRPC, database drivers), is answered here: refused with EPERM and recorded (`denied`) before
  the answer, so the verdict is `blocked` even when the library gave up quietly. In the layered confinement the
  supervisor A does the same (kernel/layer.supervise) and reports them with how the run ended.
"""

from __future__ import annotations

import os
import select
import socket
import threading

from crane.sandbox.shared.notify import answer_notification

OUTPUT_LIMIT = 64 * 1024
PIPE_BYTES = 1 << 20  # each capture FIFO's buffer: a writer waits for the drain only past this
_F_SETPIPE_SZ = 1031


def has_record(buf: bytes | bytearray) -> bool:
    """A complete final record line (not the setup line) is in a run's result lines `buf`."""
    end = buf.rfind(b"\n")
    return end >= 0 and b'"verdict"' in buf[:end]


def read_capture_file(path: str, start: int = 0, end: int | None = None, limit: int = OUTPUT_LIMIT) -> str:
    """Bytes `start`..`end` of a run's output file (at most `limit`), as text; "" when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            n = limit if end is None else max(0, min(limit, end - start))
            return f.read(n).decode("utf-8", "replace")
    except OSError:
        return ""


class RunDrain:
    """The run's capture FIFOs and notification socket, served by one daemon thread until `close`."""

    NAMES = ("stdout", "stderr")

    def __init__(self, path: str, result_path: str, keep: int = OUTPUT_LIMIT):
        self.keep = keep
        self.result_path = result_path
        self.fds: dict[str, int] = {}
        self.kept: dict[str, bytearray] = {n: bytearray() for n in self.NAMES}
        self.denied: list[str] = []  # the run's network attempts, as the supervisor recorded them
        self._lock = threading.Lock()
        for name in self.NAMES:
            fifo = os.path.join(path, name)
            os.mkfifo(fifo, 0o600)
            # O_RDWR: opening never blocks, and writers never see a missing reader while the run lasts
            fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                import fcntl  # (here: POSIX only, and the package must import on Windows, where no FIFO is made)
                fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)
            except (ImportError, OSError):
                pass  # over the machine's pipe-max-size: the default buffer, drained all the same
            self.fds[name] = fd
        self.notify_path: str | None = os.path.join(path, "notify")
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
        try:
            self._notify.bind(self.notify_path)
            self._notify.listen(1)
        except OSError:  # a path too long for a UNIX socket: network attempts are then refused quietly
            self.notify_path = None
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._loop, name="crane-sandbox-drain", daemon=True)
        self._thread.start()

    # -- output ---------------------------------------------------------------------------------------------
    def _read_all(self, name: str) -> None:
        """Everything waiting in one FIFO, now (caller holds the lock)."""
        fd = self.fds.get(name, -1)
        while fd >= 0:
            try:
                chunk = os.read(fd, 1 << 16)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                return
            room = self.keep - len(self.kept[name])
            if room > 0:
                self.kept[name] += chunk[:room]

    def text(self, name: str, limit: int = OUTPUT_LIMIT) -> str:
        """What the run wrote to `name` so far (its first `limit` bytes), after draining what is waiting."""
        with self._lock:
            self._read_all(name)
            return bytes(self.kept[name][:limit]).decode("utf-8", "replace")

    # -- network attempts -----------------------------------------------------------------------------------
    def _record(self, what: str) -> None:
        with self._lock:  # kept here, never on the run's channel (which holds only what its process wrote)
            if len(self.denied) < 20:
                self.denied.append(what)

    def _take_listener(self, poller: select.poll, listeners: set[int]) -> None:
        try:
            conn, _ = self._notify.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(1.0)
            try:
                _, fds, _, _ = socket.recv_fds(conn, 16, 1)
            except OSError:
                fds = []
        for fd in fds:
            listeners.add(fd)
            poller.register(fd, select.POLLIN)

    # -- the thread -----------------------------------------------------------------------------------------
    def _loop(self) -> None:
        poller = select.poll()
        index = {fd: name for name, fd in self.fds.items()}
        for fd in index:
            poller.register(fd, select.POLLIN)
        notify_fd = self._notify.fileno()
        poller.register(notify_fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        listeners: set[int] = set()
        try:
            while True:
                try:
                    events = poller.poll()
                except InterruptedError:
                    continue
                for fd, ev in events:
                    if fd == self._stop_r:
                        return
                    if fd in index:
                        with self._lock:
                            self._read_all(index[fd])
                    elif fd == notify_fd:
                        self._take_listener(poller, listeners)
                    elif fd in listeners:
                        if ev & select.POLLIN:
                            answer_notification(fd, self._record)
                        if ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) and not ev & select.POLLIN:
                            poller.unregister(fd)  # every process of the run has ended
                            listeners.discard(fd)
                            os.close(fd)
        finally:
            for fd in listeners:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def close(self) -> None:
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass
        self._thread.join(timeout=2.0)
        with self._lock:
            for fd in (*self.fds.values(), self._stop_r, self._stop_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.fds = {}
        self._notify.close()
