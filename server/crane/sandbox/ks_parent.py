"""Fork sandbox, kernel side, part 6: the entry points, run in the user's kernel process itself.

`start(args_json)` / `session(args_json)`, called through a private `user_expressions` request: refuse quickly
states that cannot be forked safely, `os.fork()`, start a reaper thread (waitpid, so no zombie is left; it
writes the exit status to the daemon's private directory) and return `{"ok": True, "pid": ..., "start": ...}`
at once. The child never returns to the kernel's event loop: it runs `_child_run` / `_child_session` and ends
with `os._exit`.
"""

from __future__ import annotations

import json
import os
import sys
import threading

from crane.sandbox.ks_isolation import _capture_publisher  # kernel: strip
from crane.sandbox.ks_run import _child_run  # kernel: strip
from crane.sandbox.ks_session import _child_session  # kernel: strip
from crane.sandbox.seccomp import supported  # kernel: strip


def _unforkable() -> str | None:
    why = supported()
    if why:
        return why
    mods = sys.modules
    torch = mods.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return "CUDA is initialised in torch: a forked child cannot use the GPU context"
        except Exception:
            pass
    for name, what in (("tensorflow", "TensorFlow"), ("jax", "JAX"), ("cupy", "CuPy")):
        if name in mods:
            return f"{what} is loaded: its runtime threads and device state do not survive fork"
    return None


def _check_private_dir(args: dict) -> str | None:
    try:
        with open(os.path.join(args["dir"], "token")) as f:
            if f.read() == args["token"]:
                return None
    except OSError:
        pass
    return "the kernel does not run on this machine (it cannot see the daemon's private directory)"


def _starttime(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def _reap(pid: int, private_dir: str) -> None:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return
    info = {"exitcode": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}
    try:
        fd = os.open(os.path.join(private_dir, "status"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(info))
    except OSError:
        pass  # the daemon already cleaned up


def _fork(args: dict, child_main) -> dict:
    why = _unforkable() or _check_private_dir(args)
    if why:
        return {"ok": False, "verdict": "unavailable", "reason": why}
    try:
        from IPython import get_ipython
        shell = get_ipython()
        _capture_publisher(shell)
    except Exception:
        shell = None
    if shell is None:
        return {"ok": False, "verdict": "unavailable", "reason": "not an IPython kernel"}
    parent = os.getpid()
    on_main = threading.current_thread() is threading.main_thread()
    try:
        pid = os.fork()
    except OSError as exc:
        return {"ok": False, "verdict": "unavailable", "reason": f"fork failed: {exc}"}
    if pid == 0:  # the child: never returns
        code = 70
        try:
            child_main(args, shell, parent, on_main)
            code = 0
        except BaseException:
            pass
        finally:
            os._exit(code)
    threading.Thread(target=_reap, args=(pid, args["dir"]), name="crane-sandbox-reaper", daemon=True).start()
    return {"ok": True, "pid": pid, "start": _starttime(pid)}


def start(args_json: str) -> dict:
    """Fork a sandbox child that runs one cell; return at once with its pid (parent side)."""
    return _fork(json.loads(args_json), _child_run)


def session(args_json: str) -> dict:
    """Fork a long-lived sandbox child serving SandboxSession commands (parent side)."""
    return _fork(json.loads(args_json), _child_session)
