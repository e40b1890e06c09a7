"""Fork sandbox, kernel side: the long-lived session child serving the repair agent.

JSON-line commands (run, eval, checkpoint, rollback, close) from the daemon's FIFO; checkpoints are nested
forks through the seccomp filter's gate (see fork_session.py for the protocol).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from typing import Any

from crane.sandbox.kernel.common import _SETUP, CELL_FILENAME, _Ctx, _write_json  # kernel: strip
from crane.sandbox.kernel.confine import set_parent_death_signal  # kernel: strip
from crane.sandbox.kernel.isolation import _prepare_child, _single_thread_pools  # kernel: strip
from crane.sandbox.kernel.run import run_source  # kernel: strip


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
    _session_loop(ctx, args["fork_gate"])


def _read_commands(fd: int) -> Iterator[bytes]:
    buf = b""
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            return
        buf += chunk


def _gated_fork(gate: int) -> int:
    """fork() through the session's gate: a raw clone(SIGCHLD) carrying the secret in the (ignored)
    parent-tid argument, wrapped in CPython's own before/after-fork hooks."""
    import ctypes
    api = ctypes.pythonapi
    libc = ctypes.PyDLL(None)
    sc = libc.syscall
    sc.restype = ctypes.c_long
    sc.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    api.PyOS_BeforeFork()
    pid = sc(56, 17, 0, gate, 0, 0)
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "checkpoint fork failed")
    return pid


def _session_loop(ctx: _Ctx, gate: int) -> None:
    depth = 0
    out_path = os.path.join(ctx.args["dir"], "stdout")
    err_path = os.path.join(ctx.args["dir"], "stderr")
    _write_json(ctx.result_fd, {"event": "ready", "pid": os.getpid(), "depth": 0, "confinement": ctx.confinement})
    commands = _read_commands(ctx.cmd_fd)
    for line in commands:
        try:
            cmd = json.loads(line)
        except ValueError:
            _write_json(ctx.result_fd, {"event": "error", "reason": "bad command"})
            continue
        op = cmd.get("op")
        # the command's id and per-command key go back with its reply: the daemon discards any other line (a
        # cell of an earlier run can write on the result FIFO, never a later command's key)
        reply: dict = {"event": "reply", "id": cmd.get("id"), "key": cmd.get("key"), "pid": os.getpid(),
                       "depth": depth}
        resume = cmd.pop("resume", None)  # a checkpoint's: only the checkpoint process keeps it
        if op == "run":
            reply.update(run_command(ctx, cmd, out_path, err_path))
        elif op == "eval":
            try:
                with ctx.shell.builtin_trap:
                    value = eval(compile(cmd.get("expr", ""), CELL_FILENAME, "eval"), ctx.shell.user_ns)
                data, _ = ctx.shell.display_formatter.format(value, include={"text/plain"})
                reply.update({"ok": True, "value": str(data.get("text/plain", ""))[: int(cmd.get("limit", 4000))]})
            except BaseException as exc:  # noqa: BLE001
                reply.update({"ok": False, "ename": type(exc).__name__, "evalue": str(exc)[:2000]})
        elif op == "checkpoint":
            _single_thread_pools()
            threads = len(os.listdir("/proc/self/task"))
            if threads > 1:
                reply.update({"ok": False, "reason": f"{threads} threads are running; a checkpoint needs one"})
            else:
                try:
                    pid = _gated_fork(gate)
                except OSError as exc:
                    reply.update({"ok": False, "reason": str(exc)})
                else:
                    if pid == 0:  # the new head: carries on with the same command stream
                        # the checkpoint's resume key is not the head's (its cells'); the ignore: `line` is
                        # dropped here, never read again before the loop binds the next one
                        resume = line = None  # type: ignore[assignment]
                        set_parent_death_signal(signal.SIGKILL)
                        depth += 1
                        reply.update({"ok": True, "pid": os.getpid(), "depth": depth})
                    else:  # the checkpoint: frozen until the head ends
                        status = _wait_child(pid)
                        reply = {"event": "resumed", "id": cmd.get("id"), "key": resume, "pid": os.getpid(),
                                 "depth": depth, "reason": status}
        elif op == "rollback":
            if depth == 0:
                reply.update({"ok": False, "reason": "no checkpoint to roll back to"})
            else:
                os._exit(11)  # the checkpoint below wakes up and announces itself
        elif op == "close":
            os._exit(12)
        else:
            reply.update({"ok": False, "reason": f"unknown op {op!r}"})
        _write_json(ctx.result_fd, reply)


def _wait_child(pid: int) -> str:
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
        if code == 12:
            os._exit(12)
        return "rollback" if code == 11 else f"exited ({code})"
    sig = os.WTERMSIG(status)
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = str(sig)
    return f"killed ({name})"


def run_command(ctx: _Ctx, cmd: dict, out_path: str, err_path: str) -> dict:
    """A session's "run" command (forked and transplant sessions): the cell under its budget, its record with
    the displays, the denials and the byte spans of the capture files it wrote."""
    ctx.displays.clear()
    ctx.denied.clear()
    o0, e0 = _fsize(out_path), _fsize(err_path)
    timer = hasattr(signal, "setitimer")  # (Windows has none: the daemon's deadline ends a portable session's run)
    if timer:
        signal.setitimer(signal.ITIMER_REAL, float(cmd.get("budget_s", 10.0)) + 1.5)
    rec = run_source(ctx, cmd.get("source", ""))
    if timer:
        signal.setitimer(signal.ITIMER_REAL, 0)
    rec.update(displays=list(ctx.displays), denied=ctx.denied[:20], stdout_span=[o0, _fsize(out_path)],
               stderr_span=[e0, _fsize(err_path)])
    return rec


def _fsize(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
