"""Daemon side of the fork sandbox: start a speculative run in the user's kernel, collect its verdict.

Flow (`speculate`):
1. A private directory (0700) holds a token (proves the kernel sees our file system), a FIFO `result` we hold
   open for reading, the child's `stdout`/`stderr` capture files and the cell's `scratch` directory.
2. One private `user_expressions` request (silent, no history, no execution count) installs the kernel-side
   module if needed (`sys.modules["_crane_sandbox"]`, the `ks_*.py` parts, through `crane.kernel.private_module`;
   no user-visible name) and calls `start()`, which
   forks and returns the child's pid at once: the user's kernel is busy for a few milliseconds only.
3. We wait on the FIFO and the child's pidfd (never on the kernel), read one JSON record, and kill the child
   through its pidfd when the wall-clock budget runs out (the pidfd makes the kill immune to pid reuse).
   The kernel's reaper thread waits for the child, so no zombie is left, and writes its exit status, which
   explains a child that died without a record (signal, memory).
Nothing here raises to the caller: every failure becomes an "unavailable" verdict with a reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import select
import shutil
import signal
import tempfile
import time
from pathlib import Path

import msgspec

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelError, KernelTimeout
from crane.kernel.private_module import KernelModule, ModuleClient
from crane.sandbox.verdict import (
    ChildRecord,
    DisplayOutput,
    LaunchReply,
    SandboxVerdict,
    child_record_decoder,
    exit_status_decoder,
    unavailable,
)

SANDBOX_PARTS = ("seccomp.py", "ks_common.py", "ks_audit.py", "ks_isolation.py", "ks_run.py", "ks_session.py",
                 "ks_parent.py")
SANDBOX_MODULE = KernelModule(
    "_crane_sandbox",
    "CRANE's private fork sandbox (not part of the notebook)",
    [Path(__file__).resolve().parent / part for part in SANDBOX_PARTS],
)
MODULE_NAME = SANDBOX_MODULE.name

DEFAULT_BUDGET_S = 10.0
DEFAULT_MEMORY_MB = 2048
OUTPUT_LIMIT = 64 * 1024
_GRACE_S = 0.5  # setup time allowed on top of the cell's budget


class PrivateDir:
    """The daemon's private directory for one sandbox child (removed by `cleanup`)."""

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

    def args(self, **extra) -> dict:
        return {"dir": self.path, "scratch": self.scratch, "token": self.token, **extra}

    def read_capture(self, name: str, start: int = 0, end: int | None = None, limit: int = OUTPUT_LIMIT) -> str:
        try:
            with open(os.path.join(self.path, name), "rb") as f:
                f.seek(start)
                n = limit if end is None else max(0, min(limit, end - start))
                return f.read(n).decode("utf-8", "replace")
        except OSError:
            return ""

    def exit_status(self, wait_s: float = 1.0):
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
            time.sleep(0.005)

    def cleanup(self) -> None:
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


def _starttime(pid: int) -> int:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def launch(conn: KernelConnection, pdir: PrivateDir, entry: str, args: dict, timeout: float = 5.0):
    """Ask the kernel to fork; a ChildHandle, or an 'unavailable' SandboxVerdict."""
    try:
        raw = ModuleClient(conn, SANDBOX_MODULE).call(entry, json.dumps(args), timeout=timeout, what="sandbox request")
        reply = msgspec.convert(raw, LaunchReply)
    except KernelTimeout:
        return unavailable("the kernel is busy (it did not answer the sandbox request in time)")
    except (KernelError, msgspec.ValidationError) as exc:
        return unavailable(f"the kernel could not start a sandbox: {exc}")
    if not reply.ok or reply.pid is None:
        return unavailable(reply.reason or "the kernel refused to start a sandbox")
    return ChildHandle(reply.pid, reply.start)


def read_until_eof(fd: int, child: ChildHandle, deadline: float, stop_at_newline: bool = False) -> tuple[bytes, str]:
    """Read the FIFO until EOF (or one line), the child's exit, or the deadline: (data, "eof"|"line"|"exit"|"deadline")."""
    buf = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if child.pidfd is not None:
        poller.register(child.pidfd, select.POLLIN)
    exited_at = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bytes(buf), "deadline"
        events = poller.poll(min(remaining, 0.25) * 1000)
        for fdx, ev in events:
            if fdx == fd:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    if ev & select.POLLHUP:
                        return bytes(buf), "eof"
                    continue
                buf += chunk
                if stop_at_newline and b"\n" in buf:
                    return bytes(buf), "line"
            elif fdx == child.pidfd:
                if exited_at is None:
                    exited_at = time.monotonic()
                    poller.unregister(child.pidfd)
        if exited_at is not None and not events:
            # the child is gone and nothing more is coming
            return bytes(buf), "exit"
        if exited_at is not None and time.monotonic() - exited_at > 0.5:
            return bytes(buf), "exit"


def _signal_verdict(sig: int | None, exitcode: int | None, memory_mb: int) -> SandboxVerdict:
    if sig is None:
        if exitcode == 70:
            return unavailable("the sandbox child failed during setup")
        return unavailable(f"the sandbox child ended without a result (exit code {exitcode})")
    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
    if sig == signal.SIGXCPU:
        return SandboxVerdict(verdict="timeout", reason="the cell exceeded its CPU-time budget")
    if sig == signal.SIGALRM:
        return SandboxVerdict(verdict="timeout", reason="the cell exceeded its wall-clock budget")
    if sig == signal.SIGKILL:
        return SandboxVerdict(verdict="timeout", reason=f"the sandbox child was killed (memory budget {memory_mb} MiB "
                                                         "or CPU budget exhausted)")
    if sig == signal.SIGXFSZ:
        return SandboxVerdict(verdict="blocked", reason="the cell wrote more than the sandbox's file-size limit")
    if sig == signal.SIGSYS:
        return SandboxVerdict(verdict="blocked", reason="the cell made a system call the sandbox forbids")
    return SandboxVerdict(
        verdict="crash",
        ename="DeadKernelError",
        evalue=f"the process died with {name}: running this cell would kill the kernel",
        reason=f"killed by {name}",
    )


def speculate(
    conn: KernelConnection,
    source: str,
    budget_s: float = DEFAULT_BUDGET_S,
    *,
    memory_mb: int = DEFAULT_MEMORY_MB,
    request_timeout: float = 5.0,
) -> SandboxVerdict:
    """Run `source` (a cell, IPython syntax) against a copy-on-write fork of the kernel's live state, confined
    and under `budget_s` seconds of wall clock. Blocking (use `speculate_async` from an event loop); never
    raises; never changes the user's kernel (namespace, execution count, history, outputs)."""
    t0 = time.monotonic()
    try:
        pdir = PrivateDir()
    except OSError as exc:
        return unavailable(f"cannot create the sandbox's private directory: {exc}")
    child = None
    try:
        args = pdir.args(mode="run", source=source, budget_s=float(budget_s), memory_mb=int(memory_mb),
                         output_limit=OUTPUT_LIMIT)
        handle = launch(conn, pdir, "start", args, timeout=request_timeout)
        if isinstance(handle, SandboxVerdict):
            return handle
        child = handle
        deadline = time.monotonic() + float(budget_s) + _GRACE_S
        data, how = read_until_eof(pdir.result_fd, child, deadline)
        if how == "deadline":
            child.kill()
            child.wait_gone(2.0)
            v = SandboxVerdict(verdict="timeout", reason=f"the cell did not finish within {budget_s:g} s")
        else:
            v = _decode_record(data, pdir, memory_mb)
        v.stdout = pdir.read_capture("stdout")
        v.stderr = pdir.read_capture("stderr")
        v.pid = child.pid
        total_ms = (time.monotonic() - t0) * 1000.0
        v.overhead_ms = max(0.0, total_ms - v.elapsed_ms) if how != "deadline" else 0.0
        if how == "deadline":
            v.elapsed_ms = total_ms
        return v
    except Exception as exc:  # the daemon never dies from one sandbox run
        if child is not None:
            child.kill()
        return unavailable(f"sandbox error: {type(exc).__name__}: {exc}")
    finally:
        if child is not None:
            child.close()
        pdir.cleanup()


def _decode_record(data: bytes, pdir: PrivateDir, memory_mb: int) -> SandboxVerdict:
    line = data.split(b"\n", 1)[0].strip()
    if line:
        try:
            rec: ChildRecord = child_record_decoder.decode(line)
        except msgspec.DecodeError as exc:
            return unavailable(f"the sandbox child sent a malformed record: {exc}")
        return SandboxVerdict(
            verdict=rec.verdict,
            ename=rec.ename,
            evalue=rec.evalue,
            line=rec.line,
            traceback=rec.traceback,
            displays=rec.displays,
            elapsed_ms=rec.elapsed_ms,
            reason=rec.reason,
            denied=rec.denied,
            landlock_abi=rec.confinement.get("landlock_abi") if isinstance(rec.confinement, dict) else None,
        )
    st = pdir.exit_status(1.0)
    if st is None:
        return unavailable("the sandbox child ended without a result")
    return _signal_verdict(st.signal, st.exitcode, memory_mb)


async def speculate_async(conn: KernelConnection, source: str, budget_s: float = DEFAULT_BUDGET_S, **kw) -> SandboxVerdict:
    """`speculate` for an asyncio daemon (the LSP server): runs in a worker thread, so the event loop keeps
    serving while the child runs. KernelConnection requests are thread-safe."""
    return await asyncio.to_thread(speculate, conn, source, budget_s, **kw)


__all__ = ["MODULE_NAME", "SANDBOX_MODULE", "DisplayOutput", "SandboxVerdict", "speculate", "speculate_async"]
