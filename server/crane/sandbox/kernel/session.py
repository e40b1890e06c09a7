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
import os
import signal
import time
from collections.abc import Callable
from typing import Any, NoReturn

from crane.sandbox.kernel.armed import budget_off, budget_timer  # kernel: strip
from crane.sandbox.kernel.atfork import put_random_state, random_state, restore, suspend_user_handlers  # kernel: strip
from crane.sandbox.kernel.common import (  # kernel: strip
    _SETUP,
    _TAMPERED,
    CELL_FILENAME,
    _Ctx,
    _json_line,
    _json_text,
    _real_exit,
    _track_channel,
    _untraced,
    _Watch,
    _write_json,
    await_seal,
    ended_now,
)
from crane.sandbox.kernel.confine import set_parent_death_signal  # kernel: strip
from crane.sandbox.kernel.isolation import _prepare_child, _single_thread_pools, find_thread_pools  # kernel: strip
from crane.sandbox.kernel.run import (  # kernel: strip
    _c_seal,
    _call_tracing,
    _cell_begins,
    _cell_record,
    _compile_plan,
    _describe_exception,
    _epilogue_begins,
    _exec_plan,
    _fenced,
    _quiet_constants,
)
from crane.sandbox.shared.process_end import ended_outcome  # kernel: strip
from crane.sandbox.shared.seal import SEAL_CLEAN  # kernel: strip


def _child_session(args: dict, shell: Any, parent: int, on_main: bool) -> None:
    """Serve JSON-line commands from the daemon until told to close. See fork_session.py for the protocol.
    All of it — the head, every command's process, a kept run's process serving as the next head — runs untraced
    (`common._untraced`): no trace, profile or `sys.monitoring` hook a command sets ever runs in a frame of CRANE's;
    only the command's own code runs traced, through `sys.call_tracing` (issue 41)."""
    _untraced(_session_main, args, shell, parent, on_main)


def _session_main(args: dict, shell: Any, parent: int, on_main: bool) -> None:
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
    pointers = (api.PyOS_BeforeFork, sc, api.PyOS_AfterFork_Child, api.PyOS_AfterFork_Parent)
    base = _c_funcptr(pointers)
    # each C function called through the C base's own call slot, bound now (an immutable type's: never the
    # pointer's heap class's `__call__`, which a command could rebind); what that slot reads (each pointer's
    # restype, argtypes, errcheck) is checked after every command by identity (`_pointer_watch`)
    call = vars(base)["__call__"].__get__
    _BOUND.update(clone=(*map(call, pointers), ctypes.get_errno), select=select.select, send_fds=socket.send_fds,
                  recv_fds=socket.recv_fds, poll=select.poll,
                  # what the sealed wait is made with, made once: nothing is built after a command's code ran,
                  # between its outcome and the wait the head looks for (`space`: a parked run's sealed read of its
                  # next eval)
                  digest=hashlib.blake2b, space=_pinned(ctypes, 1 << 16),
                  # ... each made in the command's process through `_ctypes`' C types alone (kernel/run._c_seal: a
                  # pointer without argtypes/restype/errcheck made at the call, its 64-bit arguments made by C there):
                  # no converter, result check or class of the command's runs in it (a `c_void_p.from_param` set and
                  # `argtypes` set back to the same list ran the command's code at its own sealed read)
                  c_seal=_c_seal())
    import operator
    # what a command's process checks after its code ran (common._Watch), taken once: a checkpoint's new head and
    # the process of a kept run (whose check found nothing watched changed) start from it
    _BOUND["watched"] = []  # (below: the watch's immutable snapshot, what the check reads: `_unchanged`)
    _BOUND["watch"] = watch = _Watch()
    # ... and `_BOUND` itself, strictly: a command whose code replaced what stops its hooks, seals its outcome or
    # checks it (or anything else here) is `blocked` and never kept (issue 41; tests/sandbox/test_sealed_state.py)
    watch.also(_BOUND)
    # ... and the namespace of every mutable class (a heap type's) that an object here belongs to, or is, strictly:
    # a command that rebinds or adds a method there (`__call__` on ctypes' function-pointer classes) is `blocked`
    for klass in _mutable_classes(_BOUND, pointers):
        watch.also(vars(klass))  # type: ignore[arg-type]
    # the check reads this snapshot, never the watch's attributes (a command could empty them): tuples of the
    # watched namespaces, their keys and objects; the C functions the check calls; the one holder that names it
    ops = (operator.is_, all, map, len, getattr, operator.attrgetter("cell_contents"), frozenset, ValueError, zip, type,
           str)
    snapshot = (tuple(watch.spaces), watch.attrs, watch.cells, watch.shadow, ops, _pointer_watch(base, pointers))
    # a code object's constants are interned in place, tuples within included (each command's `_fenced_command`):
    # done once here, so no command's process writes (copies) the snapshot's pages to do it again
    _bind.__code__.replace(co_consts=(None, snapshot))
    for space, keys, objects, _, _ in snapshot[0]:  # ... and a string swapped so is put back where it came from (CRANE's
        if type(space) is dict:  # own dicts): the check's C-speed pass by identity holds (the equal-string pass is slow)
            for key, value in zip(keys, objects, strict=True):
                if type(value) is str and space.get(key) is not value and space.get(key) == value:
                    space[key] = value
    _BOUND["watched"].append(snapshot)


def _c_funcptr(pointers: tuple) -> type:
    """The C base class of ctypes' function pointers (`_ctypes.CFuncPtr`), from the pointers' own classes: an
    immutable type (no command can rebind its slots). Raises when there is none so (nothing is called through a
    class a command could change)."""
    for klass in type(pointers[0]).__mro__:
        if klass.__module__ == "_ctypes" and klass.__name__ == "CFuncPtr" and klass.__flags__ & _SESSION_IMMUTABLE:
            if all(isinstance(p, klass) for p in pointers):
                return klass
    raise RuntimeError("ctypes' function-pointer base is not an immutable C type")


_SESSION_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a static type's, or a heap type's that no code can change


def _pointer_watch(base: type, pointers: tuple) -> tuple:
    """What the C call slot of `pointers` reads, taken now and compared after each command by identity: (the getset
    descriptors' `__get__` slot, the descriptors, the pointers, their values), each pointer's `restype`, `argtypes`
    and `errcheck` read through the C base's own descriptors (a class attribute a command adds never shadows them)."""
    names = ("restype", "argtypes", "errcheck")
    descriptors = tuple(vars(base)[name] for pointer in pointers for name in names)
    get = vars(type(descriptors[0]))["__get__"]
    owners = tuple(pointer for pointer in pointers for _ in names)
    return get, descriptors, owners, tuple(map(get, descriptors, owners))


def _mutable_classes(bound: dict, pointers: tuple) -> list[type]:
    """Every class that an object `bound` holds (in its tuples, lists and dicts too) belongs to or is, and every class
    in their MROs, that code can change (a heap type not marked immutable); the `pointers` (bound in `_BOUND` through
    the C call slot), their result and argument types too."""
    seen: dict[int, type] = {}
    todo: list = [*bound.values(), *pointers, *(p.restype for p in pointers),
                  *(t for p in pointers for t in p.argtypes or ())]
    done: set[int] = set()
    while todo:
        obj = todo.pop()
        if id(obj) in done:
            continue
        done.add(id(obj))
        if type(obj) in (tuple, list):
            todo.extend(obj)
        elif type(obj) is dict:
            todo.extend(obj.values())
        for klass in (*type(obj).__mro__, *(obj.__mro__ if isinstance(obj, type) else ())):
            if not klass.__flags__ & _SESSION_IMMUTABLE:
                seen[id(klass)] = klass
    return list(seen.values())


def _pinned(ctypes: Any, size: int) -> tuple[bytearray, Any, int]:
    """A buffer the sealed reads fill: (a bytearray, the export that pins it — it can never be resized or moved —, its
    address). Read through the bytearray (a C type no code can patch), never a ctypes object's `raw`."""
    space = bytearray(size)
    pin = ctypes.c_char.from_buffer(space)
    return space, pin, ctypes.addressof(pin)


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
    rstate = random_state()  # (a command draws what its head would: kernel/atfork.py)
    before()
    pid = sc(56, 17, 0, gate, 0, 0)
    if pid == 0:
        after_child()
        restore(saved)
        put_random_state(rstate)
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
            cmd = _json_line(line)
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
        os.write(spare.go, (_json_text(cmd) + "\n").encode())
    except OSError:
        pass  # it is gone: its end is read below
    _head_close(spare.go)
    raw = _read_at_hangup(res_r)
    lines = [x for x in raw.split(b"\n") if x.strip()]
    _head_close(res_r)
    outcome = None
    if len(lines) == 1:
        try:
            obj = _json_line(lines[0])
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
    ctx.audit_state["pid"] = os.getpid()  # the command's own process (kernel/audit: its own end, its own signals)
    # made before the code runs: what the check after it and the seal read are this copy's code constants (see
    # `_fenced_command`), never a local the code could write (3.13) or a hook could write back (3.11/3.12)
    run = _fenced_command(ctx, gate, depth, res, ctl, post)
    if ahead:
        _warm_up(ctx, go)
    line = _read_to_end(go)
    os.close(go)
    try:
        cmd = _json_line(line)
    except ValueError:
        return
    if type(cmd) is not dict:
        return
    run(cmd, paths)


def _become_head(ctx: _Ctx, gate: int, depth: int, ctl: int, post: int) -> None:
    """A kept run's process, told so by the head: it receives the session's channel and serves as the new head."""
    _, fds, _, _ = _BOUND["recv_fds"](ctx.handover[1], 16, 2)
    ctx.audit_state["bypass"] = False
    if len(fds) != 2:
        return
    ctx.result_fd, ctx.cmd_fd = fds
    os.close(ctl)
    os.close(post)
    _session_loop(ctx, gate, depth, announce=False)


def _unchanged(watched: tuple, holder: list, extra: tuple = ()) -> bool:
    """Whether nothing the session's watch covers (`_bind`) was rebound, removed or shadowed: `common._Watch.tampered`
    over the watch's immutable snapshot `watched`, which `holder` (in `_BOUND`, itself watched) must still name. Its
    code reads no global and no builtin (every function it calls is in the snapshot): a command process runs it with
    fresh globals, from its code constants (`_command_then_seal`); `extra`: more namespaces so watched, taken by the
    command's process (the session's context: `_fenced_command`). A string the snapshot holds may have been swapped
    for an equal one (a code object's constants are interned in place, tuples within included): equal strings pass."""
    spaces, attrs, cells, shadow, ops, pointers = watched
    is_, all_, map_, len_, getattr_, contents, frozenset_, value_error, zip_, type_, str_ = ops
    if len_(holder) != 1 or holder[0] is not watched:
        return False
    get, descriptors, owners, objects = pointers  # the C function pointers' restype, argtypes, errcheck
    if not all_(map_(is_, map_(get, descriptors, owners), objects)):
        return False
    for group in (spaces, extra):
        for space, keys, objects, size, names in group:
            if not all_(map_(is_, map_(space.get, keys), objects)):
                for now, then in zip_(map_(space.get, keys), objects):
                    if now is not then and not (type_(now) is str_ and type_(then) is str_ and now == then):
                        return False
            if size >= 0 and len_(space) != size:
                if names is None or not shadow.isdisjoint(frozenset_(space) - names):
                    return False
    fns, attr_names, objects = attrs
    if not all_(map_(is_, map_(getattr_, fns, attr_names), objects)):
        return False
    cell_list, objects = cells
    try:
        for now, then in zip_(map_(contents, cell_list), objects):
            if now is not then and not (type_(now) is str_ and type_(then) is str_ and now == then):
                return False
    except value_error:  # a cell emptied
        return False
    return True


def _fenced_command(ctx: _Ctx, gate: int, depth: int, res: int, ctl: int, post: int) -> Callable[[dict, tuple], None]:
    """A copy of `_command_then_seal` whose constants are what it reads after the command's code, taken in the
    command's process before that code runs (kernel/run._fenced_run's construction, issue 41): the session's context,
    the watch's snapshot and the check's code (`_unchanged`, run with fresh globals), the functions that stop hooks
    again, the sealed read and the pinned buffer it fills, the digest's hash, the pipes, the C `_exit`, and what the
    process does on the head's word (`_become_head` with the gate and depth; the parked run's evals, a copy of
    `_evals_then_seal` made the same way). A running frame's constants cannot change; its locals can (3.13, PEP 667),
    and a hook's write-back could (3.11/3.12; but no hook runs in CRANE's frames: `common._untraced`)."""
    function: Any = type(_unchanged)  # (types.FunctionType, without an import)
    setprofile, settrace, gc_off = _BOUND["off"]
    holder = _BOUND["watched"]
    space, _, address = _BOUND["space"]
    # the session's context too, by identity (a kept run's process serves as the head with it: a command that put an
    # object of its own there, or in its setup arguments, would run its code in the head): every attribute but the
    # exception a display shows (set and cleared during a run), and every setup argument
    own, args = vars(ctx), ctx.args
    keys = tuple(k for k in own if k != "shown_exc")
    extra = ((own, keys, tuple(own[k] for k in keys), -1, None), (args, tuple(args), tuple(args.values()), len(args),
                                                                   None))
    taken = {"<extra>": extra, "<fn>": type.__call__.__get__(function), "<unchanged>": _unchanged.__code__, "<dict>": dict,
             "<watched>": holder[0], "<holder>": holder, "<space>": space,
             "<size>": len(space), "<res>": res, "<ctl>": ctl, "<post>": post, "<ctx>": ctx, "<gate>": gate,
             "<depth>": depth, "<int>": int.from_bytes, "<hash>": _BOUND["digest"], "<setprofile>": setprofile,
             "<settrace>": settrace, "<gc_off>": gc_off, "<end>": _real_exit(), "<tampered>": _TAMPERED,
             "<tries>": range(1000), "<bytes>": bytes, "<keep>": _become_head,
             "<room_at>": address.to_bytes(8, _BOUND["c_seal"]["<order>"]), **_BOUND["c_seal"],
             **_quiet_constants()}
    taken["<evals>"] = _fenced(_evals_then_seal, taken)
    return _fenced(_command_then_seal, taken)


def _command_then_seal(cmd: dict, paths: tuple[str, str]) -> None:
    """A command (run or eval) in its process, its outcome sent up the outcome pipe, the check, the seal, and what
    the head's word says (a template: see `_fenced_command`; `"<ctx>"` is the session's context). Whatever of the
    code's own runs while the outcome is made and written (its exception's `__str__`, a value's `__repr__`) runs
    before the check; after it, every hook is stopped again and nothing but this run's constants is read: no global,
    no builtin, no local but `sent` (what CRANE wrote: changed, the seal matches nothing) and `got`. How the code
    ended is said by which branch seals (the code a literal there): a command whose code rebound anything watched
    ends with `_TAMPERED`, its outcome never taken. The head's word: b"k" (kept: the new head), b"p" (parked: the
    evals of where it stopped), else (EOF) the process ends."""
    is_run = cmd.get("op") == "run"
    state = _command_begins("<ctx>", cmd, is_run, paths)  # type: ignore[arg-type]
    try:
        value = _command_code("<ctx>", cmd, state, is_run)  # type: ignore[arg-type]
    except BaseException as e:  # noqa: BLE001 - the code's own exception, SystemExit included
        try:
            rec = _command_record("<ctx>", state, is_run, e, None, paths)  # type: ignore[arg-type]
            try:  # (a handler of the cell's raising between the passes' own `try`s: TAMPERED too)
                for _ in "<tries>":  # (no code of the code's runs once CRANE's bytes exist: run._quiet_constants; kept or
                    try:  # parked, `_hooks_on` gives the code its handlers and mask back)
                        "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                          "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore
                        "<setitem>".__call__("<sysdict>", "unraisablehook", "<hook>")  # type: ignore[operator]
                        for s in "<signals>":
                            if "<callable>".__call__("<getsignal>".__call__(s)):  # type: ignore[operator]
                                "<signal>".__call__(s, "<ign>")  # type: ignore[operator]
                    except BaseException:  # noqa: BLE001, S110 - a handler of the code's ran (and raised): checked below
                        pass
                    if "<any>".__call__("<map>".__call__("<callable>", "<map>".__call__(  # type: ignore[operator]
                            "<getsignal>", "<signals>"))) is False and "<is>".__call__("<get>".__call__(  # type: ignore
                            "<sysdict>", "unraisablehook"), "<hook>") is True:
                        break
                else:  # (tries ran out, a handler of the cell's still set: no record is sealed)
                    "<end>".__call__("<tampered>")  # type: ignore[operator]
            except BaseException:  # noqa: BLE001
                "<end>".__call__("<tampered>")  # type: ignore[operator]
            "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                              "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore[operator]
            "<gc_off>".__call__()  # type: ignore[operator]
            sent = _outcome_out("<ctx>", rec, is_run, "<res>")  # type: ignore[arg-type]
        except BaseException:  # noqa: BLE001 - CRANE's own path failed under what the code did: no outcome
            "<end>".__call__("<tampered>")  # type: ignore[operator]
        "<setprofile>".__call__(None)  # type: ignore[operator]
        "<settrace>".__call__(None)  # type: ignore[operator]
        "<gc_off>".__call__()  # type: ignore[operator]
        if "<fn>".__call__("<unchanged>", "<dict>".__call__())(  # type: ignore[operator]
                "<watched>", "<holder>", "<extra>") is True:
            # sealed: the code raised (SEAL_RAISED, 2), over what CRANE wrote; the head's word ends the wait
            got = -1
            for _ in "<tries>":  # (-1: interrupted by a signal, again)
                got = "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), 0, "<ctl>",  # type: ignore[operator]
                    "<copy>".__call__("<u64>", "<room_at>"), 1, 2, "<copy>".__call__(  # type: ignore[operator]
                        "<u64>", "<to>".__call__("<int>".__call__("<hash>".__call__(  # type: ignore[operator]
                            sent, digest_size=8).digest(), "little"), 8, "<order>")),
                    "<copy>".__call__("<u64>", "<mark>"))  # type: ignore[operator]
                if got >= 0:
                    break
            if got == 1 and "<space>".__getitem__(0) == 112:  # b"p": parked
                "<evals>".__call__("<ctx>")  # type: ignore[operator]
            return
    else:
        try:
            rec = _command_record("<ctx>", state, is_run, None, value, paths)  # type: ignore[arg-type]
            try:  # (a handler of the cell's raising between the passes' own `try`s: TAMPERED too)
                for _ in "<tries>":  # (no code of the code's runs once CRANE's bytes exist: run._quiet_constants; kept or
                    try:  # parked, `_hooks_on` gives the code its handlers and mask back)
                        "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                          "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore
                        "<setitem>".__call__("<sysdict>", "unraisablehook", "<hook>")  # type: ignore[operator]
                        for s in "<signals>":
                            if "<callable>".__call__("<getsignal>".__call__(s)):  # type: ignore[operator]
                                "<signal>".__call__(s, "<ign>")  # type: ignore[operator]
                    except BaseException:  # noqa: BLE001, S110 - a handler of the code's ran (and raised): checked below
                        pass
                    if "<any>".__call__("<map>".__call__("<callable>", "<map>".__call__(  # type: ignore[operator]
                            "<getsignal>", "<signals>"))) is False and "<is>".__call__("<get>".__call__(  # type: ignore
                            "<sysdict>", "unraisablehook"), "<hook>") is True:
                        break
                else:  # (tries ran out, a handler of the cell's still set: no record is sealed)
                    "<end>".__call__("<tampered>")  # type: ignore[operator]
            except BaseException:  # noqa: BLE001
                "<end>".__call__("<tampered>")  # type: ignore[operator]
            "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                              "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore[operator]
            "<gc_off>".__call__()  # type: ignore[operator]
            sent = _outcome_out("<ctx>", rec, is_run, "<res>")  # type: ignore[arg-type]
        except BaseException:  # noqa: BLE001 - CRANE's own path failed under what the code did: no outcome
            "<end>".__call__("<tampered>")  # type: ignore[operator]
        "<setprofile>".__call__(None)  # type: ignore[operator]
        "<settrace>".__call__(None)  # type: ignore[operator]
        "<gc_off>".__call__()  # type: ignore[operator]
        if "<fn>".__call__("<unchanged>", "<dict>".__call__())(  # type: ignore[operator]
                "<watched>", "<holder>", "<extra>") is True:
            # sealed: the code ended clean (SEAL_CLEAN, 1), over what CRANE wrote; the head's word ends the wait
            got = -1
            for _ in "<tries>":
                got = "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), 0, "<ctl>",  # type: ignore[operator]
                    "<copy>".__call__("<u64>", "<room_at>"), 1, 1, "<copy>".__call__(  # type: ignore[operator]
                        "<u64>", "<to>".__call__("<int>".__call__("<hash>".__call__(  # type: ignore[operator]
                            sent, digest_size=8).digest(), "little"), 8, "<order>")),
                    "<copy>".__call__("<u64>", "<mark>"))  # type: ignore[operator]
                if got >= 0:
                    break
            if got == 1 and "<space>".__getitem__(0) == 107:  # b"k": kept, the new head
                "<keep>".__call__("<ctx>", "<gate>", "<depth>", "<ctl>", "<post>")  # type: ignore[operator]
            elif got == 1 and "<space>".__getitem__(0) == 112:  # b"p": parked
                "<evals>".__call__("<ctx>")  # type: ignore[operator]
            return
    # the code rebound CRANE's code or what it runs on: its outcome is not taken (the head sees how this ends)
    "<end>".__call__("<tampered>")  # type: ignore[operator]


def _evals_then_seal(ctx: _Ctx) -> None:
    """A parked run's process: evals of the state where the run stopped, until the head closes the pipe (a template,
    made with `_command_then_seal`'s constants: see `_fenced_command`). Each answer is sealed as a run's outcome is:
    after writing it, this process waits for the next eval in CRANE's sealed read (shared/seal: the code — a literal,
    by where the expression ended — and the digest of the answer's bytes), which the head looks for before it takes
    the answer (`_eval_parked`). Nothing read after an expression's code but this copy's constants and `sent`/`got`;
    a command line is read whole before an expression runs, and nothing of one survives it."""
    data = b""
    while True:
        while b"\n" not in data:
            got = "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), 0, "<ctl>",  # type: ignore[operator]
                                    "<copy>".__call__("<u64>", "<room_at>"), "<size>", 0, 0,  # type: ignore[operator]
                                    "<copy>".__call__("<u64>", "<mark>"))  # type: ignore[operator]
            if got == 0:
                return
            if got > 0:
                data = data + "<bytes>".__call__("<space>"[:got])  # type: ignore[operator]
        cmd = _eval_command(data)
        data = b""
        if cmd is None:
            return
        try:
            value = _command_code(ctx, cmd, _command_begins(ctx, cmd, False, ("", "")), False)
        except BaseException as e:  # noqa: BLE001 - the expression's own exception
            try:
                rec = _command_record(ctx, {}, False, e, None, ("", ""))
                try:  # (a handler of the cell's raising between the passes' own `try`s: TAMPERED too)
                    for _ in "<tries>":  # (no code of the code's runs once CRANE's bytes exist: run._quiet_constants; kept or
                        try:  # parked, `_hooks_on` gives the code its handlers and mask back)
                            "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                              "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore
                            "<setitem>".__call__("<sysdict>", "unraisablehook", "<hook>")  # type: ignore[operator]
                            for s in "<signals>":
                                if "<callable>".__call__("<getsignal>".__call__(s)):  # type: ignore[operator]
                                    "<signal>".__call__(s, "<ign>")  # type: ignore[operator]
                        except BaseException:  # noqa: BLE001, S110 - a handler of the code's ran (and raised): checked below
                            pass
                        if "<any>".__call__("<map>".__call__("<callable>", "<map>".__call__(  # type: ignore[operator]
                                "<getsignal>", "<signals>"))) is False and "<is>".__call__("<get>".__call__(  # type: ignore
                                "<sysdict>", "unraisablehook"), "<hook>") is True:
                            break
                    else:  # (tries ran out, a handler of the cell's still set: no record is sealed)
                        "<end>".__call__("<tampered>")  # type: ignore[operator]
                except BaseException:  # noqa: BLE001
                    "<end>".__call__("<tampered>")  # type: ignore[operator]
                "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                  "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore[operator]
                "<gc_off>".__call__()  # type: ignore[operator]
                sent = _answer_out(ctx, rec, cmd, "<post>")  # type: ignore[arg-type]
            except BaseException:  # noqa: BLE001 - CRANE's own path failed under what the code did: no answer
                "<end>".__call__("<tampered>")  # type: ignore[operator]
            "<setprofile>".__call__(None)  # type: ignore[operator]
            "<settrace>".__call__(None)  # type: ignore[operator]
            "<gc_off>".__call__()  # type: ignore[operator]
            if "<fn>".__call__("<unchanged>", "<dict>".__call__())(  # type: ignore[operator]
                    "<watched>", "<holder>", "<extra>") is not True:
                "<end>".__call__("<tampered>")  # type: ignore[operator]
            # sealed: the expression raised (SEAL_RAISED, 2), over the answer; the next eval ends the wait
            got = -1
            for _ in "<tries>":
                got = "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), 0, "<ctl>",  # type: ignore[operator]
                    "<copy>".__call__("<u64>", "<room_at>"), "<size>", 2, "<copy>".__call__(  # type: ignore[operator]
                        "<u64>", "<to>".__call__("<int>".__call__("<hash>".__call__(  # type: ignore[operator]
                            sent, digest_size=8).digest(), "little"), 8, "<order>")),
                    "<copy>".__call__("<u64>", "<mark>"))  # type: ignore[operator]
                if got >= 0:
                    break
        else:
            try:
                rec = _command_record(ctx, {}, False, None, value, ("", ""))
                try:  # (a handler of the cell's raising between the passes' own `try`s: TAMPERED too)
                    for _ in "<tries>":  # (no code of the code's runs once CRANE's bytes exist: run._quiet_constants; kept or
                        try:  # parked, `_hooks_on` gives the code its handlers and mask back)
                            "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                              "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore
                            "<setitem>".__call__("<sysdict>", "unraisablehook", "<hook>")  # type: ignore[operator]
                            for s in "<signals>":
                                if "<callable>".__call__("<getsignal>".__call__(s)):  # type: ignore[operator]
                                    "<signal>".__call__(s, "<ign>")  # type: ignore[operator]
                        except BaseException:  # noqa: BLE001, S110 - a handler of the code's ran (and raised): checked below
                            pass
                        if "<any>".__call__("<map>".__call__("<callable>", "<map>".__call__(  # type: ignore[operator]
                                "<getsignal>", "<signals>"))) is False and "<is>".__call__("<get>".__call__(  # type: ignore
                                "<sysdict>", "unraisablehook"), "<hook>") is True:
                            break
                    else:  # (tries ran out, a handler of the cell's still set: no record is sealed)
                        "<end>".__call__("<tampered>")  # type: ignore[operator]
                except BaseException:  # noqa: BLE001
                    "<end>".__call__("<tampered>")  # type: ignore[operator]
                "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                  "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore[operator]
                "<gc_off>".__call__()  # type: ignore[operator]
                sent = _answer_out(ctx, rec, cmd, "<post>")  # type: ignore[arg-type]
            except BaseException:  # noqa: BLE001
                "<end>".__call__("<tampered>")  # type: ignore[operator]
            "<setprofile>".__call__(None)  # type: ignore[operator]
            "<settrace>".__call__(None)  # type: ignore[operator]
            "<gc_off>".__call__()  # type: ignore[operator]
            if "<fn>".__call__("<unchanged>", "<dict>".__call__())(  # type: ignore[operator]
                    "<watched>", "<holder>", "<extra>") is not True:
                "<end>".__call__("<tampered>")  # type: ignore[operator]
            # sealed: the expression ended clean (SEAL_CLEAN, 1), over the answer; the next eval ends the wait
            got = -1
            for _ in "<tries>":
                got = "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), 0, "<ctl>",  # type: ignore[operator]
                    "<copy>".__call__("<u64>", "<room_at>"), "<size>", 1, "<copy>".__call__(  # type: ignore[operator]
                        "<u64>", "<to>".__call__("<int>".__call__("<hash>".__call__(  # type: ignore[operator]
                            sent, digest_size=8).digest(), "little"), 8, "<order>")),
                    "<copy>".__call__("<u64>", "<mark>"))  # type: ignore[operator]
                if got >= 0:
                    break
        if got <= 0:
            return
        data = "<bytes>".__call__("<space>"[:got])  # type: ignore[operator]


def _eval_command(data: bytes) -> dict | None:
    """The one eval command in `data` (one JSON line, nothing after it), or None."""
    line, _, rest = data.partition(b"\n")
    if rest.strip():
        return None
    try:
        cmd = _json_line(line)
    except ValueError:
        return None
    return cmd if type(cmd) is dict else None


def _answer_out(ctx: _Ctx, rec: dict, cmd: dict, post: int) -> bytes:
    """Write an eval's answer (numbered as its command) on `post`; its bytes, for the seal's digest."""
    ctx.audit_state["bypass"] = True
    rec["n"] = cmd.get("n")
    data = (_json_text(rec) + "\n").encode("utf-8", "replace")
    ctx.audit_state["bypass"] = False
    view = data
    while view:
        try:
            view = view[os.write(post, view):]
        except InterruptedError:
            continue
    return data


def _command_begins(ctx: _Ctx, cmd: dict, is_run: bool, paths: tuple[str, str]) -> dict:
    """Before a command's code: a run's (`_run_begins`), or an eval's hooks on."""
    if is_run:
        return _run_begins(ctx, cmd, *paths)
    _hooks_on()
    return {}


def _command_code(ctx: _Ctx, cmd: dict, state: dict, is_run: bool) -> str | None:
    """The command's own code, untraced by CRANE's frames (`sys.call_tracing`): a run's cell, or an eval's expression
    (its text/plain repr)."""
    if is_run:
        _exec_plan(ctx, _cell_begins(ctx, state["source"], state["seen"]), ctx.shell.user_ns, untraced=True)
        return None
    return _eval_text(ctx, cmd, contextlib.nullcontext, untraced=True)


def _command_record(ctx: _Ctx, state: dict, is_run: bool, exc: BaseException | None, value: str | None,
                    paths: tuple[str, str]) -> dict:
    """A command's outcome, its hooks stopped (`_hooks_off`)."""
    if is_run:
        return _run_record(ctx, state, exc, *paths)
    rec = _eval_error(exc) if exc is not None else {"ok": True, "value": value}
    _hooks_off(ctx, timer=False)
    return rec


def _outcome_out(ctx: _Ctx, rec: dict, is_run: bool, res: int) -> bytes:
    """Send a command's outcome up `res` and close every copy of it (the head reads to EOF); every byte CRANE wrote
    there (`_write_json`), for the seal's digest."""
    ctx.audit_state["bypass"] = True
    if is_run and len(os.listdir("/proc/self/task")) > 1:
        # the pools a run started (an import of scipy.linalg loads its own OpenBLAS) run single-threaded and their
        # workers are joined, as a checkpoint's are: a process of one thread can be kept as the new head (a clean
        # run) or parked for post-mortem evals of where it stopped (a crash). (A process still of one thread has
        # none to join: OpenBLAS's shutdown alone took ~6 ms there, waiting on threads this fork never had.)
        find_thread_pools()
        _single_thread_pools()
    rec["event"] = "outcome"
    _track_channel(res)
    sent = _write_json(res, rec)  # (CRANE's line, whatever `_SEALED` holds by now: kernel/common)
    _close_every(res)  # the head reads to EOF: every copy of the pipe goes, a copy the code made included
    return sent


def _warm_up(ctx: _Ctx, go: int) -> None:
    """CRANE's own path through a command, on nothing of the user's, while no command has come: the pages a command
    touches are copied now (copy-on-write), off the daemon's wait. It stops as soon as the command is there."""
    shell, select = ctx.shell, _BOUND["select"]
    steps = (lambda: _compile_plan(shell, "1", "<crane-warm-up>", shell.transform_cell("1")),
             lambda: shell.display_formatter.format(1, include={"text/plain"}),
             lambda: _describe_exception(ValueError("warm-up"), "1"),
             lambda: _json_text({"verdict": "no-crash", "displays": [], "traceback": ["x"]}),
             lambda: _unchanged(_BOUND["watched"][0], _BOUND["watched"]))  # (its pass takes a reference to every
    # object it watches: their pages)
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
    raw = (_json_text(sample) + "\n").encode()
    steps = (lambda: _json_line(raw.split(b"\n")[0]),
             lambda: _seal_code(me, raw),  # (its own /proc: running, not sealed)
             lambda: _BOUND["digest"](raw, digest_size=8).digest(),
             lambda: _threads(me),
             lambda: _json_text(dict(sample, id=1, key="0" * 32, pid=me, depth=0)),
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
        os.write(parked.ctl, (_json_text(dict(cmd, n=parked.n)) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            if not select([parked.post], [], [], 60.0)[0]:
                return None, False
            chunk = os.read(parked.post, 1 << 16)
            if not chunk:
                return None, False
            data += chunk
        rec = _json_line(data)
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
        text = _eval_text(ctx, cmd, guard)
    except BaseException as exc:  # noqa: BLE001
        try:
            rec = _eval_error(exc)
            _hooks_off(ctx, timer=False)
        except BaseException:  # noqa: BLE001 - CRANE's own path failed under what the code did (`_end_tampered`)
            _end_tampered()
        return rec, True
    try:
        _hooks_off(ctx, timer=False)
    except BaseException:  # noqa: BLE001 - CRANE's own path failed under what the code did (`_end_tampered`)
        _end_tampered()
    return {"ok": True, "value": text}, False


def _eval_text(ctx: _Ctx, cmd: dict, guard: Callable[[], Any], untraced: bool = False) -> str:
    """An eval's expression, run under `guard()`: the text/plain repr of its value. `untraced` (a fork session's
    command: CRANE's frames untraced) through `sys.call_tracing`, so the session's hooks see it as in the kernel."""
    trap = ctx.shell.builtin_trap  # (entered and left by calls, never a `with`: kernel/run._exec_plan)
    with guard():
        trap.__enter__()
        code = compile(cmd.get("expr", ""), CELL_FILENAME, "eval")
        value = _call_tracing(eval, (code, ctx.shell.user_ns)) if untraced else eval(code, ctx.shell.user_ns)
        trap.__exit__(None, None, None)
    data, _ = ctx.shell.display_formatter.format(value, include={"text/plain"})
    return str(data.get("text/plain", ""))[: int(cmd.get("limit", 4000))]


def _eval_error(exc: BaseException) -> dict:
    """An eval's answer when its expression raised `exc`."""
    try:
        return {"ok": False, "ename": type(exc).__name__, "evalue": str(exc)[:2000]}
    except BaseException:  # noqa: BLE001 - its text raised too
        return {"ok": False, "ename": "Exception", "evalue": "<str() failed>"}


def _ended(status: str) -> dict:
    """The outcome of a run whose process ended without one (its exit, as `_wait_child` words it): the one decision
    every session path makes (shared/process_end.ended_outcome)."""
    return ended_outcome(status)


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
    state = _run_begins(ctx, cmd, out_path, err_path)
    try:
        _exec_plan(ctx, _cell_begins(ctx, state["source"], state["seen"]), ctx.shell.user_ns)
    except BaseException as exc:  # noqa: BLE001 - the cell's own exception, SystemExit included
        try:
            return _run_record(ctx, state, exc, out_path, err_path), True
        except BaseException:  # noqa: BLE001 - CRANE's own path failed under what the cell did (`_end_tampered`)
            _end_tampered()
    try:
        return _run_record(ctx, state, None, out_path, err_path), False
    except BaseException:  # noqa: BLE001 - CRANE's own path failed under what the cell did (`_end_tampered`)
        _end_tampered()


def _end_tampered(end: Callable[[int], Any] = _real_exit()) -> NoReturn:  # noqa: B008 - bound at load
    """A command whose record CRANE's own code could not make after the command's code ran — that code broke what
    CRANE runs on (`builtins.KeyError` swapped for a class of its own: the standard library's `except KeyError` no
    longer catches a real one, and `signal.valid_signals` raises) — ends the process as one whose code rebound CRANE's
    code (`_TAMPERED`: no reply, `blocked`), as a fork session's command does (`_command_then_seal`); never the
    worker's own failure (exit 70, which named nothing). `end`: the C `_exit`, bound when this module was loaded."""
    end(_TAMPERED)
    raise SystemExit(_TAMPERED)  # (never reached)


def _run_begins(ctx: _Ctx, cmd: dict, out_path: str, err_path: str) -> dict:
    """Before a run's cell: its displays and denials cleared, the capture files' sizes, its hooks on, its timer."""
    ctx.displays.clear()
    ctx.denied.clear()
    state = {"spans": (_fsize(out_path), _fsize(err_path)), "source": cmd.get("source", ""), "seen": {}}
    _hooks_on()
    state["timer"] = timer = hasattr(signal, "setitimer")  # (Windows has none: the daemon's deadline ends a portable
    # session's run)
    if timer:
        budget_timer(float(cmd.get("budget_s", 10.0)) + 1.5)
    state["t1"] = time.perf_counter()
    return state


def _run_record(ctx: _Ctx, state: dict, exc: BaseException | None, out_path: str, err_path: str) -> dict:
    """Right after a run's cell (`exc`: what it raised, None when it ended clean): its hooks off, its record."""
    _hooks_off(ctx, state["timer"])
    rec = _cell_record(ctx, exc, state["source"], state["seen"], state["t1"])
    o0, e0 = state["spans"]
    rec.update(displays=list(ctx.displays), denied=ctx.denied[:20], stdout_span=[o0, _fsize(out_path)],
               stderr_span=[e0, _fsize(err_path)])
    return rec


def _hooks_off(ctx: _Ctx, timer: bool = True) -> None:
    """Right after a command's code: its budget timer, and where the session seals its replies (the hooks bound
    before any command: `_bind_hooks`) its profile, trace and monitoring hooks, Python signal handlers and the
    garbage collector's runs stop (kernel/run._epilogue_begins, and through functions bound before any command: a
    command that rebinds `sys.setprofile` still leaves none on). They are kept for the next command's code."""
    if "hooks" not in _BOUND:  # (no seal here: a portable session on macOS or Windows)
        if timer:
            budget_off()
        ctx.audit_state["running"] = False
        return
    saved = _hooks_now()  # (the mask the code left: the outcome's epilogue blocks every signal, `_fenced_command`)
    _epilogue_begins(ctx)  # (its budget timer, hooks, sys.monitoring, Python signal handlers, gc)
    setprofile, settrace, gc_off = _BOUND["off"]
    setprofile(None)
    settrace(None)
    gc_off()
    _USER_HOOKS.clear()
    _USER_HOOKS.update(saved)


def _hooks_now() -> dict:
    """The process's profile and trace hooks, the collector's state, its Python signal handlers and signal mask."""
    getprofile, gettrace, gc_enabled = _BOUND["hooks"]
    saved: dict = {"profile": getprofile(), "trace": gettrace(), "gc": gc_enabled(), "signals": {},
                   "mask": signal.pthread_sigmask(signal.SIG_BLOCK, ())}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if callable(handler):
            saved["signals"][sig] = handler
    return saved


def _keep_start_hooks() -> None:
    """A copy session's worker, before its first command: its own hooks as it starts are what `_hooks_on` gives the
    first command's code back. CRANE's sealed replies before it (a `load`: the signal step sets every Python handler
    to SIG_IGN and stops the collector) are no command's, so before, the first run after a load found SIGINT ignored
    (the cell's `os.kill(os.getpid(), SIGINT)` came back `no-crash` where the kernel raises KeyboardInterrupt) and the
    collector off."""
    _USER_HOOKS.clear()
    _USER_HOOKS.update(_hooks_now())


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
    if "mask" in _USER_HOOKS:  # (signals due meanwhile reach the state's handlers here, before the code)
        signal.pthread_sigmask(signal.SIG_SETMASK, _USER_HOOKS["mask"])
    settrace(_USER_HOOKS["trace"])
    setprofile(_USER_HOOKS["profile"])


def _fsize(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
