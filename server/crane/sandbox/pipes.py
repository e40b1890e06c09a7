"""Daemon side of the portable sandbox's channel to its worker: written for every platform (no FIFO, no pidfd, no
/proc, no `select` on pipes, no AF_UNIX socket, no `os.fork`).

A transplant worker is the daemon's child (`subprocess.Popen`), started with anonymous pipes on its stdin and
stdout, which no other process holds. The portable run uses them as its whole channel:
- **commands** go down the worker's stdin (the run request; a session's JSON command lines after it);
- **results** come up its stdout: at boot the worker moves that pipe to a private descriptor and points fd 1 at
  the null device (worker/boot.py), so only the worker's own lines reach it (the setup line, the record, a
  session's replies with their per-command id and key, checked as before by `SandboxSession._genuine`).
  `PipeReader` reads it in a thread of its own (blocking reads work on pipes everywhere; `select` does not on
  Windows) and hands the chunks over through a queue; EOF means the worker (the only writer) has ended;
- the run's **output** (fds 1 and 2 during the cell) goes to plain files in the run's private directory
  (`PortableDir`), which the daemon reads up to the output limit and removes with the directory (Python's streams
  stop at the limit in the worker; C code writing to fds 1/2 is bounded by the worker's file-size limit where the
  platform has one, worker/limits.py);
- the worker is ended through its process handle (`ProcessHandle`: psutil ends the processes it started, then the
  `Popen` handle the worker, on POSIX its process group too). A `Popen` child is not reaped before `wait`, so its
  pid cannot be reused while the handle lives;
- the worker ends when its kernel's process ends: the daemon watches the kernel through psutil
  (crane.sandbox.process_watch).
"""

from __future__ import annotations

import os
import queue
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import IO, Any

from crane.sandbox.drain import OUTPUT_LIMIT, has_record, read_capture_file
from crane.sandbox.oslayer import prepare_folder
from crane.sandbox.request import SandboxRequest

POLL_S = 0.1  # how often a waiting run looks at its cancel event


class PipeReader:
    """The worker's result pipe, read by a daemon thread: `read(timeout)` gives the next chunk, None when nothing
    came in time, b"" at EOF (every writer has ended)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._fd = os.dup(stream.fileno())  # its own descriptor, closed at EOF: the stream may close any time
        self._q: queue.Queue[bytes] = queue.Queue()
        self.eof = False
        self._thread = threading.Thread(target=self._loop, name="crane-worker-pipe", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            self._q.put(chunk)
            if not chunk:
                os.close(self._fd)
                return

    def read(self, timeout: float) -> bytes | None:
        if self.eof:
            return b""
        try:
            chunk = self._q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if not chunk:
            self.eof = True
        return chunk

    def pending(self) -> bytes:
        """Everything already read, without waiting (b"" when nothing is waiting)."""
        out = bytearray()
        while not self.eof:
            try:
                chunk = self._q.get_nowait()
            except queue.Empty:
                break
            if not chunk:
                self.eof = True
            out += chunk
        return bytes(out)


def read_run(reader: PipeReader, deadline: float, cancel: threading.Event | None = None) -> tuple[bytes, str]:
    """The worker's lines until EOF (it closed the pipe after its record, or ended), the deadline or `cancel`; never
    only up to a first record (the cell may write record-like lines before the worker's own: assemble.parse_lines):
    (data, "record"|"eof"|"deadline"|"cancelled")."""
    buf = bytearray()
    while True:
        if cancel is not None and cancel.is_set():
            return bytes(buf), "cancelled"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bytes(buf), "deadline"
        chunk = reader.read(min(remaining, POLL_S))
        if chunk is None:
            continue
        if not chunk:  # the worker closed the pipe: its record (if any) is its last line
            return bytes(buf), "record" if has_record(buf) else "eof"
        buf += chunk


class PortableDir:
    """The private directory of one portable run or session (0700, removed by `cleanup`): the exported state, the
    token, `scratch`, the worker's view of the working folder and its output files. No FIFO, no socket: the
    channel is the worker's pipes (`PipeReader`). Same interface as `channel.PrivateDir` where the transplant uses
    one (`request`, `args`, `read_capture`, `cleanup`)."""

    def __init__(self, session: bool = False) -> None:
        self.path = tempfile.mkdtemp(prefix="crane-sbx-")
        try:  # Windows: labelled low integrity, so its low-integrity worker can write here (crane.sandbox.oslayer)
            prepare_folder(self.path)
        except OSError:
            pass  # (the worker's writes there are then refused: never a write elsewhere)
        self.scratch = os.path.join(self.path, "scratch")
        os.mkdir(self.scratch, 0o700)
        self.token = secrets.token_hex(16)
        with open(os.path.join(self.path, "token"), "w") as f:
            f.write(self.token)
        self.session = session
        self.result_fd = self.commands_fd = -1  # (the FIFO channel's: none here)
        self.capture = None

    def request(self, **fields: Any) -> SandboxRequest:
        return SandboxRequest(dir=self.path, scratch=self.scratch, token=self.token, notify=None, **fields)

    def args(self, **extra: Any) -> dict:
        return {"dir": self.path, "scratch": self.scratch, "token": self.token, **extra}

    def read_capture(self, name: str, start: int = 0, end: int | None = None, limit: int = OUTPUT_LIMIT) -> str:
        return read_capture_file(os.path.join(self.path, name), start, end, limit)

    def cleanup(self) -> None:
        for _ in range(5):
            shutil.rmtree(self.path, ignore_errors=True)
            if not os.path.exists(self.path):
                return
            time.sleep(0.02)


class ProcessHandle:
    """A worker process the daemon started, through its `Popen` handle (immune to pid reuse: not reaped before
    `wait`). Same interface as `channel.ChildHandle` (alive, kill, wait_gone, close, end_within)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pidfd: int | None = None  # (none: this handle never uses one)
        self.killed = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """End the worker and every process it started (psutil's tree on every platform, its process group on POSIX,
        which it leads, and the handle's own kill)."""
        if not self.alive():
            return
        import psutil as ps  # a daemon dependency, imported on first use (its import costs ~40 ms)
        try:
            for child in ps.Process(self.pid).children(recursive=True):
                try:
                    child.kill()
                except ps.Error:
                    pass
        except ps.Error:
            pass
        killpg = getattr(os, "killpg", None)
        if killpg is not None:
            try:
                killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.kill()
        except OSError:
            pass
        self.killed = True

    def wait_gone(self, timeout: float) -> bool:
        try:
            self.proc.wait(max(0.0, timeout))
            return True
        except subprocess.TimeoutExpired:
            return False

    def close(self) -> None:
        pass

    def end_within(self, grace_s: float) -> None:
        """Let go of the worker, which must end within `grace_s`; returns at once."""
        if not self.alive():
            return

        def reap() -> None:
            if not self.wait_gone(grace_s):
                self.kill()

        threading.Thread(target=reap, name="crane-sandbox-end", daemon=True).start()


class NoProcess:
    """No process yet (a session before its worker starts): the handle interface, doing nothing."""

    pid = 0
    pidfd: int | None = None
    killed = False

    def alive(self) -> bool:
        return False

    def kill(self) -> None:
        pass

    def wait_gone(self, timeout: float) -> bool:
        return True

    def close(self) -> None:
        pass

    def end_within(self, grace_s: float) -> None:
        pass
