"""Fork sandbox, kernel side: the long-lived session child serving the repair agent.

JSON-line commands (run, eval, checkpoint, rollback, close) from the daemon's FIFO; checkpoints are nested
forks through the seccomp filter's gate (see fork_session.py for the protocol).

The writer is not the cell (issue 41). The head never runs a command's code: every `run` and `eval` runs in a
fresh fork of the head (the command's process), which closes the daemon's channel before the code runs and sends
its outcome up a private pipe; the head reads that pipe to its end (the process closes every copy of it once its
outcome is out, or ends) and writes the keyed reply itself. A command's process is forked on demand, or ahead when
the head has been idle `IDLE_S` (never holding a command's key); nothing a command does not need (the reaping of
ended processes, the fence's watch of CRANE's code) is on its way: the watch is taken once by the head and checked
after the command by identity (`common._Watch`). One outcome line is CRANE's: anything else there was
written by the code, and the run is `blocked` ("the cell wrote into CRANE's result channel"). Then:
- a clean run (no-crash, nothing extra, one thread left as /proc says) is kept: the head hands its channel to the
  run's process over the session's socket pair and waits for it as a checkpoint does (it is the new head, its
  state the session's; it mirrors how that process ends, so a rollback or a kill reaches the checkpoint below);
- any other run (crash, blocked, timeout) is not: the next command starts from the head's state, which that run
  never touched; its process stays parked, single-threaded, for `eval`s of the state where it stopped (post-mortem
  facts) until the next command that is not an `eval`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from crane.sandbox.kernel.atfork import restore, suspend_user_handlers  # kernel: strip
from crane.sandbox.kernel.common import (  # kernel: strip
    _SETUP,
    _TAMPERED,
    CELL_FILENAME,
    _channel_digest,
    _Ctx,
    _real_exit,
    _track_channel,
    _Watch,
    _write_json,
    await_seal,
    ended_now,
)
from crane.sandbox.kernel.confine import set_parent_death_signal  # kernel: strip
from crane.sandbox.kernel.isolation import _prepare_child, _single_thread_pools, find_thread_pools  # kernel: strip
from crane.sandbox.kernel.run import (  # kernel: strip
    _cell_begins,
    _cell_record,
    _compile_plan,
    _describe_exception,
    _epilogue_begins,
    _exec_plan,
)
from crane.sandbox.shared.seal import SEAL_CLEAN, SEAL_MAGIC, _seal_parts  # kernel: strip


def _child_session(args: dict, shell: Any, parent: int, on_main: bool) -> None:
    """Serve JSON-line commands from the daemon until told to close. See fork_session.py for the protocol."""
    import secrets
    args = dict(args)
    args["fork_gate"] = secrets.randbits(63) | 1  # only our own checkpoint clone may pass the filter
    ctx = None
    try:
        ctx = _prepare_child(args, shell, parent, on_main)
    except BaseException as exc:
        fd = _SETUP.get("result_fd", -1)
        if fd >= 0:
            _write_json(fd, {"event": "error", "reason": f"sandbox setup failed: {exc}"})
        return
    _bind()
    _session_loop(ctx, args["fork_gate"])


# what the session's processes call, bound by the first head before any command ran (a kept head inherits it): no
# module a command imported or replaced later (`sys.modules["ctypes"]`, `socket`, `select`) is ever looked up
_BOUND: dict[str, Any] = {}

IDLE_S = 0.05  # with a run parked (evals of it likely next) or after a rollback: the next command's forked after this


def _bind() -> None:
    import ctypes
    import hashlib
    import select
    import socket
    _bind_hooks()
    api = ctypes.pythonapi
    sc = ctypes.PyDLL(None).syscall
    sc.restype = ctypes.c_long
    sc.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    _BOUND.update(clone=(api.PyOS_BeforeFork, sc, api.PyOS_AfterFork_Child, api.PyOS_AfterFork_Parent,
                         ctypes.get_errno), select=select.select, send_fds=socket.send_fds,
                  recv_fds=socket.recv_fds, poll=select.poll,
                  # the sealed wait's raw read(2) (shared/seal), made once: nothing is built after a command's
                  # code ran, between its outcome and the wait the head looks for (`space`: a parked run's sealed
                  # read of its next eval)
                  seal=_seal_parts(pipe=False)[::2], digest=hashlib.blake2b, space=ctypes.create_string_buffer(1 << 16))
    # what a command's process checks after its code ran (common._Watch), taken once: a checkpoint's new head and
    # the process of a kept run (whose check found nothing watched changed) start from it
    _BOUND["watch"] = _Watch()
    # ... and `_BOUND` itself, strictly: a command whose code replaced what stops its hooks, seals its outcome or
    # checks it (or anything else here) is `blocked` and never kept (issue 41; tests/sandbox/test_sealed_state.py)
    _BOUND["watch"].also(_BOUND)


def _bind_hooks() -> None:
    """A command's hooks, read and stopped after its code by functions no command can have rebound: bound before
    any command (fork sessions' first head; a transplant worker that seals its replies, worker/main._session)."""
    import gc
    import sys
    _BOUND.update(hooks=(sys.getprofile, sys.gettrace, gc.isenabled), off=(sys.setprofile, sys.settrace, gc.disable),
                  on=(sys.setprofile, sys.settrace, gc.enable))


class _CommandLines:
    """JSON-line commands from a descriptor: `get` gives the next line, None when none came within `timeout`
    (None: wait), b"" at EOF."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, b""

    def get(self, timeout: float | None = None) -> bytes | None:
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                if line.strip():
                    return line
            if timeout is not None and not _BOUND["select"]([self.fd], [], [], timeout)[0]:
                return None
            try:
                chunk = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                return b""
            self.buf += chunk


def _gated_fork(gate: int) -> int:
    """fork() through the session's gate: a raw clone(SIGCHLD) carrying the secret in the (ignored)
    parent-tid argument, wrapped in CPython's own before/after-fork hooks, without the handlers a cell registered
    (`os.register_at_fork`: kernel/atfork.py): no code of a kept run's runs in the head (they stay registered)."""
    before, sc, after_child, after_parent, errno = _BOUND["clone"]
    saved = suspend_user_handlers()
    before()
    pid = sc(56, 17, 0, gate, 0, 0)
    if pid == 0:
        after_child()
        restore(saved)
        return 0
    after_parent()
    restore(saved)
    if pid < 0:
        raise OSError(errno(), "checkpoint fork failed")
    return pid


FORGED = "the cell wrote into CRANE's result channel"
_KEEP, _PARK = b"k", b"p"  # the head's word to a command's process once its outcome is read (else: EOF, it ends)


class _Parked:
    """A run's process that was not kept: it answers `eval`s on the state where it stopped."""

    def __init__(self, pid: int, ctl: int, post: int) -> None:
        self.pid, self.ctl, self.post, self.n = pid, ctl, post, 0


def _session_loop(ctx: _Ctx, gate: int, depth: int = 0, announce: bool = True) -> None:
    out_path = os.path.join(ctx.args["dir"], "stdout")
    err_path = os.path.join(ctx.args["dir"], "stderr")
    if announce:
        _write_json(ctx.result_fd, {"event": "ready", "pid": os.getpid(), "depth": 0,
                                    "confinement": ctx.confinement})
    parked: _Parked | None = None
    paths = (out_path, err_path)
    spare: _Spare | None = None
    commands = _CommandLines(ctx.cmd_fd)
    idle_first = False  # after a rollback's resumption (a checkpoint usually follows: its new head forks its own)
    while True:
        line = commands.get(None if spare is not None else IDLE_S if parked is not None or idle_first else 0)
        if line is None:  # no command waiting: the next command's process is forked ahead now
            spare = _spawn(ctx, gate, depth, paths, ahead=True)
            if spare is not None:
                _warm_head(ctx.cmd_fd)
            continue
        if not line:
            break
        idle_first = False
        try:
            cmd = json.loads(line)
        except ValueError:
            _write_json(ctx.result_fd, {"event": "error", "reason": "bad command"})
            continue
        op = cmd.get("op")
        # the command's id and per-command key go back with its reply: the daemon discards any other line (the
        # command's own process is a copy of this one, key included, but holds no descriptor of the daemon's)
        ident, key = cmd.pop("id", None), cmd.pop("key", None)
        resume = cmd.pop("resume", None)  # a checkpoint's: only the checkpoint process keeps it
        line = None  # (bound again by the loop)
        keep = None
        if op != "eval" and parked is not None:
            _drop(parked)
            parked = None
        rec: dict | None = None
        if op == "checkpoint" and spare is not None:  # (the new head's must be its own child)
            _drop_spare(spare)
            spare = None
        if op == "run":
            rec, keep, parked = _in_fork(ctx, gate, cmd, depth, out_path, err_path, spare)
            spare = None
        elif op == "eval":
            rec, stays = _eval_parked(parked, cmd) if parked is not None else (None, False)
            if parked is not None and not stays:
                _drop(parked)
                parked = None
            if rec is None:  # none parked, or it did not answer as CRANE's code does: a fresh fork of the head
                rec = _in_fork(ctx, gate, cmd, depth, out_path, err_path, spare)[0]
                spare = None
        elif op == "checkpoint":
            _single_thread_pools()
            threads = len(os.listdir("/proc/self/task"))
            if threads > 1:
                rec = {"ok": False, "reason": f"{threads} threads are running; a checkpoint needs one"}
            else:
                try:
                    pid = _gated_fork(gate)
                except OSError as exc:
                    rec = {"ok": False, "reason": str(exc)}
                else:
                    if pid == 0:  # the new head: carries on with the same command stream
                        _ENDING.clear()  # (the checkpoint's children)
                        resume = None  # the checkpoint's resume key is not the head's
                        set_parent_death_signal(signal.SIGKILL)
                        depth += 1
                        rec = {"ok": True, "pid": os.getpid(), "depth": depth}
                    else:  # the checkpoint: frozen until the head ends
                        _reap_ended()
                        status = _wait_child(pid)
                        ident, key, rec = ident, resume, {"event": "resumed", "reason": status}
                        idle_first = True
        elif op == "rollback":
            if depth == 0:
                rec = {"ok": False, "reason": "no checkpoint to roll back to"}
            else:
                os._exit(11)  # the checkpoint below wakes up and announces itself (this head's children end with it)
        elif op == "close":
            os._exit(12)
        else:
            rec = {"ok": False, "reason": f"unknown op {op!r}"}
        reply: dict = {"event": "reply", "id": ident, "key": key, "pid": os.getpid(), "depth": depth}
        reply.update(rec or {})
        _write_json(ctx.result_fd, reply)
        reply = rec = cmd = key = resume = None  # type: ignore[assignment]
        _say_later()
        if keep is not None:  # the run's process is the new head: hand it the channel, follow it
            _hand_over(ctx, keep)
        _reap_ended()


_HEAD_FDS: set[int] = set()  # the head's ends of its command processes' pipes: no process it forks keeps them
_ENDING: list[int] = []  # the head's children told to end (EOF on their pipes): reaped after a reply, never waited for


def _head_close(*fds: int) -> None:
    for fd in fds:
        _HEAD_FDS.discard(fd)
        os.close(fd)


# the head's words to command processes that are not kept (park: b"p"; end: b"", EOF on the descriptor), said once the
# reply is out: the process they wake (a parked run's, or the teardown of an ended one) never competes with the reply
_LATER: list[tuple[int, bytes]] = []


def _say_later() -> None:
    for fd, word in _LATER:
        if not word:
            _head_close(fd)
            continue
        try:
            os.write(fd, word)
        except OSError:
            pass  # it is gone: the next eval finds it so (_eval_parked)
    _LATER.clear()


class _Spare:
    """A command's process, forked on demand or ahead (never with a command's key), waiting for its command: the
    head's side of its pipes."""

    def __init__(self, pid: int, go: int, res: int, ctl: int, post: int) -> None:
        self.pid, self.go, self.res, self.ctl, self.post = pid, go, res, ctl, post


def _spawn(ctx: _Ctx, gate: int, depth: int, paths: tuple[str, str], ahead: bool = False) -> _Spare | None:
    """Fork the next command's process now (None when the fork fails), `ahead` of its command (it warms up)."""
    go_r, go_w = os.pipe()
    res_r, res_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    post_r, post_w = os.pipe()
    head = os.getpid()
    try:
        pid = _gated_fork(gate)
    except OSError:
        for fd in (go_r, go_w, res_r, res_w, ctl_r, ctl_w, post_r, post_w):
            os.close(fd)
        return None
    if pid == 0:
        try:
            theirs = (go_w, res_r, ctl_w, post_r, *_HEAD_FDS)  # every head-side end, other processes' too
            _HEAD_FDS.clear()
            _command_process(ctx, gate, go_r, depth, head, paths, res_w, ctl_r, post_w, theirs, ahead)
        finally:
            os._exit(0)
    for fd in (go_r, res_w, ctl_r, post_w):
        os.close(fd)
    _HEAD_FDS.update((go_w, res_r, ctl_w, post_r))
    return _Spare(pid, go_w, res_r, ctl_w, post_r)


def _drop_spare(spare: _Spare) -> None:
    """End a spare (EOF on its command pipe); reaped later."""
    _head_close(spare.go, spare.res, spare.ctl, spare.post)
    _ENDING.append(spare.pid)


def _reap_ended() -> None:
    """Reap the children told to end that have ended (never waits)."""
    for pid in list(_ENDING):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        except InterruptedError:
            continue
        if done:
            _ENDING.remove(pid)


def _in_fork(ctx: _Ctx, gate: int, cmd: dict, depth: int, out_path: str, err_path: str,
             spare: _Spare | None = None) -> tuple[dict, tuple[int, int] | None, _Parked | None]:
    """Run one command (run or eval) in a fresh fork of this head (`spare`, forked ahead, or one forked now): (its
    outcome as the head read it, the process to keep as the new head with its control pipe, the process parked
    for post-mortem evals)."""
    is_run = cmd.get("op") == "run"
    if spare is None:
        spare = _spawn(ctx, gate, depth, (out_path, err_path))
    if spare is None:
        why = "the command's process could not be forked"
        return ({"verdict": "unavailable", "reason": why} if is_run else {"ok": False, "ename": "SandboxError",
                                                                          "evalue": why}), None, None
    pid, res_r, ctl_w, post_r = spare.pid, spare.res, spare.ctl, spare.post
    try:
        os.write(spare.go, (json.dumps(cmd) + "\n").encode())
    except OSError:
        pass  # it is gone: its end is read below
    _head_close(spare.go)
    raw = _read_at_hangup(res_r)
    lines = [x for x in raw.split(b"\n") if x.strip()]
    _head_close(res_r)
    outcome = None
    if len(lines) == 1:
        try:
            obj = json.loads(lines[0])
            if type(obj) is dict and obj.pop("event", None) == "outcome":
                outcome = obj
        except ValueError:
            pass
    if outcome is None and lines:  # anything but one outcome line: the code wrote there
        why = f"{FORGED} ({len(lines)} line(s) where CRANE writes one)"
        outcome = {"verdict": "blocked", "reason": why} if is_run else {"ok": False, "ename": "SandboxError",
                                                                          "evalue": why}
        lines = []  # never kept nor parked
    sealed = _seal_code(pid, raw) if outcome is not None and lines else None
    if outcome is not None and lines and sealed is None:  # issue 41: an outcome counts only sealed
        if not ended_now(pid, 0.5):  # there, not in CRANE's sealed wait: the code wrote the line and lingers
            _head_close(ctl_w, post_r)  # (it ends with the session: parent-death signal)
            return ({"verdict": "blocked", "reason": f"{FORGED} (its process never finished CRANE's epilogue)"}
                    if is_run else {"ok": False, "ename": "SandboxError", "evalue": FORGED}), None, None
        outcome = None  # it ended itself: said by how it ended
    threads = _threads(pid)
    if outcome is None:  # it ended without an outcome
        status = _wait_child(pid, mirror=False)
        outcome = _ended(status) if is_run else {"ok": False, "ename": "SandboxError",
                                                 "evalue": f"the sandbox process ended ({status})"}
        pid = 0
    elif is_run and outcome.get("verdict") == "no-crash" and sealed not in (SEAL_CLEAN, _UNCHECKED):
        # a clean record from a cell that raised (the code is said by where the cell ended, the record could be
        # rewritten by what the cell left running): never kept, never a verdict
        outcome = {"verdict": "blocked", "reason": f"{FORGED} (a no-crash record, but the cell raised)"}
    elif not is_run and outcome.get("ok") and sealed not in (SEAL_CLEAN, _UNCHECKED):
        outcome = {"ok": False, "ename": "SandboxError", "evalue": f"{FORGED} (an answer, but its expression raised)"}
    elif is_run and threads == 1 and outcome.get("verdict") == "no-crash":
        _head_close(post_r)
        return outcome, (pid, ctl_w), None
    elif is_run and threads == 1:
        _LATER.append((ctl_w, _PARK))
        return outcome, None, _Parked(pid, ctl_w, post_r)
    elif is_run and outcome.get("verdict") == "no-crash" and not outcome.get("reason"):
        # clean, but not the session's state from now on: said, never a silent loss of the run's bindings
        outcome["reason"] = (f"the run's state is not kept for the next command: {threads} threads were running "
                             "when it ended (a process of several threads cannot be forked safely)")
    _LATER.extend(((ctl_w, b""), (post_r, b"")))  # it ends (EOF on its control pipe)
    if pid:
        _ENDING.append(pid)
    return outcome, None, None


def _command_process(ctx: _Ctx, gate: int, go: int, depth: int, head: int, paths: tuple[str, str], res: int,
                     ctl: int, post: int, theirs: tuple[int, ...], ahead: bool) -> None:
    """The command's own process: no channel of the daemon's; it waits for its command on `go`, sends
    its outcome up `res`, then waits for the head's word."""
    for fd in (*theirs, ctx.result_fd, ctx.cmd_fd):
        try:
            os.close(fd)
        except OSError:
            pass
    ctx.result_fd = ctx.cmd_fd = -1
    _ENDING.clear()  # (the head's children, and its words to them)
    _LATER.clear()
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != head:
        return
    # bound before the code runs; the watch was taken by the head, whose state this process starts from
    tampered, send, close_every, end = _BOUND["watch"].tampered, _write_json, _close_every, _real_exit()
    find_pools, quiet_pools = find_thread_pools, _single_thread_pools
    fn, buf = _BOUND["seal"]
    answers = (tampered, end, _BOUND["digest"], fn, _BOUND["space"])  # (a parked run's evals: `_serve_evals`)
    if ahead:
        _warm_up(ctx, go)
    line = _read_to_end(go)
    os.close(go)
    try:
        cmd = json.loads(line)
    except ValueError:
        return
    if type(cmd) is not dict:
        return
    try:
        if cmd.get("op") == "run":
            rec, raised = run_command(ctx, cmd, *paths)
        else:
            rec, raised = evaluate(ctx, cmd)
    except BaseException:  # CRANE's own path through the command failed under what the code did: no outcome
        end(_TAMPERED)
    ctx.audit_state["bypass"] = True
    if tampered():
        # its code rebound CRANE's own code or what the outcome path runs on: nothing this process would write
        # can be trusted, so it writes nothing and says so by how it ends (a C function bound before the code ran)
        end(_TAMPERED)
    if cmd.get("op") == "run" and len(os.listdir("/proc/self/task")) > 1:
        # the pools a run started (an import of scipy.linalg loads its own OpenBLAS) run single-threaded and their
        # workers are joined, as a checkpoint's are: a process of one thread can be kept as the new head (a clean
        # run) or parked for post-mortem evals of where it stopped (a crash). (A process still of one thread has
        # none to join: OpenBLAS's shutdown alone took ~6 ms there, waiting on threads this fork never had.)
        find_pools()
        quiet_pools()
    rec["event"] = "outcome"
    _track_channel(res)
    digest = _channel_digest(send(res, rec))  # (CRANE's line, whatever `_SEALED` holds by now: kernel/common)
    code = 2 if raised else 1  # SEAL_RAISED / SEAL_CLEAN (literals: kernel/run): the head takes a clean answer only clean
    close_every(res)  # the head reads to EOF: every copy of the pipe goes, a copy the code made included
    got = -1
    for _ in range(1000):  # sealed (kernel/common): the head sees it in /proc while this waits for its word
        try:
            got = fn(0, ctl, buf, 1, code, digest, SEAL_MAGIC)
        except Exception:  # noqa: BLE001
            break
        if got >= 0:
            break  # (-1: interrupted by a signal, again)
    word = buf.raw[:1] if got == 1 else b""
    if word == _KEEP:
        _, fds, _, _ = _BOUND["recv_fds"](ctx.handover[1], 16, 2)
        ctx.audit_state["bypass"] = False
        if len(fds) != 2:
            return
        ctx.result_fd, ctx.cmd_fd = fds
        os.close(ctl)
        os.close(post)
        _session_loop(ctx, gate, depth, announce=False)
    elif word == _PARK:
        ctx.audit_state["bypass"] = False
        _serve_evals(ctx, ctl, post, answers)


def _warm_up(ctx: _Ctx, go: int) -> None:
    """CRANE's own path through a command, on nothing of the user's, while no command has come: the pages a command
    touches are copied now (copy-on-write), off the daemon's wait. It stops as soon as the command is there."""
    shell, select = ctx.shell, _BOUND["select"]
    steps = (lambda: _compile_plan(shell, "1", "<crane-warm-up>", shell.transform_cell("1")),
             lambda: shell.display_formatter.format(1, include={"text/plain"}),
             lambda: _describe_exception(ValueError("warm-up"), "1"),
             lambda: json.dumps({"verdict": "no-crash", "displays": [], "traceback": ["x"]}, default=str),
             _BOUND["watch"].tampered)  # (its pass takes a reference to every object it watches: their pages)
    for step in steps:
        if select([go], [], [], 0)[0]:
            return
        try:
            with shell.builtin_trap:
                step()
        except Exception:  # noqa: BLE001 - only a warm-up
            pass


def _warm_head(cmd_fd: int) -> None:
    """The head's own path through a command's outcome, on CRANE's sample data, right after it forked a command's
    process ahead (from then on every page either writes is copied on its first write): the pages the head writes
    reading an outcome, checking its seal and writing the reply are copied now, off the daemon's wait. Nothing of
    the user's is touched. It stops as soon as a command is there."""
    select, me = _BOUND["select"], os.getpid()
    sample = {"event": "outcome", "verdict": "crash", "reason": None, "elapsed_ms": 0.5, "ename": "ValueError",
              "evalue": "warm-up", "line": 1, "traceback": ["x"], "displays": [], "denied": [],
              "stdout_span": [0, 0], "stderr_span": [0, 0]}
    raw = (json.dumps(sample) + "\n").encode()
    steps = (lambda: json.loads(raw.split(b"\n")[0]),
             lambda: _seal_code(me, raw),  # (its own /proc: running, not sealed)
             lambda: _BOUND["digest"](raw, digest_size=8).digest(),
             lambda: _threads(me),
             lambda: json.dumps(dict(sample, id=1, key="0" * 32, pid=me, depth=0), default=str),
             lambda: _BOUND["poll"]().register(cmd_fd, 0))
    for step in steps:
        if select([cmd_fd], [], [], 0)[0]:
            return
        try:
            step()
        except Exception:  # noqa: BLE001 - only a warm-up
            pass


def _hand_over(ctx: _Ctx, keep: tuple[int, int]) -> None:
    """Give the channel to the kept run's process, then mirror how it ends (never returns)."""
    pid, ctl = keep
    a, b = ctx.handover
    b.setblocking(False)
    try:
        while True:  # whatever the run queued on the pair is not ours
            _BOUND["recv_fds"](b, 16, 8)
    except OSError:
        pass
    b.setblocking(True)
    ctx.audit_state["bypass"] = True  # (the audit hook refuses sendmsg: this is CRANE's own, no code runs here)
    _BOUND["send_fds"](a, [b"F"], [ctx.result_fd, ctx.cmd_fd])
    os.write(ctl, _KEEP)
    _head_close(ctl)
    _wait_child(pid, mirror=True)


def _serve_evals(ctx: _Ctx, ctl: int, post: int, answers: tuple) -> None:
    """A parked run's process: evals of the state where the run stopped, until the head closes the pipe. Each answer
    is sealed as a run's outcome is: after writing it, this process waits for the next eval in CRANE's sealed read
    (shared/seal: the code says where the eval ended, the digest names the answer's bytes), which the head looks for
    before it takes the answer (`_eval_parked`). `answers` (the check of CRANE's code, the C `_exit`, the digest,
    the sealed read and its buffer) were bound by the command's process before the run's code ran."""
    tampered, end, digest_of, fn, space = answers
    code = digest = 0  # (no answer yet: the head looks for a seal only after an answer)
    buf = b""
    tries = 0
    while True:
        while b"\n" not in buf:
            got = fn(0, ctl, space, len(space), code, digest, SEAL_MAGIC)
            if got < 0:  # (interrupted by a signal: again)
                tries += 1
                if tries > 1000:
                    return
                continue
            if got == 0:
                return
            buf += space.raw[:got]
        line, buf = buf.split(b"\n", 1)
        if not line.strip():
            continue
        try:
            cmd = json.loads(line)
        except ValueError:
            return
        if type(cmd) is not dict:
            return
        try:
            rec, raised = evaluate(ctx, cmd)
        except BaseException:  # noqa: BLE001 - CRANE's own path failed under what the code did: no answer
            end(_TAMPERED)
        ctx.audit_state["bypass"] = True
        if tampered():  # the eval's code rebound CRANE's own code: nothing this process would write is trusted
            end(_TAMPERED)
        rec["n"] = cmd.get("n")
        data = (json.dumps(rec, default=str) + "\n").encode("utf-8", "replace")
        code = 2 if raised else 1  # SEAL_RAISED / SEAL_CLEAN, literals (made before the answer goes: its wait follows)
        digest = int.from_bytes(digest_of(data, digest_size=8).digest(), "little")
        ctx.audit_state["bypass"] = False
        view = data
        while view:
            try:
                view = view[os.write(post, view):]
            except InterruptedError:
                continue


def _eval_parked(parked: _Parked, cmd: dict) -> tuple[dict | None, bool]:
    """An eval in the parked run's process: (its answer, whether the process stays parked). (None, False) when it
    does not answer as CRANE's code does (gone, or something waiting no eval asked for: a fresh fork answers); an
    answer not sealed over exactly its bytes, or one that says the expression ran clean under the seal's raised
    code, is the code's own: a SandboxError answer, and the process is dropped."""
    select = _BOUND["select"]
    parked.n += 1
    try:
        while select([parked.post], [], [], 0)[0]:  # something waiting that no eval asked for
            return None, False
        os.write(parked.ctl, (json.dumps(dict(cmd, n=parked.n)) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            if not select([parked.post], [], [], 60.0)[0]:
                return None, False
            chunk = os.read(parked.post, 1 << 16)
            if not chunk:
                return None, False
            data += chunk
        rec = json.loads(data)
    except (OSError, ValueError):
        return None, False
    if type(rec) is not dict or rec.pop("n", None) != parked.n or data.count(b"\n") != 1:
        return None, False
    sealed = _seal_code(parked.pid, data)  # (issue 41: an answer counts only sealed, as a run's outcome)
    if sealed is None:
        return {"ok": False, "ename": "SandboxError",
                "evalue": f"{FORGED} (the parked run's process did not wait sealed over its answer)"}, False
    if rec.get("ok") and sealed not in (SEAL_CLEAN, _UNCHECKED):
        return {"ok": False, "ename": "SandboxError", "evalue": f"{FORGED} (an answer, but its expression raised)"}, False
    return rec, True


def _drop(parked: _Parked) -> None:
    """End a parked run's process (EOF on its control pipe); reaped later."""
    _head_close(parked.ctl, parked.post)
    _ENDING.append(parked.pid)


def evaluate(ctx: _Ctx, cmd: dict, guard: Callable[[], Any] = contextlib.nullcontext) -> tuple[dict, bool]:
    """An "eval" command: (the text/plain repr of the expression, or the exception it raised; whether it raised —
    said by where it ended, never read from the answer). The expression runs under `guard()` (a portable session's
    call guard) with the session's hooks on; they stop once its answer's text is made (`_hooks_off`: nothing of
    the code's runs while CRANE writes the answer)."""
    _hooks_on()
    try:
        with guard(), ctx.shell.builtin_trap:
            value = eval(compile(cmd.get("expr", ""), CELL_FILENAME, "eval"), ctx.shell.user_ns)
        data, _ = ctx.shell.display_formatter.format(value, include={"text/plain"})
        text = str(data.get("text/plain", ""))[: int(cmd.get("limit", 4000))]
    except BaseException as exc:  # noqa: BLE001
        try:
            rec = {"ok": False, "ename": type(exc).__name__, "evalue": str(exc)[:2000]}
        except BaseException:  # noqa: BLE001 - its text raised too
            rec = {"ok": False, "ename": "Exception", "evalue": "<str() failed>"}
        _hooks_off(ctx, timer=False)
        return rec, True
    _hooks_off(ctx, timer=False)
    return {"ok": True, "value": text}, False


def _ended(status: str) -> dict:
    """The outcome of a run whose process ended without one (its exit, as `_wait_child` words it)."""
    if status == f"exited ({_TAMPERED})":
        return {"verdict": "blocked", "reason": "the cell changed CRANE's own code or what it runs on (its functions, "
                                                "the standard functions or builtins its outcome is made with): its "
                                                "outcome cannot be trusted"}
    if status in ("killed (SIGALRM)", "killed (SIGXCPU)", "killed (SIGKILL)"):
        return {"verdict": "timeout", "reason": f"the cell exceeded its budget ({status})"}
    if status == "killed (SIGSYS)":
        return {"verdict": "blocked", "reason": "the cell made a system call the sandbox forbids"}
    return {"verdict": "crash", "ename": "DeadKernelError", "reason": f"the sandbox process {status}",
            "evalue": f"the process ended ({status}): running this cell would end the kernel's process"}


SPIN_S = 0.002  # after the outcome's pipe hangs up, the head looks for the seal this long without sleeping
_UNCHECKED = -1  # `_seal_code` where this process may not read the command process's /proc


def _seal_code(pid: int, raw: bytes) -> int | None:
    """The code of CRANE's seal when command process `pid` is in its sealed wait over exactly `raw` (what the head
    read from it): SEAL_CLEAN or SEAL_RAISED, from where its cell ended; `_UNCHECKED` where /proc cannot be read
    here (what it sent is then taken as it came); None when it is not sealed over `raw`."""
    seal = await_seal(pid, 2.0, lambda: ended_now(pid, 0.0), SPIN_S)
    if seal is False:
        return _UNCHECKED
    if isinstance(seal, tuple) and seal[1] == int.from_bytes(_BOUND["digest"](raw, digest_size=8).digest(), "little"):
        return seal[0]
    return None


def _read_at_hangup(fd: int) -> bytes:
    """What a command's process sent up `fd`, read once every copy of the pipe's write end is closed (the process
    then enters its sealed wait). The head waits for the hang-up alone (a poll for no event: the outcome's write
    does not wake it, only the last close does); every `_DRAIN_MS` it takes what is there, so an outcome larger
    than the pipe never blocks its writer."""
    poller = _BOUND["poll"]()
    poller.register(fd, 0)
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            poller.poll(_DRAIN_MS)
        except InterruptedError:
            continue
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break  # (writers left, nothing there: wait again)
            except InterruptedError:
                continue
            if not chunk:
                return data
            data += chunk


_DRAIN_MS = 20


def _read_to_end(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            return data
        data += chunk


def _read_byte(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, 1)
        except InterruptedError:
            continue


def _close_every(fd: int) -> None:
    """Close `fd` and every other descriptor of this process on the same pipe: found first, closed together (the
    pipe's reader is woken by the last close, right before this process's sealed wait)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return
    same = []
    for name in os.listdir("/proc/self/fd"):
        try:
            n = int(name)
            other = os.fstat(n)
        except (OSError, ValueError):
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            same.append(n)
    for n in same:
        try:
            os.close(n)
        except OSError:
            pass


def _threads(pid: int) -> int:
    """How many threads process `pid` has, as the Linux kernel says (0 when it is gone): its task entries."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _wait_child(pid: int, mirror: bool = False) -> str:
    """Wait for child `pid`: how it ended ("rollback", "exited (n)", "killed (SIGNAME)"). A close (12) ends this
    process too; with `mirror` (a head that handed its channel on) so does any end, the same way."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            return "lost"
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        if code == 12 or mirror:
            os._exit(code)
        if code > 128:  # a head that handed its channel on mirrors its successor's death by a signal
            return f"killed ({_signame(code - 128)})"
        return "rollback" if code == 11 else f"exited ({code})"
    sig = os.WTERMSIG(status)
    if mirror:
        os._exit(128 + sig)
    return f"killed ({_signame(sig)})"


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


_USER_HOOKS: dict = {}  # a kept run's hooks (profile, trace, gc, Python signal handlers): off in the head, on again
# in each later run's process before its code (kernel state as the real kernel keeps it; never CRANE's code's)


def run_command(ctx: _Ctx, cmd: dict, out_path: str, err_path: str) -> tuple[dict, bool]:
    """A session's run — a fork session's in its command's process, a transplant or portable session's in its
    worker —: (its record with the displays, the denials and the byte spans of the capture files it wrote; whether
    the cell raised — said by where the cell ended, never read from the record). Right after the cell every hook
    that could run the cell's code among CRANE's statements stops (`_hooks_off`), so nothing of the cell's rewrites
    the record, and a kept run's process serves as the head with none of them; they are kept for the session's
    later runs."""
    shell = ctx.shell
    ctx.displays.clear()
    ctx.denied.clear()
    o0, e0 = _fsize(out_path), _fsize(err_path)
    _hooks_on()
    timer = hasattr(signal, "setitimer")  # (Windows has none: the daemon's deadline ends a portable session's run)
    if timer:
        signal.setitimer(signal.ITIMER_REAL, float(cmd.get("budget_s", 10.0)) + 1.5)
    source = cmd.get("source", "")
    seen: dict = {}
    t1 = time.perf_counter()
    try:
        with shell.builtin_trap:
            _exec_plan(ctx, _cell_begins(ctx, source, seen), shell.user_ns)
    except BaseException as exc:  # noqa: BLE001 - the cell's own exception, SystemExit included
        _hooks_off(ctx, timer)
        rec = _cell_record(ctx, exc, source, seen, t1)
        rec.update(displays=list(ctx.displays), denied=ctx.denied[:20], stdout_span=[o0, _fsize(out_path)],
                   stderr_span=[e0, _fsize(err_path)])
        return rec, True
    _hooks_off(ctx, timer)
    rec = _cell_record(ctx, None, source, seen, t1)
    rec.update(displays=list(ctx.displays), denied=ctx.denied[:20], stdout_span=[o0, _fsize(out_path)],
               stderr_span=[e0, _fsize(err_path)])
    return rec, False


def _hooks_off(ctx: _Ctx, timer: bool = True) -> None:
    """Right after a command's code: its budget timer, and where the session seals its replies (the hooks bound
    before any command: `_bind_hooks`) its profile, trace and monitoring hooks, Python signal handlers and the
    garbage collector's runs stop (kernel/run._epilogue_begins, and through functions bound before any command: a
    command that rebinds `sys.setprofile` still leaves none on). They are kept for the next command's code."""
    if "hooks" not in _BOUND:  # (no seal here: a portable session on macOS or Windows)
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
        ctx.audit_state["running"] = False
        return
    getprofile, gettrace, gc_enabled = _BOUND["hooks"]
    saved: dict = {"profile": getprofile(), "trace": gettrace(), "gc": gc_enabled(), "signals": {}}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if callable(handler):
            saved["signals"][sig] = handler
    _epilogue_begins(ctx)  # (its budget timer, hooks, sys.monitoring, Python signal handlers, gc)
    setprofile, settrace, gc_off = _BOUND["off"]
    setprofile(None)
    settrace(None)
    gc_off()
    _USER_HOOKS.clear()
    _USER_HOOKS.update(saved)


def _hooks_on() -> None:
    """In a command's process, before its code: the hooks the session's state has (those of the last command that
    ran: none after a rollback to a state no command changed, whose hooks were never turned off)."""
    if not _USER_HOOKS:
        return
    setprofile, settrace, gc_on = _BOUND["on"]
    for sig, handler in _USER_HOOKS["signals"].items():
        try:
            signal.signal(sig, handler)
        except (OSError, ValueError, TypeError):
            pass
    if _USER_HOOKS["gc"]:
        gc_on()
    settrace(_USER_HOOKS["trace"])
    setprofile(_USER_HOOKS["profile"])


def _fsize(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
