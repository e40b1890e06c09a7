"""Sandbox sessions on kernels that cannot be forked: `SandboxSession`'s interface on a transplant worker.

`SandboxSession.open` returns a `TransplantSession` when the kernel refuses to fork (TensorFlow, JAX or CuPy
loaded, CUDA initialised, a spent thread pool: see crane.sandbox.transplant), so the agent's and `crane fix`'s
sandboxed tries work there too:
- the worker (a warm one of the kernel's, or a cold one) confines itself in the blocking confinement (no
  processes, writes only to its scratch directory, no network), then serves JSON-line commands like a forked
  session (worker/main._session);
- state is copied lazily: before each run or inspect, the names its code reads that the session has not copied
  yet are exported from the kernel (a private request: nothing in the kernel changes) and loaded; names the
  session's own code bound are never overwritten;
- checkpoints are the daemon's: a checkpoint is a position in the session's log of runs; rolling back (or a
  run over budget) ends the worker and starts another that copies the state again and replays the runs up to
  that position (a replayed run that does not finish ends the session). Slower than a nested fork, but the
  kernel's TF/JAX runtime never goes through one.
Verdicts say `mode="transplant"` and what was copied. Workers end with the session, the kernel or the daemon.
"""

from __future__ import annotations

import subprocess
import threading
import time

import msgspec

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelError, KernelTimeout
from crane.sandbox.channel import ChildHandle, PrivateDir
from crane.sandbox.confinement import current as current_confinement
from crane.sandbox.copy_seal import clean_only, seal_readable, sealed_code
from crane.sandbox.fork_session import FORGED, SandboxError, SandboxSession, _Reply
from crane.sandbox.kernel_program import untrusted_interpreter
from crane.sandbox.pipes import NoProcess, PortableDir, ProcessHandle
from crane.sandbox.session_memory import kernel_key, lift_for_load, limit_command
from crane.sandbox.shared.process_end import exit_status, worker_outcome
from crane.sandbox.shared.view_names import view_sensitive
from crane.sandbox.transplant import (
    LOAD_S,
    POOL,
    CopyFacts,
    ExportReply,
    Worker,
    _export,
    clean_doubt,
    copy_crash_doubt,
    history_doubt,
    kernel_of,
    kernel_vm_mb,
    likely_reason,
)
from crane.sandbox.verdict import Integrity, SandboxVerdict, TransplantInfo

SEAL_WAIT_S = 5.0  # how long a worker may take to enter its sealed wait after its reply (a loaded machine)


class TransplantSession(SandboxSession):
    """A sandbox session in a transplant worker (see the module docstring). Same methods as SandboxSession."""

    writer = "cell-process"  # the worker that runs the commands writes their replies (verdict.Integrity)
    fresh_state = True  # a run after a failed one starts in a new worker (the log replayed without it)
    head_reads_to_end = False

    def __init__(self, pdir: PrivateDir | PortableDir, head: ChildHandle | ProcessHandle | NoProcess,
                 budget_s: float):
        super().__init__(pdir, head, budget_s)  # type: ignore[arg-type]  # PortableDir: PrivateDir's interface
        self.conn: KernelConnection | None = None
        self.worker: Worker | None = None
        self.reason: str | None = None  # why the kernel was not forked
        self.request_timeout = 5.0
        self.memory_mb = 2048
        self.total_cpu_s = 600.0
        self._exports = 0
        self._copied: dict[str, str] = {}  # name -> type, in the current worker
        self._bytes = 0
        self._log: list[str] = []  # every run since the session opened (replayed after a rollback)
        self._marks: list[int] = []  # checkpoints: positions in the log (the first is the base)
        self._tainted = False  # the last run failed in the worker: the next run starts from a new one (the log)
        self._warm = False
        self.portable: str | None = None  # the portable sandbox confines the worker (why), or None
        self._since = bytearray()  # the bytes read on the channel since the last command (issue 41: the seal)
        self._seal_seen: bool | None = None  # the last reply was sealed over them (None: not looked, no /proc)
        self._op: str | None = None  # the op of the command whose reply is awaited
        self._kernel: tuple[int, int] | None = None  # the kernel's (pid, start time), where the daemon sees it
        # the notebook's cell transformers (kernel/transformers.py): copied into the current worker, and the kernel's
        # facts of its last export (env.json: what of its shell the copy misses, its namespace's names)
        self._transformers = False
        self._facts: dict = {}
        # what the current worker holds, as a one-shot run's worker would (transplant.copy_crash_certain: one rule for
        # both, issue 42, h9): the runtimes every export of it carried, the patched classes and the settings it could
        # not prove equal (its load replies); whether the kernel's settings were applied (its first load)
        self._held = CopyFacts()
        self._loaded = False

    @classmethod
    def start(cls, conn: KernelConnection, *, budget_s: float, memory_mb: int, request_timeout: float,
              total_cpu_s: float, reason: str | None, portable: str | None = None) -> TransplantSession:
        """Open a session in a worker; raises SandboxError when none can start (the reason says why). `portable`:
        why the worker is confined by the portable sandbox (crane.sandbox.portable), or None."""
        why = None if portable else current_confinement().runs("transplant")
        if why:
            raise SandboxError(why)
        # the portable session's channel is its worker's pipes (crane.sandbox.pipes), the OS session's two FIFOs
        pdir = PortableDir(session=True) if portable else PrivateDir(session=True)
        sess = cls(pdir, NoProcess() if portable else ChildHandle(0, None), budget_s)
        sess.conn, sess.reason, sess.request_timeout = conn, reason, request_timeout
        sess.memory_mb, sess.total_cpu_s = memory_mb, total_cpu_s
        sess.portable = portable
        try:
            sess._start_worker()
        except BaseException:
            sess.close()
            raise
        sess._marks = [0]
        sess._depth = 1
        return sess

    # -- the worker --------------------------------------------------------------------------------
    def _export(self, source: str) -> ExportReply:
        assert self.conn is not None
        self._exports += 1
        try:
            exp = _export(self.conn, self._pdir, source, self.request_timeout, skip=sorted(self._copied),
                          tag=self._exports, copy_mb=0)
        except KernelTimeout:
            raise SandboxError("the kernel is busy (it did not answer the transplant request in time)") from None
        except (KernelError, msgspec.ValidationError) as exc:
            raise SandboxError(f"the kernel's state could not be exported: {exc}") from None
        if not exp.ok:
            raise SandboxError(exp.reason or "the kernel's state could not be exported")
        self._facts = self._read_facts()
        return exp

    def _read_facts(self) -> dict:
        """The last export's env.json (its facts about the kernel), or {} when it cannot be read."""
        import json
        import os

        try:
            with open(os.path.join(self._pdir.path, "env.json")) as f:
                facts = json.load(f)
        except (OSError, ValueError):
            return {}
        return facts if isinstance(facts, dict) else {}

    def _start_worker(self) -> None:
        import json
        import os

        asked_at = time.time()
        exp = self._export("")
        with open(os.path.join(self._pdir.path, "env.json")) as f:
            facts = json.load(f)
        env, cwd = dict(facts.get("env") or {}), str(facts.get("cwd") or "/")
        # its worker ends with the kernel's process (the portable path watches it through psutil: no /proc, no pidfd)
        kernel = kernel_of(exp, bool(self.portable), asked_at)
        self._kernel = kernel_key(kernel)
        why = untrusted_interpreter(exp.executable, kernel)  # (crane.sandbox.kernel_program)
        if why:
            raise SandboxError(why)
        worker = POOL.take(exp.executable, kernel)
        if worker is None:
            worker = Worker(exp.executable, env, cwd, exp.modules, warm=False, kernel=kernel)
        self.worker, self._warm = worker, worker.warm
        if not POOL.serving(worker):
            raise SandboxError("the kernel ended before its transplant session started")
        request = self._pdir.request(mode="session", budget_s=float(self.budget_s), cpu_s=float(self.total_cpu_s),
                                     memory_mb=int(self.memory_mb) + 1024, output_limit=1 << 20, layer="blocking",
                                     vm_floor_mb=0 if self.portable else kernel_vm_mb(kernel))
        if self.portable:  # -- the portable sandbox (worker/portable.py)
            request = msgspec.structs.replace(request, confinement="portable", portable_reason=self.portable,
                                              os_layers=list(worker.os_layers))
        head = worker.run({"args": msgspec.to_builtins(request), "session": True, "map_devices": bool(exp.cuda)},
                          portable=bool(self.portable))
        self._head.close()
        self._head = head
        self._buf = b""
        self._copied = {}
        self._transformers = False
        self._held = CopyFacts(carried=list(exp.carried), patched=list(exp.patched))
        self._loaded = False
        self._ready, self._expected = False, None  # a new worker announces itself once
        ready = self._read_reply(time.monotonic() + LOAD_S + 60.0)  # a cold worker imports TensorFlow first
        if ready is None or ready.event != "ready":
            tail = worker.log_tail().strip().splitlines()[-1:] if ready is None else []
            raise SandboxError(f"the transplant session did not start: {ready.reason if ready else 'no answer'}"
                               + (f" ({tail[0]})" if tail else ""))
        self.landlock_abi = ready.confinement.get("landlock_abi")
        POOL.refill(exp.executable, env, cwd, exp.modules, kernel)  # the next session or run finds one warm

    def _end_worker(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.kill()
            POOL.done(worker)
            threading.Thread(target=worker.end, name="crane-transplant-reap", daemon=True).start()

    def _load_for(self, source: str) -> None:
        """Copy the names `source` reads that this worker has not copied yet (SandboxError if impossible)."""
        exp = self._export(source)
        transformers = exp.transformers and not self._transformers  # (the worker sets the kernel's once)
        held = self._held
        held.carried = [r for r in held.carried if r in exp.carried]  # (a runtime any load did not carry is rebuilt)
        held.patched = [*held.patched, *(p for p in exp.patched if p not in held.patched)]
        held.traced = [*held.traced, *(t for t in exp.traced if t not in held.traced)]
        if not exp.copied and not transformers and self._loaded:  # (the first load applies the kernel's settings,
            return  # copied names or not: worker/main's `load`)
        import os

        tag = f"-{self._exports}"
        bufs = sorted((n for n in os.listdir(self._pdir.path) if n.startswith(f"buf{tag}-")),
                      key=lambda n: int(n.rsplit("-", 1)[1]))
        self._send({"op": "load", "state": f"state{tag}.pkl", "buffers": bufs})
        rep = self._expect(self.request_timeout + 30.0)
        if not rep.ok:
            raise SandboxError(rep.reason or "the kernel's state could not be loaded")
        self._loaded = True
        held.settings_missed = [*held.settings_missed, *(m for m in rep.missed if m not in held.settings_missed)]
        for name, kind in exp.copied:
            self._copied[name] = kind
        self._transformers = self._transformers or exp.transformers
        self._bytes += exp.bytes

    def _restore(self, position: int) -> None:
        """A new worker holding the state the session had after `position` runs (copied again, replayed)."""
        self._tainted = False
        self._end_worker()
        self._start_worker()
        for source in self._log[:position]:
            self._load_for(source)
            self._send({"op": "run", "source": source, "budget_s": float(self.budget_s)})
            rep = self._read_reply(time.monotonic() + self.budget_s + 2.0)
            # every run in the log came back no-crash: one that does not now (it ended the worker: `_ended_reply`; it
            # raised or was refused, the kernel's state it reads changed since) leaves a state the session never had
            if rep is None or rep.event != "reply" or rep.verdict != "no-crash" or self._worker_exited(0.0):
                why = "did not finish" if rep is None or rep.event != "reply" else f"came back {rep.verdict}"
                raise SandboxError(f"a checkpoint could not be restored: replaying a run {why}")
        del self._log[position:]

    # -- the portable session's channel: the worker's pipes ---------------------------------------------
    def _send(self, cmd: dict) -> None:
        self._op = cmd.get("op")
        worker = self.worker
        if not self.portable and worker is not None and worker.proc.returncode is None:  # (not reaped: still ours)
            # the OS worker's soft address-space limit, set from here (crane.sandbox.session_memory): its size now
            # plus the budget for a command, lifted to the hard limit for a load
            if self._op == "load":
                lift_for_load(worker.proc.pid)
            elif self._op in ("run", "eval"):
                limit_command(worker.proc.pid, self._kernel, self.memory_mb)
        super()._send(cmd)

    def _write_command(self, data: bytes) -> None:
        # what the worker writes from now on answers this command, and its seal names the command line it read as
        # well (worker/main._serve_sealed: a command line that is not this one, e.g. one a thread of an earlier
        # command put in its place, never makes a reply the daemon takes)
        self._since = bytearray(data)
        if not self.portable:
            return super()._write_command(data)
        if self.worker is None:
            raise OSError("closed")
        self.worker.send_bytes(data)

    def _read_chunk(self, timeout: float) -> bytes | None:
        if not self.portable:
            chunk = super()._read_chunk(timeout)
        else:
            reader = self.worker.reader if self.worker is not None else None
            chunk = b"" if reader is None else reader.read(timeout)
        if chunk:
            self._since += chunk
        elif self.worker is not None:
            # the channel's end (b""): its writer, the worker, is ending: wait for its exit, so the session sees it
            # gone now; nothing in time (None) from a worker that is gone already: its end (a process it left holding
            # the channel is not its answer)
            if chunk == b"":
                self._worker_exited(timeout)
            elif self._worker_exited(0.0):
                chunk = b""
        return chunk

    def _worker_exited(self, within_s: float) -> bool:
        """The session's worker has exited, waiting up to `within_s` for it."""
        worker = self.worker
        if worker is None:
            return True
        try:
            worker.proc.wait(max(0.0, within_s))
        except subprocess.TimeoutExpired:
            return False
        return True

    def _ended_reply(self) -> _Reply | None:
        """The awaited command's reply when the worker ended by itself while running it (no reply of its own): what
        the fork session's head answers for a command process that ends so (crane.sandbox.shared.process_end), never a clean
        one. None while the worker lives, when no command is awaited, or when the daemon ended it (the session's
        kill, its kernel gone)."""
        worker = self.worker
        if worker is None or self._expected is None or worker.kernel_ended or self._head.killed:
            return None
        code = worker.proc.poll()
        if code is None:
            return None
        (want_id, want_key), self._expected = self._expected, None
        status, out = exit_status(code), worker_outcome(code)
        if self._op == "run":
            return _Reply(event="reply", id=want_id, key=want_key, **out)
        if self._op == "load":
            return _Reply(event="reply", id=want_id, key=want_key, ok=False,
                          reason=f"the session's worker ended loading the kernel's state ({status})")
        return _Reply(event="reply", id=want_id, key=want_key, ok=False, reason=out["reason"],
                      ename=out.get("ename") or "SandboxBlocked", evalue=out.get("evalue") or out["reason"])

    # -- issue 41: a reply counts only sealed (worker/main._sealed_commands, crane.sandbox.copy_seal) --------------
    def _read_reply(self, deadline: float) -> _Reply | None:
        """The awaited reply, taken only when the worker waits for its next command sealed over exactly the bytes
        read since this command (its reply, nothing else): otherwise the session's code wrote it, or wrote beside
        it, and a run's reply is `blocked` (the worker is not kept: the next run starts in a new one). A worker that
        ended by itself while running the command answers it by how it ended (`_ended_reply`), at once."""
        rep = super()._read_reply(deadline)
        if rep is None:
            rep = self._ended_reply()
            if rep is not None:
                self._seal_seen, self._tainted = None, True  # (its answer is its exit status: no channel was read)
            return rep
        if rep.event != "reply" or self.worker is None or not seal_readable():
            self._seal_seen = None
            return rep
        consumed = bytes(self._since[:len(self._since) - len(self._buf)])
        worker = self.worker
        code = sealed_code(worker.proc.pid, consumed, SEAL_WAIT_S, worker.alive)
        self._seal_seen = None if code is None else code is not False
        # sealed, but a reply that says its command ran clean counts only under the seal's clean code (said by where
        # the command ended in the worker, never by the reply: a hook or a patch can rewrite a reply, not the code)
        # (a reply claims a clean end by its verdict or by `ok`, whichever the command's op reads: a load's or an
        # eval's `ok` beside a verdict field of the line's is still its claim)
        clean_claim = rep.verdict == "no-crash" or bool(rep.ok)
        why = None
        if code is False:
            why = f"{FORGED} (the session's worker did not wait sealed over its reply)"
        elif clean_claim and not clean_only(code):
            why = f"{FORGED} (a reply that says it ran clean, but its command raised)"
        if why is not None:
            self._tainted = True
            if rep.verdict is not None:  # (and never `ok`: a load or an eval reads that, not the verdict)
                rep = msgspec.structs.replace(rep, verdict="blocked", ok=False, reason=why, ename=None, evalue=None,
                                              line=None, traceback=[])
            else:
                rep = msgspec.structs.replace(rep, ok=False, reason=why, value=None, ename="SandboxBlocked",
                                              evalue=why)
        return rep

    def _integrity(self, reason: str | None) -> Integrity:
        return Integrity(writer=self.writer, fresh_state=self.fresh_state,
                         channel_checked=bool(self._seal_seen) and not (reason or "").startswith(FORGED))

    # -- SandboxSession's interface ------------------------------------------------------------------
    def run(self, source: str, budget_s: float | None = None) -> SandboxVerdict:
        if self.closed:
            raise SandboxError("the sandbox session is closed")
        if self._tainted:  # the last run crashed, was refused or timed out in this worker: it is not the state
            self._tainted = False  # this run starts from (issue 41): a new worker, the log (without it) replayed
            try:
                self._restore(len(self._log))
            except BaseException:
                self.close()
                raise
        try:
            self._load_for(source)
        except SandboxError as exc:
            return SandboxVerdict(verdict="unavailable", reason=str(exc), mode="transplant",
                                  mode_reason=self.reason, integrity=self._integrity(None))
        self._log.append(source)
        n = len(self._log)
        v = super().run(source, budget_s)
        if v.verdict != "no-crash" and len(self._log) == n:  # (a resumed session has replayed without it already)
            self._log.pop()
            self._tainted = True
        elif v.verdict == "no-crash" and not v.certain and len(self._log) == n:
            # clean, but it left threads running (kernel/armed: `unsettled`): not the state later commands start from,
            # as a fork session keeps no process of several threads (round 14, h2: a thread a kept command left read
            # the worker's next commands, answered them or put its own lines in their place). The next run starts in
            # a new worker, the log replayed without it
            self._log.pop()
            self._tainted = True
            v.reason = (f"{v.reason}; " if v.reason else "") + ("the run's state is not kept for the next command: "
                                                                 "threads it started were still running")
        v.mode, v.mode_reason, v.channel = "transplant", self.reason, "local"
        if v.verdict == "no-crash" and v.certain and (history := history_doubt(source)
                                                      or clean_doubt(source, self._held.settings_missed, self._facts)):
            v.certain = False  # (the one-shot's rules)
            v.reason = (f"{v.reason}; " if v.reason else "") + f"the clean run is only likely: {history}"
        if v.verdict == "crash" and v.certain:  # the one-shot's rule, on what this worker holds (issue 42, h1, h9)
            self._held.copied = list(self._copied.items())
            doubt = copy_crash_doubt(v, source, self._held, self._facts)
            v.certain = doubt is None
            if doubt is not None:
                v.reason = likely_reason(v.reason, doubt)
        if self.portable and v.verdict == "crash" and v.certain and view_sensitive(source, v.traceback, v.evalue or ""):
            v.certain = False  # the one-shot's rule (worker/portable): the run's view of the folder may be what failed
            v.reason = likely_reason(v.reason, "the run's view of the notebook's folder may be what failed")
        v.transplant = TransplantInfo(copied=[f"{n} ({t})" for n, t in self._copied.items()][:50],
                                      bytes=self._bytes, warm=self._warm, confinement="blocking")
        if self.portable:  # -- the portable sandbox: which layers ran
            v.mode, v.mode_reason = "portable", self.portable
            v.transplant.confinement = None
            v.transplant.layers = ["call guard", "audit hook",
                                   *(self.worker.os_layers if self.worker is not None else [])]
        return v

    def inspect(self, expr: str, limit: int = 4000, timeout: float = 10.0) -> str:
        if self._tainted and not self.closed and self._worker_exited(0.0):  # (a crashed run's live worker is
            self._tainted = False  # inspected as it is, post mortem; a dead one is replaced: the log replayed)
            try:
                self._restore(len(self._log))
            except BaseException:
                self.close()
                raise
        self._load_for(expr)
        return super().inspect(expr, limit, timeout)

    def _checkpoint_abs(self, timeout: float = 10.0) -> None:
        self._marks.append(len(self._log))
        self._depth = len(self._marks)

    def rollback(self, timeout: float = 10.0) -> int:
        if self.depth == 0:
            raise SandboxError("no checkpoint to roll back to")
        self._resume_at_checkpoint()
        return self.depth

    def _after_resume(self, rep: _Reply | None) -> None:
        # a run over budget (its worker is killed by SandboxSession.run) or a worker that died: back to the last
        # checkpoint, as a forked session resumes in its checkpoint process
        self._resume_at_checkpoint()

    def _resume_at_checkpoint(self) -> None:
        position = self._marks.pop()
        try:
            self._restore(position)
        except BaseException:
            self.close()
            raise
        if not self._marks:
            self._marks.append(position)  # keep a base under the head
        self._depth = len(self._marks)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._end_worker()
