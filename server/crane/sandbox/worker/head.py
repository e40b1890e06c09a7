"""Portable sandbox, worker side (Linux, Landlock): a warm worker that serves run after run, each in a fresh fork
child of itself (the worker is then a "head"), so a warm verdict pays neither a new interpreter nor its imports.

The head is the warm worker as it waits today: CRANE's modules, the preloaded libraries, an IPython shell; it never
loads a kernel's state, never runs a cell, installs no hook and is not confined. For each run request the daemon
marks `fork` (a one-shot portable run under the Linux layer, crane.sandbox.portable.reuse_head), `serve_forked`:
- forks a child that closes the head's two pipes to the daemon at once (its commands cannot be read, its result
  lines cannot reach the daemon directly), gets a parent-death SIGKILL, and runs the request exactly as a fresh
  worker would (`run_one`: the run folder, Landlock, the guard, the state, the cell, the record), writing its lines
  into a pipe of its own, then ends;
- reads that pipe to its end (the child's own reaper ends every process the run started before the record; the
  head, a child subreaper, kills whatever else is left), and sends the daemon one frame on its result pipe:
  `F <length> <exit code> <signal> <again>\n` + the child's lines (crane.sandbox.portable.read_forked). A sealed run is
  framed as soon as the head has ended its process (SIGKILL to a process blocked in its seal, every signal blocked:
  nothing of it runs again), as the kernel's reaper says a fork run's end (kernel/entry._reap), not once the Linux
  kernel has torn down that process's copy of the head's memory (`_frame_sealed`); the head reaps it right after the
  frame, and ends what its end re-parents here, before anything else. Nothing the cell wrote after its record, nor
  any leftover process, can reach the next run's channel: each run has its own;
- imports the library modules the run loaded (as a refilled worker would), those its state's load imported
  (`loaded_by`: a fitted model's submodules) and the standard modules every run's set-up imports (`_SETUP_STDLIB`),
  so the next child loads only the state; freezes its own objects out
  of the garbage collector's passes before each fork (worker/warmup.freeze_heap: a child's collection would copy the head's whole
  heap); prepares the lean guard's trampolines for the functions now loaded (worker/guard.prepare_trampolines: each
  child only binds them to its own guard); and stages the next run's view of the working folder in its own folder
  (worker/portable.stage_view), which the next child takes with one rename and brings up to date: the last run's
  view, moved out of its run folder once the run's processes are gone (`_keep_view`) and made clean (only what the
  run changed is undone), else a link per entry of every ancestor, made until the next request comes (the child
  makes the rest); then forks the next run's process ahead (`_fork_ahead`: it walks CRANE's fenced pages, copying
  them, and waits for its request on a pipe of its own; the next request is handed to it, `_hand_ahead`, else forked
  as before), so neither the fork nor that first walk is on the next verdict's way.
Where a fork is not safe the head answers `S\n` and runs the request itself, as a one-shot worker (the daemon ends
it afterwards, as before): not Linux, no Landlock, a session, Python threads in the head, or a library loaded that
must not be forked (TensorFlow, JAX: multithreaded runtimes).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable

from crane.sandbox.kernel.common import _fence  # kernel: strip
from crane.sandbox.kernel.entry import _watch_seal  # kernel: strip
from crane.sandbox.worker.guard import prepare_trampolines  # kernel: strip
from crane.sandbox.worker.linux import drop_prepared, hidden_paths, prepare_read_layer  # kernel: strip
from crane.sandbox.worker.warmup import freeze_heap  # kernel: strip

_FORK_UNSAFE = ("tensorflow", "jax", "jaxlib")
# the standard modules every portable run's set-up imports before its state (kernel/isolation._neutralise_kernel_io:
# getpass, and with it termios; worker/portable._wrap_sqlite: sqlite3, its dbapi2 and _sqlite3), imported by the head
# after a run (`warm_up`, library ones only: never a notebook's module of the same name) so no run pays them again;
# each run still replaces what it replaces in them (the head's are the modules as imported)
_SETUP_STDLIB = ("getpass", "sqlite3", "sqlite3.dbapi2")
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_HEAD: dict = {}  # the head's own set-up (subreaper, once)
_AHEAD: dict = {}  # the next run's process, forked ahead: (pid, its result pipe, done pipe, request pipe)
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def fork_refused(spec: dict) -> str | None:
    """None when this head may run `spec` in a fork child, else why not (module docstring)."""
    args = spec.get("args") or {}
    if not spec.get("fork") or spec.get("session") or args.get("confinement") != "portable":
        return "not a one-shot portable run"
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return sys.platform
    if threading.active_count() != 1:
        return "the worker runs Python threads"
    loaded = [m for m in _FORK_UNSAFE if m in sys.modules]
    if loaded:
        return f"{loaded[0]} is loaded (a multithreaded runtime)"
    from crane.sandbox.worker.linux import linux_layer_available  # kernel: strip
    return linux_layer_available()


def _head_prctl(option: int, value: int) -> bool:
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _end_leftovers(child: int, timeout_s: float = 5.0) -> bool:
    """Kill every other process the Linux kernel lists as the head's child (a descendant of the run re-parented to
    the head) and reap them all (False: some could not be reaped in `timeout_s`)."""
    import time

    from crane.sandbox.worker.reaper import _children  # kernel: strip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in _children():  # (again each time: an orphan may be re-parented here meanwhile)
            if pid != child:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            threading.Event().wait(0.005)
    return False


def _end_others(run: int, timeout_s: float = 5.0) -> bool:
    """Kill and reap every child of the head but `run` (the run's process, ended by the head and not waited for:
    `_frame_sealed`), until none but `run` is left (False: some could not be reaped in `timeout_s`). `run` itself
    may be reaped here meanwhile; nothing else of it is needed (the head ended it)."""
    import time

    from crane.sandbox.worker.reaper import _children  # kernel: strip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        others = [pid for pid in _children() if pid != run]  # (zombies too, until reaped)
        if not others:
            return True
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            got, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if got == 0:
            threading.Event().wait(0.005)
    return False


def _frame_sealed(seal: list) -> bool:
    """Whether the run's end can be framed before its process is reaped: the head's seal watcher found it in its
    seal and ended it (SIGKILL, sent by the watcher through a pidfd to a process blocked for good in its sealed
    read(2) with every signal blocked: from the kill on, no thread of it runs again, and the Linux kernel lets no
    fork or clone of it complete). Its exit status is then the SIGKILL's, known without waiting for the kernel to
    tear down its copy-on-write copy of the head's memory (tens of ms per hundred MB, on the verdict's way before)."""
    found, checked, ended = seal[0] if seal else (None, None, False)
    return bool(ended) and checked is True and type(found) is tuple


def _facts_of(spec: dict) -> tuple[list[str], str | None, dict]:
    """The run's library modules and working folder, and its env.json (written by the kernel's export)."""
    try:
        with open(os.path.join((spec.get("args") or {}).get("dir", ""), "env.json")) as f:
            facts = json.load(f)
        cwd = facts.get("cwd")
        return ([m for m in facts.get("modules") or [] if isinstance(m, str)], cwd if isinstance(cwd, str) else None,
                facts)
    except (OSError, ValueError, AttributeError):
        return [], None, {}


def loaded_by(data: bytes, tops: list[str]) -> list[str]:
    """The library modules the run's state load imported (worker/main.py names them in the run's setup line, the
    last line it writes before the cell: no line before it is the cell's), that the head lacks: each a submodule of
    a package the kernel imported (`tops`, its env.json), so the head never holds a module the kernel has not
    (`warm_up` imports them, library ones only). Unpickling a fitted scikit-learn model imports sklearn.linear_model,
    sklearn.metrics, scipy.optimize, ... (~160 modules, 1.2-1.6 s under load): the next run finds them imported."""
    for raw in data.split(b"\n"):
        try:
            line = json.loads(raw)
        except ValueError:
            return []  # (not CRANE's setup line: never read past it)
        if not isinstance(line, dict) or line.get("event") != "setup":
            return []
        extra = line.get("transplant")
        if isinstance(extra, dict):  # the worker's own setup line (after any line of its confinement's)
            names = extra.get("loaded_modules")
            return [m for m in names if isinstance(m, str) and _MODULE_NAME.fullmatch(m) and m.partition(".")[0] in tops
                    and m not in sys.modules] if isinstance(names, list) else []
    return []


def kernel_held(facts: dict, tops: list[str]) -> list[str]:
    """The library submodules the kernel holds (its env.json's `submodules`, written by the export before the run:
    never anything the run wrote) that the head lacks, each under a package the kernel imported (`tops`): imported
    by the head after a run (`warm_up`, library ones only), so the next run's cell does not import what the kernel
    had loaded lazily (a fitted scikit-learn model's `predict_proba` on a frame imports ~20 narwhals and pyarrow
    modules in a fresh process: its first call 2-4x its second)."""
    names = facts.get("submodules")
    if not isinstance(names, list):
        return []
    return [m for m in names if isinstance(m, str) and _MODULE_NAME.fullmatch(m) and m.partition(".")[0] in tops
            and m not in sys.modules]


def _head_home() -> str | None:
    home = os.path.dirname(os.environ.get("IPYTHONDIR") or "")
    return home if os.path.basename(home).startswith("crane-tw-") else None


def _keep_view(spec: dict) -> str | None:
    """Move the run's view of the working folder out of its run folder into the head's own (one rename), once
    every process of the run is gone and before the daemon hears of its end (it then removes the run folder): the
    next view is made from it (`_stage`). None where there is none to keep."""
    home, d = _head_home(), (spec.get("args") or {}).get("dir")
    if home is None or not isinstance(d, str):
        return None
    used = os.path.join(home, "view-used")
    try:
        if os.path.lexists(used):  # (the head's folder is the run's to write: whatever it left there goes)
            from crane.sandbox.worker.portable import _remove_entry  # kernel: strip
            _remove_entry(used)
            if os.path.lexists(used):
                return None  # (the next view is then made afresh)
        os.rename(os.path.join(d, "view"), used)
        return used
    except OSError:
        return None


def _stage(cwd: str | None, used: str | None, waiting: Callable[[], bool]) -> None:
    """The next run's view of `cwd`, made now in the head's own folder (worker/portable.stage_view): from the last
    run's view `used` where it was one of `cwd` (only what that run changed undone), else afresh, stopped where
    `waiting()` says a request came (the run makes the links still missing itself). The run takes it with one
    rename and brings it up to date, instead of making a link per entry of every ancestor."""
    from crane.sandbox.worker.portable import _STAGED_FOR, _remove_entry, stage_view  # kernel: strip
    home = _head_home()
    if home is None or not cwd or not os.path.isdir(cwd):
        for old in ([used] if used is not None else []) + ([os.path.join(home, "view-next" + s) for s in ("", _STAGED_FOR)]
                                                          if home is not None else []):
            _remove_entry(old)  # (none is taken by the next run: nothing a run left in the head's folder is)
        return
    try:
        stage_view(cwd, os.path.join(home, "view-next"), stop=waiting, used=used)
    except OSError:
        pass


def _waiting(fd: int) -> Callable[[], bool]:
    """Whether the daemon's next request is waiting on the head's command pipe `fd` (the head's work between runs
    then stops: what is left of it is not on that request's way)."""
    import select

    def waiting() -> bool:
        try:
            return bool(select.select([fd], [], [], 0)[0])
        except (OSError, ValueError):
            return True
    return waiting


def serve_forked(spec: dict, out: int, close: tuple[int, ...], run_one: Callable[[dict, int], None],
                 warm_up: Callable[[list[str]], None]) -> bool:
    """Run `spec` in a fork child (`run_one(spec, result_fd)` there), and frame its result lines up `out`, the
    head's result pipe; `close`: the head's descriptors the child closes first, its command pipe first (the head's
    work after the run stops early where the next request is waiting there). `warm_up(modules)` imports the run's
    library modules into the head afterwards. False when the head cannot go on serving (it then ends)."""
    if not _HEAD:
        _HEAD["subreaper"] = _head_prctl(_PR_SET_CHILD_SUBREAPER, 1)
        prepare_trampolines()  # (after each run too, for the modules imported since: worker/guard.py)
    head = os.getpid()
    modules, cwd, facts = _facts_of(spec)
    pid, r, done_r = _hand_ahead(spec) or _fork_run(head, close, run_one, spec)[:3]
    drop_prepared()  # (the run's process took the read rules made for it: the head's copy goes)
    seal: list = []  # kernel/entry._watch_seal's word: (the seal, whether /proc could be read, whether it ended it)
    watch = threading.Thread(target=lambda: seal.append(_watch_seal(pid, done_r)), name="crane-head-seal", daemon=True)
    watch.start()
    data = bytearray()
    while True:
        try:
            chunk = os.read(r, 1 << 16)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            break
        data += chunk
    os.close(r)
    watch.join()  # (it returns once it has ended the sealed process, or once the process has ended: its pidfd)
    early = _frame_sealed(seal)
    if early:  # said now; reaped right after the frame (the kernel's teardown of its memory is not on the way)
        code = -int(signal.SIGKILL)
        again = _end_others(pid) and bool(_HEAD["subreaper"])
    else:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        again = _end_leftovers(pid) and bool(_HEAD["subreaper"])
    # (no process of the run is left to change the view: the run's own is ended for good where not reaped yet, and
    # what its end re-parents here is ended below before the view is staged again)
    used = _keep_view(spec) if again else None
    found, checked, _ = seal[0] if seal else (None, None, False)
    sealed = f" {-1 if checked is None else int(checked)} {found[0]} {found[1]}" if found else \
        f" {-1 if checked is None else int(checked)} 0 0"  # the run's end as its parent saw it (the cell cannot write here)
    header = f"F {len(data)} {code if code >= 0 else -1} {-code if code < 0 else 0} {int(again)}{sealed}\n".encode()
    payload = header + bytes(data)
    while payload:
        try:
            payload = payload[os.write(out, payload):]
        except InterruptedError:
            continue
        except OSError:
            return False
    if early:  # the run's process reaped now, and anything its end re-parented here (a process a thread of the
        try:  # cell started after the run's reaper ended the others) ended, before the head does anything else
            os.waitpid(pid, 0)
        except ChildProcessError:  # (reaped by `_end_others` already)
            pass
        if not _end_leftovers(-1):
            return False  # (the head ends: it never serves with a process of a past run beside it)
    if again:
        warm_up(modules + loaded_by(bytes(data), modules) + list(_SETUP_STDLIB))  # (a library that starts a thread here: the next
        # request is answered `S`, fork_refused)
        waiting = _waiting(close[0]) if close else (lambda: False)
        for name in kernel_held(facts, modules):  # (one at a time: stopped where the next request waits, the rest
            if waiting():  # after its run)
                break
            warm_up([name])
        prepare_trampolines()
        prepare_read_layer(hidden_paths(facts))  # (the next run's Landlock read rules: worker/linux.py)
        _stage(cwd, used, _waiting(close[0]) if close else lambda: False)
        freeze_heap(collect=True)
        _fork_ahead(head, close, run_one)
    return again


def _fork_run(head: int, close: tuple[int, ...], run_one: Callable[[dict, int], None],
              spec: dict | None) -> tuple[int, int, int, int]:
    """Fork the run's process: (its pid, its result pipe, its done pipe, the pipe its request goes down (-1: none)).
    Given `spec`, it runs it at once; None (`_fork_ahead`): it first walks what CRANE's record check walks
    (kernel/common._fence: the pages it reads are copied now, not on the verdict's way), then waits for its request
    on a pipe of its own (the head's are closed), and ends quietly where none comes."""
    r, w = os.pipe()
    done_r, done_w = os.pipe()  # the run's process says its record is out: the head looks for its seal (issue 41)
    spec_r, spec_w = os.pipe() if spec is None else (-1, -1)
    freeze_heap(collect=False)  # (the objects the head made since its last run)
    pid = os.fork()
    if pid == 0:  # the run's process
        code = 70
        try:
            for fd in (r, done_r, spec_w, *close):
                if fd >= 0:
                    os.close(fd)
            if not _head_prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL)) or os.getppid() != head:
                os._exit(70)
            if spec is None:
                _fence()
                spec = _request_of(spec_r)
                if spec is None:
                    os._exit(0)
            run_one(dict(spec, done_fd=done_w), w)
            code = 0
        except BaseException:  # noqa: BLE001 - as a one-shot worker's boot: the traceback to the log, exit 70
            import traceback
            traceback.print_exc()
        os._exit(code)
    for fd in (w, done_w, spec_r):
        if fd >= 0:
            os.close(fd)
    return pid, r, done_r, spec_w


def _request_of(fd: int) -> dict | None:
    """The request a process forked ahead is handed (`_hand_ahead`): read to the pipe's end; None where none came."""
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    os.close(fd)
    try:
        spec = json.loads(bytes(data)) if data else None
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


def _fork_ahead(head: int, close: tuple[int, ...], run_one: Callable[[dict, int], None]) -> None:
    """Once the head has made ready for its next run, fork that run's process now, off the next verdict's way (a
    fork of the head's heap and the first walk of CRANE's pages cost tens of milliseconds under load). It is the
    same process the request would fork: nothing changes in the head between now and the request (it only waits).
    Not where the next run could not be forked (fork_refused: a thread, a multithreaded runtime loaded)."""
    if threading.active_count() != 1 or any(m in sys.modules for m in _FORK_UNSAFE):
        return
    try:
        _AHEAD["run"] = _fork_run(head, close, run_one, None)
    except OSError:
        return
    drop_prepared()  # (the process forked ahead holds the read rules made for the next run)


def _hand_ahead(spec: dict) -> tuple[int, int, int] | None:
    """The request handed to the run's process forked ahead ((its pid, result pipe, done pipe)), or None (none, or
    it is gone: the request is forked as before)."""
    ahead = _AHEAD.pop("run", None)
    if ahead is None:
        return None
    pid, r, done_r, spec_w = ahead
    reaped = False  # (reaped here, or not the head's child: its pid is never signalled again — it may be reused)
    try:
        reaped = os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        reaped = True
    gone = reaped
    if not gone:
        try:
            payload = json.dumps(spec).encode()
            while payload:
                payload = payload[os.write(spec_w, payload):]
        except (OSError, TypeError, ValueError):
            gone = True
    os.close(spec_w)
    if gone:
        _end_ahead((pid, r, done_r, -1), reaped=reaped)
        return None
    return pid, r, done_r


def _end_ahead(ahead: tuple[int, int, int, int] | None = None, reaped: bool = False) -> None:
    """End and reap the run's process forked ahead (the head serves a request itself, whatever it is, or it could
    not be handed one); `reaped`: already reaped, its pipes are closed only (its pid may be another's by now)."""
    ahead = ahead or _AHEAD.pop("run", None)
    if ahead is None:
        return
    pid, *fds = ahead
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    if reaped:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def end_ahead() -> None:
    """End the process forked ahead, if any, before the head serves any request itself (a session, a run taken
    from the pooled head without "fork"): no unconfined child stays beside it (worker/main)."""
    _end_ahead()


def answer_self(out: int) -> None:
    """Tell the daemon this head runs the request itself (a one-shot worker: its lines follow, then its end)."""
    _end_ahead()  # (no process of the head's but this run's)
    drop_prepared()  # (made for a fork child: this run makes its own)
    os.write(out, b"S\n")
