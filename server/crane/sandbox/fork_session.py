"""SandboxSession: a long-lived confined fork of the live kernel for the repair agent.

    with SandboxSession.open(conn, budget_s=10) as sb:
        v = sb.run("df = df.dropna()")          # SandboxVerdict, like speculate(); state persists in the sandbox
        sb.inspect("df.shape")                   # text/plain repr
        sb.checkpoint()                          # nested fork: the current state is frozen
        sb.run("df['x'] = 1 / 0")
        sb.rollback()                            # back to the frozen state
    # closed: every sandbox process is gone; the user's kernel never saw any of it

Same confinement, capture and budgets as `speculate` (the child is forked by the same kernel-side module).
Protocol: one JSON command line at a time on a FIFO the child reads; one JSON reply line on the result FIFO.
Checkpoints are a chain of processes: the head serves commands, each checkpoint waits for its child. A run
that exceeds its budget is killed and the session resumes at the last checkpoint (`run` reports a timeout
with `reason` saying so); `open` takes a base checkpoint so the session survives such a kill.
Checkpoints fork through a gate in the seccomp filter (a secret only the session's own code passes): the
cell's code still cannot create processes. A checkpoint needs a single-threaded head (it is refused
otherwise, with a reason).

Kernels that cannot be forked (TensorFlow, JAX, CUDA, ...) raise `Unforkable`; `sessions.open_session` then
gives a `TransplantSession` (transplant_session.py):
the same interface on a confined worker process holding a copy of the state.

Thread-safety: one session is used by one thread at a time (commands are sequential by nature).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import time

import msgspec

from crane.errors import CraneError
from crane.kernel.client import KernelConnection
from crane.sandbox.assemble import threads_doubt
from crane.sandbox.cpu_clock import cpu_clock_doubt
from crane.sandbox.fork_runner import (
    DEFAULT_BUDGET_S,
    DEFAULT_MEMORY_MB,
    OUTPUT_LIMIT,
    ChildHandle,
    PrivateDir,
    launch,
)
from crane.sandbox.pipes import NoProcess, ProcessHandle
from crane.sandbox.verdict import DisplayOutput, Integrity, SandboxVerdict, Verdict, Writer


class SandboxError(CraneError):
    """The session cannot serve the request (unavailable, closed, died, or an inspected expression raised)."""


class Unforkable(SandboxError):
    """The kernel refuses to fork (TensorFlow, JAX, CUDA, a spent native pool): `crane.sandbox.session`
    opens a transplant session instead."""


class _Reply(msgspec.Struct, omit_defaults=True):
    event: str
    id: int | None = None
    key: str | None = None  # the command's per-command key, echoed (a checkpoint's resume key for "resumed")
    pid: int | None = None
    depth: int = 0
    ok: bool | None = None
    reason: str | None = None
    value: str | None = None
    ename: str | None = None
    evalue: str | None = None
    verdict: Verdict | None = None
    line: int | None = None
    traceback: list[str] = []
    displays: list[DisplayOutput] = []
    denied: list[str] = []
    elapsed_ms: float = 0.0
    stdout_span: list[int] = []
    stderr_span: list[int] = []
    confinement: dict = {}
    missed: list[str] = []  # a transplant session's load: the carried settings its worker could not prove equal
    unsettled: bool = False  # threads the run left running past the grace (kernel/armed): its clean run only likely
    user_threads: list[str] = []  # the head's setup line: the notebook's threads in the kernel at the fork


_reply_decoder = msgspec.json.Decoder(_Reply)


# what the session's head says when the run's code wrote on its private result pipe (kernel/session.py)
FORGED = "the cell wrote into CRANE's result channel"


class SandboxSession:
    # who writes a run's reply (verdict.Integrity): here the head, from the command's own fresh process
    writer: Writer = "session-head"
    fresh_state = True  # every command runs in a fresh fork of a state no failed command changed
    head_reads_to_end = True  # the head read the command's pipe to its end (one line, else blocked)

    def __init__(self, pdir: PrivateDir, head: ChildHandle, budget_s: float):
        self._pdir = pdir
        self._head: ChildHandle | ProcessHandle | NoProcess = head  # (a portable transplant session's: pipes.py)
        self._buf = b""
        self._next_id = 0
        self._expected: tuple[int, str] | None = None  # (id, key) of the command whose reply is awaited
        self._resume_keys: dict[int, str] = {}  # checkpoint depth -> the key its "resumed" event must carry
        self._ready = False  # the session announced itself (a later "ready" is forged)
        self._threads: list[str] | None = None  # the head's setup line (the first, before "ready"; later ones are
        # a command's own: ignored): the notebook's threads the fork left behind (kernel/fork_threads.py)
        self.forged = 0  # lines on the result FIFO that answer no command of ours: discarded
        self._depth = 0  # absolute depth of the head (0 = the process forked from the kernel)
        self.budget_s = budget_s
        self.closed = False
        self.landlock_abi: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        conn: KernelConnection,
        *,
        budget_s: float = DEFAULT_BUDGET_S,
        memory_mb: int = DEFAULT_MEMORY_MB,
        request_timeout: float = 5.0,
        total_cpu_s: float = 600.0,
    ) -> SandboxSession:
        """Fork a confined session from the kernel's live state. Raises SandboxError if unavailable."""
        pdir = PrivateDir(session=True)
        request = pdir.request(mode="session", budget_s=float(budget_s), cpu_s=float(total_cpu_s),
                               memory_mb=int(memory_mb), output_limit=1 << 20)
        handle = launch(conn, pdir, "session", request, timeout=request_timeout)
        if isinstance(handle, SandboxVerdict):
            pdir.cleanup()
            if handle.unforkable:  # TF/JAX/CUDA...: crane.sandbox.session.open_session transplants it
                raise Unforkable(handle.reason or "the kernel cannot be forked")
            raise SandboxError(handle.reason or "the sandbox is unavailable")
        sess = cls(pdir, handle, budget_s)
        try:
            ready = sess._read_reply(time.monotonic() + request_timeout + 5.0)
            if ready is None or ready.event != "ready":
                raise SandboxError(f"the sandbox session did not start: {ready.reason if ready else 'no answer'}")
            sess.landlock_abi = ready.confinement.get("landlock_abi")
            sess._checkpoint_abs()  # the base: a killed run resumes here instead of ending the session
        except BaseException:
            sess.close()
            raise
        return sess

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End every process of the session (head and checkpoints) and remove its files."""
        if self.closed:
            return
        self.closed = True
        try:
            self._send({"op": "close"})
        except OSError:
            pass
        self._head.wait_gone(1.0)
        self._head.kill()
        self._head.close()
        # checkpoints exit when their child ends with the close code; closing the command FIFO ends any
        # survivor's read loop too.
        self._pdir.cleanup()

    # -- commands ----------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """How many checkpoints the agent has taken (and not rolled back)."""
        return max(0, self._depth - 1)

    def run(self, source: str, budget_s: float | None = None) -> SandboxVerdict:
        """Run a cell in the session (its state persists). Same verdicts as `speculate`."""
        budget = float(budget_s if budget_s is not None else self.budget_s)
        t0 = time.monotonic()
        self._send({"op": "run", "source": source, "budget_s": budget})
        rep = self._read_reply(time.monotonic() + budget + 0.5)
        if rep is None:  # over budget: kill the head, the last checkpoint takes over
            self._head.kill()
            resumed = self._read_reply(time.monotonic() + 3.0)
            self._after_resume(resumed)
            return SandboxVerdict(verdict="timeout", elapsed_ms=(time.monotonic() - t0) * 1000,
                                  reason=f"the cell did not finish within {budget:g} s; the session was rolled "
                                         f"back to checkpoint {self.depth}", integrity=self._integrity(None))
        if rep.event == "resumed":  # the head died by itself (CPU/memory/wall limit, signal)
            self._after_resume(rep)
            return SandboxVerdict(verdict="timeout", reason=f"the sandbox process ended ({rep.reason}); the session"
                                                            f" was rolled back to checkpoint {self.depth}",
                                  integrity=self._integrity(None))
        v = SandboxVerdict(
            verdict=rep.verdict or "unavailable", ename=rep.ename, evalue=rep.evalue, line=rep.line,
            traceback=rep.traceback, displays=rep.displays, denied=rep.denied, elapsed_ms=rep.elapsed_ms,
            reason=rep.reason, landlock_abi=self.landlock_abi, pid=rep.pid,
            integrity=self._integrity(rep.reason), certain=not rep.unsettled,
        )
        threads_doubt(v, self._threads or [])
        cpu_clock_doubt(v, source)
        if len(rep.stdout_span) == 2:
            v.stdout = self._pdir.read_capture("stdout", rep.stdout_span[0], rep.stdout_span[1], OUTPUT_LIMIT)
        if len(rep.stderr_span) == 2:
            v.stderr = self._pdir.read_capture("stderr", rep.stderr_span[0], rep.stderr_span[1], OUTPUT_LIMIT)
        v.overhead_ms = max(0.0, (time.monotonic() - t0) * 1000 - v.elapsed_ms)
        return v

    def _integrity(self, reason: str | None) -> Integrity:
        """Which of issue 41's guarantees held for a run's reply (verdict.Integrity)."""
        return Integrity(writer=self.writer, fresh_state=self.fresh_state,
                         channel_checked=self.head_reads_to_end and not (reason or "").startswith(FORGED))

    def inspect(self, expr: str, limit: int = 4000, timeout: float = 10.0) -> str:
        """The text/plain repr of an expression evaluated in the session. Raises SandboxError if it raises."""
        self._send({"op": "eval", "expr": expr, "limit": int(limit)})
        rep = self._expect(timeout)
        if not rep.ok:
            raise SandboxError(f"{rep.ename}: {rep.evalue}")
        return rep.value or ""

    def checkpoint(self, timeout: float = 10.0) -> int:
        """Freeze the current state (nested fork); returns the new depth."""
        self._checkpoint_abs(timeout)
        return self.depth

    def rollback(self, timeout: float = 10.0) -> int:
        """Discard everything since the last checkpoint; returns the new depth."""
        if self.depth == 0:
            raise SandboxError("no checkpoint to roll back to")
        self._send({"op": "rollback"})
        rep = self._expect(timeout, allow_resumed=True)
        self._after_resume(rep)
        return self.depth

    # -- internals ---------------------------------------------------------------------------------
    def _checkpoint_abs(self, timeout: float = 10.0) -> None:
        self._send({"op": "checkpoint"})
        rep = self._expect(timeout)
        if not rep.ok:
            raise SandboxError(f"checkpoint refused: {rep.reason}")
        self._set_head(rep.pid, rep.depth)

    def _after_resume(self, rep: _Reply | None) -> None:
        if rep is None or rep.event != "resumed" or rep.pid is None:
            self.closed = True
            self._pdir.cleanup()
            raise SandboxError("the sandbox session died (no checkpoint to resume from)")
        self._set_head(rep.pid, rep.depth)
        if self._depth == 0:  # keep a base checkpoint under the head
            self._checkpoint_abs()

    def _set_head(self, pid: int | None, depth: int) -> None:
        if pid is not None and pid != self._head.pid:
            self._head.close()
            self._head = ChildHandle(pid, None)
        self._depth = depth

    def _send(self, cmd: dict) -> None:
        """Send a command with a fresh id and a per-command secret key, which its reply must carry; lines
        already waiting on the result FIFO answer nothing we asked (stale or forged): discarded first."""
        if self.closed and cmd.get("op") != "close":
            raise SandboxError("the sandbox session is closed")
        self._drain()
        self._next_id += 1
        cmd["id"] = self._next_id
        cmd["key"] = secrets.token_hex(16)
        if cmd.get("op") == "checkpoint":
            cmd["resume"] = self._resume_keys[self._depth] = secrets.token_hex(16)
        self._expected = (cmd["id"], cmd["key"])
        self._write_command((json.dumps(cmd) + "\n").encode())

    # -- the channel (the forked session's FIFOs; a portable transplant session's pipes override these) -------------
    def _write_command(self, data: bytes) -> None:
        """One command line down the command FIFO."""
        fd = self._pdir.commands_fd
        if fd < 0:
            raise OSError("closed")
        while data:
            data = data[os.write(fd, data):]

    def _read_chunk(self, timeout: float) -> bytes | None:
        """The next bytes on the result channel within `timeout`: None when none came, b"" when no writer is left."""
        fd = self._pdir.result_fd
        if fd < 0:
            return b""
        try:
            r, _, _ = select.select([fd], [], [], max(0.0, timeout))
            return os.read(fd, 1 << 16) if r else None
        except BlockingIOError:
            return None
        except (OSError, ValueError):
            return b""

    def _drain(self) -> None:
        """Discard (and count) the complete lines waiting on the result channel: no command is awaited now."""
        while True:
            chunk = self._read_chunk(0)
            if not chunk:
                break
            self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            if line.strip() and b'"setup"' not in line[:40]:
                self.forged += 1

    def _expect(self, timeout: float, allow_resumed: bool = False) -> _Reply:
        rep = self._read_reply(time.monotonic() + timeout)
        if rep is None:
            raise SandboxError("the sandbox session did not answer in time")
        if rep.event == "resumed" and not allow_resumed:
            self._after_resume(rep)
            raise SandboxError(f"the sandbox process ended ({rep.reason}); rolled back to checkpoint {self.depth}")
        if rep.event == "error":
            raise SandboxError(rep.reason or "sandbox error")
        return rep

    def _read_reply(self, deadline: float) -> _Reply | None:
        """The next genuine line (see `_genuine`); lines that are not are discarded and counted in `forged`."""
        while True:
            while b"\n" not in self._buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                chunk = self._read_chunk(min(remaining, 0.25))
                if chunk is None:
                    continue
                if not chunk:  # no writer left: every session process is gone
                    time.sleep(0.01)
                    if not self._head.alive():
                        return None
                    continue
                self._buf += chunk
            line, self._buf = self._buf.split(b"\n", 1)
            try:
                rep = _reply_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                self.forged += 1  # not a line of ours
                continue
            if rep.event == "setup":  # the child's setup line (mode, what was made private): not a reply
                if not self._ready and self._threads is None:
                    self._threads = list(rep.user_threads)
                continue
            if self._genuine(rep):
                return rep
            self.forged += 1

    def _genuine(self, rep: _Reply) -> bool:
        """A reply to the awaited command (its id and key), the session's first announcement, or a checkpoint's
        resumption (the key only that checkpoint process holds)."""
        if rep.event in ("ready", "error") and not self._ready:
            self._ready = rep.event == "ready"
            return True
        if rep.event == "resumed":
            key = self._resume_keys.get(rep.depth)
            return key is not None and rep.key is not None and secrets.compare_digest(key, rep.key)
        if rep.event in ("reply", "error") and self._expected is not None:
            want_id, want_key = self._expected
            if rep.id == want_id and rep.key is not None and secrets.compare_digest(want_key, rep.key):
                self._expected = None
                return True
        return False
