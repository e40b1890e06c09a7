"""Daemon side of the fork sandbox: the channel to one sandbox child (start it, wait, collect, kill).

- `PrivateDir`: the daemon's private directory (0700) for one child: a token (proves the kernel sees our file
  system), the result FIFO we hold open for reading, the output capture, the `scratch` directory.
- a run's output and, in the blocking confinement, its network attempts go through a `drain.RunDrain`.
- `launch`: one private `user_expressions` request installs the kernel-side module if needed
  (`sys.modules["_crane_sandbox"]`, through `crane.kernel.private_module`) and calls `start()`/`session()`,
  which fork and return at once. The reply says which channel the child uses:
  - "local" (`LocalRun`): the kernel sees our directory; we wait on the FIFO and the child's pidfd, never on
    the kernel, and kill through the pidfd (immune to pid reuse);
  - "remote" (`RemoteRun`): the kernel cannot see our directory (another machine, or another mount namespace),
    so it made its own; we poll it with private `collect(run_id)` requests and end it with `stop(run_id)`.
Both give the same thing back: the child's JSON lines, how the wait ended, the exit status, the captured output.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelError, KernelTimeout
from crane.kernel.private_module import KernelModule, ModuleClient
from crane.sandbox.drain import OUTPUT_LIMIT, RunDrain, has_record, read_capture_file
from crane.sandbox.request import SandboxRequest
from crane.sandbox.verdict import ExitStatus, LaunchReply, RemoteState, SandboxVerdict, exit_status_decoder, unavailable

# The fork sandbox's kernel-side module, in execution order: paths under sandbox/ (kernel/ runs in the kernel and
# its forked child; shared/ is imported by the daemon too)
SANDBOX_PARTS = ("kernel/landlock.py", "kernel/confine.py", "kernel/shield.py", "shared/seal.py", "shared/process_end.py", "../kernel_common/ipython_shell.py", "kernel/common.py", "kernel/request.py", "kernel/atfork.py", "kernel/fork_threads.py",
                 "kernel/armed.py", "kernel/audit.py", "kernel/mappings.py", "kernel/fds.py", "shared/notify.py", "kernel/layer.py",
                 "kernel/isolation.py", "kernel/miniature.py", "kernel/fork_pools.py",
                 "kernel/run.py", "kernel/session.py", "kernel/entry.py")
SANDBOX_MODULE = KernelModule(
    "_crane_sandbox",
    "CRANE's private fork sandbox (not part of the notebook)",
    [Path(__file__).resolve().parent / part for part in SANDBOX_PARTS],
    quiet=False,  # (its start forks the kernel to run the cell: the child keeps the collector as the notebook set it)
)
POLL_S = 0.1  # how often a waiting run looks at its cancel event (and, remote, asks the kernel)
STATUS_WAIT_S = 5.0  # how long the kernel's reaper may take to say how a run's process ended
END_GRACE_S = 2.0  # how long a child may take to end after its record before it is killed


class PrivateDir:
    """The daemon's private directory for one sandbox child (removed by `cleanup`). A run's output goes through
    a `RunDrain`; a session's through capture files (a session's child runs in the blocking confinement,
    where no other process exists, and its Python streams stop at the output limit), whose byte spans each
    reply names."""

    def __init__(self, session: bool = False):
        self.path = tempfile.mkdtemp(prefix="crane-sbx-")
        self.scratch = os.path.join(self.path, "scratch")
        os.mkdir(self.scratch, 0o700)
        self.token = secrets.token_hex(16)
        with open(os.path.join(self.path, "token"), "w") as f:
            f.write(self.token)
        os.mkfifo(os.path.join(self.path, "result"), 0o600)
        self.result_fd = os.open(os.path.join(self.path, "result"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.commands_fd = -1
        if session:
            os.mkfifo(os.path.join(self.path, "commands"), 0o600)
            # O_RDWR: never blocks, and the child's read side sees EOF only when we close it.
            self.commands_fd = os.open(os.path.join(self.path, "commands"), os.O_RDWR | os.O_CLOEXEC)
        self.capture: RunDrain | None = None if session else RunDrain(self.path, self.path + "/result")

    def request(self, **fields: Any) -> SandboxRequest:
        """A `SandboxRequest` for the child of this directory (its place, scratch, token, notification socket)."""
        notify = self.capture.notify_path if self.capture is not None and self.capture.notify_path else None
        return SandboxRequest(dir=self.path, scratch=self.scratch, token=self.token, notify=notify, **fields)

    def args(self, **extra) -> dict:
        """The transplant export's arguments (its place and token)."""
        return {"dir": self.path, "scratch": self.scratch, "token": self.token, **extra}

    def read_capture(self, name: str, start: int = 0, end: int | None = None, limit: int = OUTPUT_LIMIT) -> str:
        if self.capture is not None:
            return self.capture.text(name, limit)
        return read_capture_file(os.path.join(self.path, name), start, end, limit)

    def exit_status(self, wait_s: float = 1.0) -> ExitStatus | None:
        deadline = time.monotonic() + wait_s
        path = os.path.join(self.path, "status")
        while True:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                if data:
                    return exit_status_decoder.decode(data)
            except (OSError, msgspec.DecodeError):
                pass
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.001)

    def cleanup(self) -> None:
        if self.capture is not None:
            self.capture.close()
            self.capture = None
        for fd in (self.result_fd, self.commands_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.result_fd = self.commands_fd = -1
        for _ in range(5):  # the kernel's reaper may drop its status file while we remove the directory
            shutil.rmtree(self.path, ignore_errors=True)
            if not os.path.exists(self.path):
                return
            time.sleep(0.02)


def _starttime(pid: int) -> int:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


class ChildHandle:
    """A sandbox child process we may wait for and kill (through a pidfd: immune to pid reuse)."""

    def __init__(self, pid: int, start: int | None):
        self.pid = pid
        self.pidfd: int | None = None
        self.killed = False
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            return
        if start and _starttime(pid) != start:  # the pid was already reused: not our child
            os.close(fd)
            return
        self.pidfd = fd

    def alive(self) -> bool:
        if self.pidfd is None:
            return False
        r, _, _ = select.select([self.pidfd], [], [], 0)
        return not r

    def kill(self) -> None:
        if self.pidfd is not None and self.alive():
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                self.killed = True
            except OSError:
                pass

    def wait_gone(self, timeout: float) -> bool:
        if self.pidfd is None:
            return True
        r, _, _ = select.select([self.pidfd], [], [], max(0.0, timeout))
        return bool(r)

    def close(self) -> None:
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = None

    def end_within(self, grace_s: float) -> None:
        """Let go of the child, which must end within `grace_s` (it wrote its record and has nothing left to do;
        a cell that wrote a record itself and lingers, ignoring its alarms, is killed): returns at once."""
        if not self.alive():
            self.close()
            return

        def reap() -> None:
            if not self.wait_gone(grace_s):
                self.kill()
            self.close()

        threading.Thread(target=reap, name="crane-sandbox-end", daemon=True).start()


def launch_reply(conn: KernelConnection, entry: str, request: SandboxRequest, timeout: float) -> LaunchReply | SandboxVerdict:
    """Ask the kernel to fork; its validated reply, or an 'unavailable' SandboxVerdict."""
    try:
        # a dict literal: nothing is parsed with the kernel's `json` (kernel/shield.py)
        raw = ModuleClient(conn, SANDBOX_MODULE).call(entry, msgspec.to_builtins(request), timeout=timeout,
                                                      what="sandbox request")
        reply = msgspec.convert(raw, LaunchReply)
    except KernelTimeout:
        return unavailable("the kernel is busy (it did not answer the sandbox request in time)")
    except (KernelError, msgspec.ValidationError) as exc:
        return unavailable(f"the kernel could not start a sandbox: {exc}")
    if not reply.ok or reply.pid is None:
        v = unavailable(reply.reason or "the kernel refused to start a sandbox")
        v.unforkable = reply.unforkable  # fork_runner.speculate runs a transplant instead
        return v
    return reply


def launch(conn: KernelConnection, pdir: PrivateDir, entry: str, request: SandboxRequest, timeout: float = 5.0):
    """Ask the kernel to fork a child on the local channel (sessions): a ChildHandle, or an 'unavailable'
    SandboxVerdict."""
    reply = launch_reply(conn, entry, msgspec.structs.replace(request, remote_ok=False), timeout)
    if isinstance(reply, SandboxVerdict):
        return reply
    return ChildHandle(reply.pid, reply.start)  # type: ignore[arg-type]


def read_until_eof(fd: int, child: ChildHandle, deadline: float, stop_at_newline: bool = False,
                   cancel: threading.Event | None = None, stop_at_record: bool = False) -> tuple[bytes, str]:
    """Read the FIFO until EOF (or one line), the child's exit, the deadline or `cancel`:
    (data, "eof"|"line"|"record"|"exit"|"deadline"|"cancelled"). Never stops at the first record: a record is final
    only once the channel has ended (the cell can write record-like lines before CRANE's own: assemble.parse_lines
    finds them); `stop_at_record` then says "record" instead of "eof" when the data holds one."""
    buf = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if child.pidfd is not None:
        poller.register(child.pidfd, select.POLLIN)
    exited_at = None
    while True:
        if cancel is not None and cancel.is_set():
            return bytes(buf), "cancelled"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bytes(buf), "deadline"
        events = poller.poll(min(remaining, POLL_S) * 1000)
        for fdx, ev in events:
            if fdx == fd:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    if ev & select.POLLHUP:  # every writer closed it: the child's record is its last line
                        return bytes(buf), "record" if stop_at_record and has_record(buf) else "eof"
                    continue
                buf += chunk
                if stop_at_newline and b"\n" in buf:
                    return bytes(buf), "line"
            elif fdx == child.pidfd:
                if exited_at is None:
                    exited_at = time.monotonic()
                    poller.unregister(child.pidfd)
        if exited_at is not None and not events:
            return bytes(buf), "exit"  # the child is gone and nothing more is coming
        if exited_at is not None and time.monotonic() - exited_at > 0.5:
            return bytes(buf), "exit"


class RunOutcome(msgspec.Struct):
    data: bytes  # the child's JSON lines
    how: str  # eof | exit | deadline | cancelled
    status: ExitStatus | None
    stdout: str
    stderr: str
    denied: list[str] = []  # network attempts the daemon's supervisor recorded (blocking runs)


class LocalRun:
    """A child on the local channel: FIFO + pidfd."""

    def __init__(self, pdir: PrivateDir, reply: LaunchReply):
        self.pdir = pdir
        self.child = ChildHandle(reply.pid, reply.start)  # type: ignore[arg-type]
        self.pid = reply.pid

    def wait(self, deadline: float, cancel: threading.Event | None) -> RunOutcome:
        data, how = read_until_eof(self.pdir.result_fd, self.child, deadline, cancel=cancel)
        if how not in ("deadline", "cancelled"):
            # a record counts only once its process's parent has seen it sealed and ended it (kernel/common; the
            # parent says so at once): a process that lingers after the channel closed is waited for up to the
            # deadline like any other
            while not self.child.wait_gone(min(0.001, max(0.0, deadline - time.monotonic()))):
                if os.path.exists(os.path.join(self.pdir.path, "status")):
                    break
                if cancel is not None and cancel.is_set():
                    how = "cancelled"
                    break
                if time.monotonic() >= deadline:
                    how = "deadline"
                    break
        if how in ("deadline", "cancelled"):
            self.kill()
            self.child.wait_gone(2.0)
        # the parent's word comes at once where it ended the process; after a kill its reaper waits for the
        # teardown first, which on a loaded machine can take seconds (without it the record never stands)
        status = self.pdir.exit_status(STATUS_WAIT_S)
        denied = list(self.pdir.capture.denied) if self.pdir.capture is not None else []
        return RunOutcome(data, how, status, self.pdir.read_capture("stdout"), self.pdir.read_capture("stderr"),
                          denied)

    def kill(self) -> None:
        self.child.kill()

    def close(self) -> None:
        self.child.end_within(END_GRACE_S)


class RemoteRun:
    """A child on the remote channel: the kernel-side directory, polled with private requests."""

    def __init__(self, conn: KernelConnection, reply: LaunchReply, request_timeout: float):
        self.client = ModuleClient(conn, SANDBOX_MODULE)
        self.run_id = reply.run_id
        self.pid = reply.pid
        self.timeout = request_timeout

    def _collect(self) -> RemoteState:
        raw = self.client.call("collect", self.run_id, OUTPUT_LIMIT, timeout=self.timeout, what="sandbox collect")
        return msgspec.convert(raw, RemoteState)

    def wait(self, deadline: float, cancel: threading.Event | None) -> RunOutcome:
        how = "eof"
        state = RemoteState(done=False)
        while True:
            try:
                state = self._collect()
            except (KernelError, msgspec.ValidationError):
                state = RemoteState(done=False)
            if state.done:
                break
            if cancel is not None and cancel.is_set():
                how = "cancelled"
                break
            if time.monotonic() >= deadline:
                how = "deadline"
                break
            time.sleep(POLL_S)
        if not state.done:
            self.kill()
            end = time.monotonic() + 3.0
            while not state.done and time.monotonic() < end:
                time.sleep(POLL_S)
                try:
                    state = self._collect()
                except (KernelError, msgspec.ValidationError):
                    pass
        status = None
        if state.status:
            try:
                status = exit_status_decoder.decode(state.status)
            except msgspec.DecodeError:
                status = None
        return RunOutcome(state.result.encode("utf-8"), how, status, state.stdout, state.stderr)

    def kill(self) -> None:
        try:
            self.client.call("stop", self.run_id, timeout=self.timeout, what="sandbox stop")
        except KernelError:
            pass

    def close(self) -> None:
        pass
