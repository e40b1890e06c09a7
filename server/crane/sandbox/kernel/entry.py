"""Fork sandbox, kernel side: the entry points, run in the user's kernel process itself.

`start(args_json)` / `session(args_json)`, called through a private `user_expressions` request: refuse quickly
states that cannot be forked safely, `os.fork()`, start a reaper thread (waitpid, so no zombie is left; it
writes the exit status into the run's private directory) and return `{"ok": True, "pid": ..., "start": ...}`
at once. The child never returns to the kernel's event loop: it runs `_child_run` / `_child_session` and ends
with `os._exit`.

Channel: when the kernel sees the daemon's private directory (the token file matches) the child writes there
("local": the daemon reads the result FIFO and kills through a pidfd). Otherwise (a kernel on another machine,
or in another mount namespace) the kernel makes its own private directory ("remote") and the daemon collects
the run with further private requests: `collect(run_id)` (the record, captured output, exit status; the
directory is removed once it is done) and `stop(run_id)`. Remote runs nobody collects are swept after an hour.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from crane.kernel_common.ipython_shell import ipython_shell, shell_namespace  # kernel: strip
from crane.sandbox.kernel.atfork import (  # kernel: strip
    keep_suspended,
    put_random_state,
    random_state,
    restore,
    suspend_user_handlers,
)
from crane.sandbox.kernel.common import await_seal, proc_kb, read_seal  # kernel: strip
from crane.sandbox.kernel.confine import prebuild_filters, supported  # kernel: strip
from crane.sandbox.kernel.fork_threads import note_notebook_threads  # kernel: strip
from crane.sandbox.kernel.isolation import find_thread_pools, publisher_class, unsafe_pools  # kernel: strip
from crane.sandbox.kernel.request import RequestError, check_request, decode_request  # kernel: strip
from crane.sandbox.kernel.run import _child_run  # kernel: strip
from crane.sandbox.kernel.session import _child_session  # kernel: strip
from crane.sandbox.kernel.shield import dumps, free_threaded, private_open  # kernel: strip


def _unforkable(source: str = "", ns: dict | None = None) -> str | None:
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
    return unsafe_pools(source, ns)


def _check_private_dir(args: dict) -> str | None:
    try:
        with private_open(os.path.join(args["dir"], "token"), "r") as f:
            if f.read() == args["token"]:
                return None
    except OSError:
        pass
    return "the kernel does not see the daemon's private directory"


_RUNS: dict = {}  # remote runs: run_id -> {"pid", "dir", "ended" (monotonic time or None)}
_SWEEP_S = 3600.0


def _remote_dir(args: dict) -> dict:
    """A private directory on the kernel's side for a daemon that cannot see ours."""
    path = tempfile.mkdtemp(prefix="crane-sbx-k-")
    os.mkdir(os.path.join(path, "scratch"), 0o700)
    out = dict(args)
    out.update(dir=path, scratch=os.path.join(path, "scratch"), channel="remote", run_id=os.path.basename(path))
    return out


def _sweep() -> None:
    now = time.monotonic()
    for run_id, run in list(_RUNS.items()):
        if run["ended"] is not None and now - run["ended"] > _SWEEP_S:
            shutil.rmtree(run["dir"], ignore_errors=True)
            _RUNS.pop(run_id, None)


def _read_bounded(path: str, limit: int) -> str:
    try:
        with private_open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def collect(run_id: str, limit: int = 1 << 20) -> dict:
    """Remote channel: the run's state. `done` once the child has been reaped (then everything is returned and
    the directory removed). The user's profile/trace hooks are off meanwhile (inline: kernel/shield.py)."""
    saved = (sys.getprofile(), sys.gettrace())
    sys.setprofile(None)
    sys.settrace(None)
    try:
        return _collect(run_id, limit)
    finally:
        sys.settrace(saved[1])
        sys.setprofile(saved[0])


def _collect(run_id: str, limit: int) -> dict:
    run = _RUNS.get(run_id)
    if run is None:
        return {"done": True, "lost": True}
    path = run["dir"]
    status = _read_bounded(os.path.join(path, "status"), 4096)
    if not status:
        return {"done": False}
    out = {"done": True, "status": status, "result": _read_bounded(os.path.join(path, "result"), limit),
           "stdout": _read_bounded(os.path.join(path, "stdout"), limit),
           "stderr": _read_bounded(os.path.join(path, "stderr"), limit)}
    shutil.rmtree(path, ignore_errors=True)
    _RUNS.pop(run_id, None)
    return out


def stop(run_id: str) -> bool:
    """Remote channel: end a run now (its whole process tree ends with it)."""
    run = _RUNS.get(run_id)
    if run is None or run["ended"] is not None:
        return False
    try:
        os.kill(run["pid"], signal.SIGKILL)  # not reaped yet, so the pid is still ours
    except OSError:
        return False
    return True


def _starttime(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def _reap(pid: int, private_dir: str, run_id: str | None, done_r: int = -1) -> None:
    sys.setprofile(None)  # the thread may have read threading's hooks after the entry point restored them
    sys.settrace(None)
    seal, checked, by_parent = _watch_seal(pid, done_r) if done_r >= 0 else (None, None, False)
    if by_parent:  # said at once (the daemon waits for it, not for the process's teardown): ended by us, sealed
        _write_status(private_dir, {"exitcode": None, "signal": int(signal.SIGKILL), "checked": checked,
                                    "sealed": list(seal) if seal else None, "by_parent": True})
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return
    if run_id is not None and run_id in _RUNS:
        _RUNS[run_id]["ended"] = time.monotonic()
    _write_status(private_dir, {"exitcode": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                                "sealed": None, "checked": checked, "by_parent": False})


def _write_status(private_dir: str, info: dict) -> None:
    """How the run's process ended, once (the first writer wins: in layered mode A writes how B ended)."""
    try:
        fd = os.open(os.path.join(private_dir, "status"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(dumps(info))
    except OSError:
        pass  # the daemon already cleaned up, or the status is out already


def _watch_seal(pid: int, done_r: int) -> tuple[tuple[int, int] | None, bool | None, bool]:
    """A one-shot run's process (blocking mode), from its parent: when it says on `done_r` that its record is out,
    look for its seal in /proc (kernel/common) and end it then. Returns (the seal, whether /proc could be read,
    whether this thread ended it). "L" on the pipe: the process is A, which checks B's seal itself."""
    import select
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):  # (Linux < 5.3) its wake-up alone: end it once sealed
        pidfd = -1
    checked: bool | None = None
    poll: float | None = None
    try:
        while True:
            watch = ([pidfd] if pidfd >= 0 else []) + ([done_r] if done_r >= 0 else [])
            if not watch:
                return None, checked, False
            ready = select.select(watch, [], [], poll)[0]
            if pidfd >= 0 and pidfd in ready:
                return None, checked, False
            if done_r >= 0 and done_r in ready:
                word = os.read(done_r, 4096)
                if not word or b"L" in word:
                    os.close(done_r)
                    done_r = -1
                    if word:  # layered: A checks B's seal and reports it; if A is ended first, nothing is sealed
                        return None, True, False
                    poll = 0.05  # closed (the cell's code may close it): a look now and then until it ends
                found = await_seal(pid, 0.25 if word else 0.0)
            elif poll is not None:
                found = read_seal(pid)
            else:
                continue
            if found is None:  # not in its wait yet (a loaded machine can hold it past the look): look again
                checked, poll = True, 0.02
                continue
            try:
                if pidfd >= 0:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)  # (not reaped yet: still our child)
            except OSError:
                pass
            if found is False:  # its /proc/<pid>/syscall is not ours to read: its word is all there is
                return None, False, True
            return found, True, True  # type: ignore[return-value]
    finally:
        if done_r >= 0:
            os.close(done_r)
        if pidfd >= 0:
            os.close(pidfd)


# A run is refused when the machine's available memory is below this floor, or below what the kernel itself
# holds in anonymous memory times this share: copy-on-write makes every page the user changes while the run
# lasts cost twice (the sandbox's processes are the OOM killer's first choice anyway: oom_score_adj 1000).
MIN_AVAILABLE_MB = 256
KERNEL_SHARE = 0.25


def _memory_short() -> str | None:
    """Why a run would put the user's kernel at risk of the OOM killer now, or None."""
    avail = proc_kb("/proc/meminfo", ("MemAvailable",)).get("MemAvailable")
    if avail is None:
        return None
    anon = proc_kb("/proc/self/status", ("RssAnon",)).get("RssAnon", 0)
    need = max(MIN_AVAILABLE_MB * 1024, int(anon * KERNEL_SHARE))
    if avail < need:
        return (f"free memory is short ({avail // 1024} MiB available, the kernel holds {anon // 1024} MiB): "
                "a sandboxed copy could push the user's kernel out of memory")
    return None


def _fork(args: dict, child_main: Callable[[dict, Any, int, bool], None]) -> dict:
    # nothing is built or registered here: the capture publisher is made in the child (IPython 9's DisplayPublisher
    # registers itself on the shell's events)
    shell = ipython_shell()
    why = free_threaded()
    if why:  # no copy either (the transplant's export refuses it too): no fallback
        return {"ok": False, "verdict": "unavailable", "reason": why}
    why = _unforkable(args["source"], shell_namespace(shell) or {})  # (read from the shell's instance dict)
    if why:
        return {"ok": False, "verdict": "unavailable", "reason": why, "unforkable": True}
    _sweep()
    if _check_private_dir(args) is not None:
        if not args["remote_ok"]:
            return {"ok": False, "verdict": "unavailable", "reason": _check_private_dir(args)}
        try:
            args = _remote_dir(args)
        except OSError as exc:
            return {"ok": False, "verdict": "unavailable", "reason": f"no private directory in the kernel: {exc}"}
    if shell is None:
        return {"ok": False, "verdict": "unavailable", "reason": "not an IPython kernel"}
    short = _memory_short()
    if short:
        return {"ok": False, "verdict": "unavailable", "reason": short}
    find_thread_pools()
    prebuild_filters()
    try:
        publisher_class()  # the class only (cached): its instance is made in the child
    except Exception:
        pass
    parent = os.getpid()
    on_main = threading.current_thread() is threading.main_thread()
    t0, c0 = time.perf_counter(), time.thread_time()
    # a one-shot run's process tells its parent (the reaper below) when its record is out: then its seal is looked for
    done_r, done_w = os.pipe() if args["mode"] == "run" else (-1, -1)
    note_notebook_threads()  # (not in the child: its setup line names them, kernel/fork_threads.py)
    saved = suspend_user_handlers()  # the user's at-fork handlers are not run by our fork (kernel/atfork.py)
    rstate = random_state()  # (the child draws what the kernel would: kernel/atfork.py)
    try:
        pid = os.fork()
    except OSError as exc:
        if done_r >= 0:
            os.close(done_r)
            os.close(done_w)
        restore(saved)
        return {"ok": False, "verdict": "unavailable", "reason": f"fork failed: {exc}"}
    if pid == 0:  # the child: never returns; it gives the user's handlers back once confined (kernel/isolation)
        if done_r >= 0:
            os.close(done_r)
            args = dict(args, done_fd=done_w)
        keep_suspended(saved)
        put_random_state(rstate)
        code = 70
        try:
            child_main(args, shell, parent, on_main)
            code = 0
        except BaseException:
            pass
        finally:
            os._exit(code)
    restore(saved)
    if done_w >= 0:
        os.close(done_w)
    fork_ms, fork_cpu_ms = (time.perf_counter() - t0) * 1000.0, (time.thread_time() - c0) * 1000.0
    run_id = args["run_id"]
    if run_id is not None:
        _RUNS[run_id] = {"pid": pid, "dir": args["dir"], "ended": None}
    threading.Thread(target=_reap, args=(pid, args["dir"], run_id, done_r), name="crane-sandbox-reaper", daemon=True).start()
    return {"ok": True, "pid": pid, "start": _starttime(pid), "channel": args["channel"],
            "run_id": run_id, "fork_ms": round(fork_ms, 3), "fork_cpu_ms": round(fork_cpu_ms, 3)}


def _fork_request(args: Any, child_main: Callable[[dict, Any, int, bool], None]) -> dict:
    """Fork for the daemon's `SandboxRequest`: a dict literal (nothing parsed with the kernel's `json`, which the
    notebook may have replaced; a JSON string is still read), checked against its declaration (kernel/request.py)
    before anything else: a request of another shape is unavailable, naming what is wrong."""
    try:
        request = check_request(args) if type(args) is dict else decode_request(args)
    except RequestError as exc:
        return {"ok": False, "verdict": "unavailable", "reason": str(exc)}
    return _fork(request, child_main)


def start(args: Any) -> dict:
    """Fork a sandbox child that runs one cell; return at once with its pid (parent side). The user's profile
    and trace hooks are off meanwhile (inline: kernel/shield.py), in the kernel and so in the child."""
    saved = (sys.getprofile(), sys.gettrace(), threading.__dict__.get("_profile_hook"),
             threading.__dict__.get("_trace_hook"))
    sys.setprofile(None)
    sys.settrace(None)
    threading.__dict__["_profile_hook"] = threading.__dict__["_trace_hook"] = None
    try:
        return _fork_request(args, _child_run)
    finally:
        threading.__dict__["_profile_hook"], threading.__dict__["_trace_hook"] = saved[2], saved[3]
        sys.settrace(saved[1])
        sys.setprofile(saved[0])


def session(args: Any) -> dict:
    """Fork a long-lived sandbox child serving SandboxSession commands (parent side)."""
    saved = (sys.getprofile(), sys.gettrace(), threading.__dict__.get("_profile_hook"),
             threading.__dict__.get("_trace_hook"))
    sys.setprofile(None)
    sys.settrace(None)
    threading.__dict__["_profile_hook"] = threading.__dict__["_trace_hook"] = None
    try:
        return _fork_request(args, _child_session)
    finally:
        threading.__dict__["_profile_hook"], threading.__dict__["_trace_hook"] = saved[2], saved[3]
        sys.settrace(saved[1])
        sys.setprofile(saved[0])
