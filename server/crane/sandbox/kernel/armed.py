"""What a cell leaves armed that ends the kernel's process after its reply (issue 41; h1, session 12).

A cell can return normally and still kill the kernel a moment later: ipykernel replies `ok`, then the process ends
(measured with real IPython 8 and 9 kernels, tests/sandbox/test_armed_end.py::test_the_kernel_itself):
- a pending interval timer whose signal's action ends the process (`signal.alarm(1)`, `signal.setitimer(
  ITIMER_REAL | ITIMER_VIRTUAL | ITIMER_PROF, ...)`): killed by SIGALRM (SIGVTALRM, SIGPROF) when it fires;
- `faulthandler.dump_traceback_later(t, exit=True)`: its watchdog thread ends the process (status 1) after `t`;
- a thread the cell started that later ends the process (`threading.Timer(0.5, os._exit, (3,))`, a Timer or daemon
  thread sending SIGTERM or SIGKILL to its own process).
A sandbox run used to write its record as soon as the cell's statements returned, so these read `no-crash`.

Now the end of the cell's statements (kernel/run._exec_plan, every path and kind: one-shot fork, transplant and
portable runs, fork, transplant and portable sessions) is followed, while the cell's time still runs (the guards of
kernel/audit._guard_process_end still on), by `settle`:
1. a timer the cell armed (`signal.alarm`, `signal.setitimer`: one pending now that was not before the cell, or
   whose deadline moved: CRANE's own budget timer, ITIMER_REAL, is armed before the cell and read as it begins)
   still pending, its signal's action ending the process: the run ends as that crash now (`state["end"]`, the one end every guard takes: a one-shot's record, a session command's
   `cell_end_code`, read by shared/process_end), the timer disarmed first;
2. a later dump with `exit=True` the cell armed and did not cancel: the same, the watchdog cancelled first;
0. a `sys.stdout` / `sys.stderr` the cell put in place is flushed, as ipykernel does before its reply
   (`flush_streams`): a flush calling `os._exit` is the guard's crash, a raising one the cell's;
3. the threads the cell started and left alive: waited for, a bounded grace (a `threading.Timer` its interval plus
   `THREAD_GRACE_S`, one firing after the run's budget the grace alone; any other thread `THREAD_GRACE_S`; never
   past the run's budget, read from CRANE's own budget timer): a thread that ends the process meanwhile is caught
   by the guards as any end of the cell's. Threads still alive after it leave the verdict not certain
   (`unsettled`, read by assemble / the session's reply: "likely"). A library's idle thread is not waited for and
   leaves the verdict certain (`_library_thread`: what it was started to run AND every frame of its stack as the
   cell ends are a loaded library module's Python code: tqdm's monitor, a `ThreadPoolExecutor` never shut down,
   joblib/loky's manager threads); the notebook's code, a C callable (`os._exit`, `os.kill`) and the notebook's
   function running in a pool's thread are waited for (what it does not follow: its docstring).
Nothing here writes a record of its own: the writer is the guard's `end` (bound before the cell) or CRANE's record
path after it. The portable sandbox's guard refuses `signal.alarm`, `signal.setitimer`, faulthandler's functions
and every `threading.Timer` a cell makes (`blocked`, as before); a thread the cell starts only where no OS layer
holds the worker (macOS, Windows, no Landlock): under Landlock (the lean guard, worker/guard `_THREAD_START`) it
runs and is settled here as on the other paths. Not seen: a later dump armed through C (ctypes), a thread
started in C. A `flush` patched on a stream's class (`type(sys.stdout).flush = ...`) is `blocked`, not followed:
in a run the cell's streams are CRANE's capture (`kernel/common._Capture`), whose class `_fence` watches.
"""

from __future__ import annotations

import signal
import time
from typing import Any

THREAD_GRACE_S = 1.0  # how long the threads a cell left running are waited for (a Timer: its interval)
BUDGET_SLACK_S = 1.5  # CRANE's budget timer is the budget plus this (kernel/run, kernel/session, worker/main)
_TIMERS = (("ITIMER_REAL", "SIGALRM"), ("ITIMER_VIRTUAL", "SIGVTALRM"), ("ITIMER_PROF", "SIGPROF"))
_ALARM: dict = {"deadline": None}  # CRANE's budget timer's end (time.monotonic), read by a kept SIGALRM handler
_RAISE_SIGNAL = getattr(signal, "raise_signal", None)  # (the C function: the child's guard wraps the module's)
# bound now: the dispatcher looks nothing up on a module the notebook may have patched
_AR_SET_HANDLER, _AR_MONOTONIC, _AR_SETITIMER = signal.signal, time.monotonic, getattr(signal, "setitimer", None)
_AR_LATE_S = 5.0  # how late the budget's signal may be handled (a loaded machine) and still be the budget's


def keep_alarm_handler(handler: Any) -> None:
    """In the child, where the kernel has a SIGALRM handler of its own (a notebook's timeout idiom:
    `signal.signal(SIGALRM, on_alarm)`, then `signal.alarm(1)` around a slow step; red team round 18, G17): the
    handler stays, behind a dispatcher that tells CRANE's budget timer (ITIMER_REAL, the same timer) from the cell's
    alarm by its deadline. The budget's end ends the process by SIGALRM as without the handler; the cell's alarm
    runs the notebook's handler, as in the kernel (before, the child had SIGALRM's default action: the cell's
    alarm killed it and the run read as its budget's timeout). A cell that re-arms the timer replaces CRANE's
    budget timer there: the run's parent's deadline still ends it. Nothing is kept for SIG_DFL, SIG_IGN or a
    handler of C's (None)."""
    if handler is None or handler is signal.SIG_DFL or handler is signal.SIG_IGN or not callable(handler):
        return

    sigalrm, default = signal.SIGALRM, signal.SIG_DFL

    def dispatch(signum: int, frame: Any) -> Any:
        deadline = _ALARM["deadline"]
        if deadline is not None and deadline - 0.05 <= _AR_MONOTONIC() <= deadline + _AR_LATE_S \
                and _RAISE_SIGNAL is not None:
            _AR_SET_HANDLER(sigalrm, default)
            _RAISE_SIGNAL(sigalrm)  # (the budget's end, as with no handler)
            return None
        return handler(signum, frame)

    signal.signal(signal.SIGALRM, dispatch)


def budget_timer(seconds: float) -> None:
    """CRANE's wall-clock budget in the process that runs the cell: ITIMER_REAL, its end noted for a kept
    handler (`keep_alarm_handler`)."""
    if _AR_SETITIMER is not None:
        _AR_SETITIMER(signal.ITIMER_REAL, seconds)
    _ALARM["deadline"] = _AR_MONOTONIC() + seconds


def budget_off() -> None:
    """The budget timer disarmed (the cell's end): no later SIGALRM is the budget's."""
    _ALARM["deadline"] = None
    if _AR_SETITIMER is not None:
        _AR_SETITIMER(signal.ITIMER_REAL, 0)


def watch_arming(state: dict, active: Any, guarded: bool) -> None:
    """Wrap faulthandler's later dump so that what the cell arms (while `active()`) is recorded in `state["later"]`
    (the dump's timeout when it ends the process); the real functions are called unchanged. Not where the portable
    call guard runs (`guarded`): it refuses faulthandler's functions to the cell (`blocked`), and a wrapper made
    here would hand the cell the function the guard replaces."""
    state.setdefault("later", None)
    if guarded:
        return
    try:
        import faulthandler
    except ImportError:  # pragma: no cover - a build without it
        return
    real_later, real_cancel = faulthandler.dump_traceback_later, faulthandler.cancel_dump_traceback_later

    def dump_traceback_later(timeout: float, repeat: bool = False, file: Any = None, exit: bool = False) -> None:
        if file is None:
            import sys
            file = sys.stderr
        real_later(timeout, repeat=repeat, file=file, exit=exit)  # (first: its own errors are the cell's)
        if active():
            state["later"] = float(timeout) if exit else None

    def cancel_dump_traceback_later() -> None:
        if active():
            state["later"] = None
        real_cancel()

    faulthandler.dump_traceback_later = dump_traceback_later
    faulthandler.cancel_dump_traceback_later = cancel_dump_traceback_later
    state["cancel_later"] = real_cancel


def timers_now() -> dict:
    """Each interval timer as the cell begins (kernel/run._cell_begins): its deadline as a range of this process's
    monotonic clock (`(earliest, latest, interval)`, read between two clock reads: a loaded machine may stop this
    thread between them) for ITIMER_REAL, its value for the CPU-time timers."""
    getitimer = getattr(signal, "getitimer", None)
    if getitimer is None:
        return {}
    timers: dict = {}
    for name, _ in _TIMERS:
        which = getattr(signal, name, None)
        if which is not None:
            timers[name] = _deadline(getitimer, which) if name == "ITIMER_REAL" else getitimer(which)
    return timers


def _deadline(getitimer: Any, which: int) -> tuple[float, float, float]:
    a = time.monotonic()
    value, interval = getitimer(which)
    b = time.monotonic()
    return (a + value, b + value, interval) if value > 0 else (0.0, 0.0, interval)


def _cell_armed(name: str, before: Any, getitimer: Any, which: int) -> float:
    """The seconds left on a timer the cell armed (0: none, or CRANE's own, as it was before the cell)."""
    if name != "ITIMER_REAL":  # (CRANE arms none: its CPU budget is RLIMIT_CPU)
        left = getitimer(which)[0]
        return left if left > 0 and (before is None or before[0] == 0) else 0.0
    now = _deadline(getitimer, which)
    if now[0] == 0:
        return 0.0
    if before is not None and before[0] > 0 and now[2] == before[2] and now[0] <= before[1] + _SLACK_S \
            and before[0] <= now[1] + _SLACK_S:  # (the same deadline: CRANE's budget timer, untouched)
        return 0.0
    return max(0.0, now[0] - time.monotonic())


_SLACK_S = 0.01  # (a timer's expiry, as the kernel rounds it to its clock)


def threads_now() -> frozenset:
    """The live Python threads (their idents) as the cell begins (kernel/run._cell_begins)."""
    import threading
    return frozenset(t.ident for t in threading.enumerate())


def streams_now() -> tuple:
    """`sys.stdout` and `sys.stderr` as the cell begins (kernel/run._cell_begins)."""
    import sys
    return (sys.stdout, sys.stderr)


def settle(state: dict, ends: Any) -> None:
    """After the cell's statements returned, its time still running (module docstring). `ends(sig)`: whether a
    signal, delivered now, ends this process (kernel/audit._ends_process). Raises what a stream the cell put in
    place raises on its flush (`flush_streams`): the cell's crash."""
    end = state.get("end")
    if end is None:
        return
    flush_streams(state.get("streams") or (None, None))
    armed_end(state, ends, end)
    _wait_threads(state)
    armed_end(state, ends, end)  # (a thread it waited for armed one)


def flush_streams(before: tuple) -> None:
    """ipykernel flushes `sys.stdout`, then `sys.stderr`, after the cell and before its reply (kernelbase's
    execute_request): a stream the cell put in place (a new object, or a `flush` set on the one it found) whose
    flush ends the process kills the kernel with no reply (measured: IPython 8 and 9), and one whose flush raises
    leaves this cell's reply and every later one's unsent. Flushed here the same way, the guards on: an end is the
    guard's crash, an exception the cell's crash (its traceback is the flush's)."""
    import sys
    for name, old in zip(("stdout", "stderr"), before, strict=True):
        stream = getattr(sys, name, None)
        if stream is not None and (stream is not old or "flush" in getattr(stream, "__dict__", {})):
            stream.flush()


def armed_end(state: dict, ends: Any, end: Any) -> None:
    """End the run as the crash it is where a timer or later dump the cell armed will end the process."""
    getitimer, setitimer = getattr(signal, "getitimer", None), getattr(signal, "setitimer", None)
    for name, sig_name in _TIMERS:
        which, sig = getattr(signal, name, None), getattr(signal, sig_name, None)
        if which is None or sig is None or getitimer is None or setitimer is None:
            continue
        left = _cell_armed(name, state.get("timers", {}).get(name), getitimer, which)
        if left > 0 and ends(sig):
            setitimer(which, 0)  # (the sandbox's process is not to die of it while the record is made)
            of = "" if name == "ITIMER_REAL" else " of its CPU time"
            end(f"leaves {sig_name} armed (signal.alarm or signal.setitimer({name})): {left:.2g} s{of} after its "
                f"reply it ends the kernel's process", 128 + int(sig))
    later = state.get("later")
    if later is not None:
        state["cancel_later"]()
        end(f"arms faulthandler.dump_traceback_later({later:g}, exit=True): {later:g} s after its reply it ends "
            f"the kernel's process", 1)


def _budget_left() -> float:
    """What is left of the run's budget: CRANE's budget timer (ITIMER_REAL, the budget plus `BUDGET_SLACK_S`);
    `THREAD_GRACE_S` where there is none or the cell re-armed it."""
    getitimer = getattr(signal, "getitimer", None)
    if getitimer is None:
        return THREAD_GRACE_S
    left = getitimer(signal.ITIMER_REAL)[0]
    return max(0.0, left - BUDGET_SLACK_S) if left > 0 else THREAD_GRACE_S


def _wait_threads(state: dict) -> None:
    """Wait a bounded grace for the threads the cell started; `state["unsettled"]` names those still alive."""
    import threading
    before = state.get("threads") or frozenset()
    mine = [t for t in threading.enumerate() if t.ident not in before and t is not threading.current_thread()]
    if mine:
        found: dict = {}  # (the library modules, read once for all the threads)
        mine = [t for t in mine if not _library_thread(t, state.get("libs"), found)]
    if not mine:
        return
    left = _budget_left()
    start = time.monotonic()
    for t in mine:
        grace = THREAD_GRACE_S
        interval = getattr(t, "interval", None)
        if isinstance(t, threading.Timer) and isinstance(interval, (int, float)) \
                and float(interval) < left - (time.monotonic() - start):
            grace = max(grace, float(interval) + THREAD_GRACE_S)  # (one past the budget: the grace only, then likely;
            # the interval is read after the cell, so never less than the grace: a Timer whose interval the cell
            # changed after its start still fires within it)
        t.join(max(0.0, min(grace, left) - (time.monotonic() - start)))
    if state.get("ended"):  # a thread ended the run (the guard's `end`: a record is out, or the process ends now)
        while True:
            time.sleep(3600)
    alive = [t.name for t in mine if t.is_alive()]
    if alive:
        state["unsettled"] = (f"the cell left {len(alive)} thread(s) running after its reply "
                              f"({', '.join(alive[:3])}): what they do later was not waited for")



def libraries_now() -> tuple:
    """As the cell begins (kernel/run._cell_begins), what `_library_thread` judges by, bound before the cell can
    change any of it: the folders of the interpreter's standard library and installed packages (as written and
    resolved, with a trailing separator), `sys.modules`, the module type and `sys._current_frames`."""
    import os
    import sys
    import sysconfig
    import types
    found = {sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    found.update(p for p in sys.path if isinstance(p, str) and os.path.basename(p.rstrip(os.sep)) in
                 ("site-packages", "dist-packages"))
    dirs: set[str] = set()
    for d in found:
        if isinstance(d, str) and d:
            dirs.update((d.rstrip(os.sep) + os.sep, os.path.realpath(d).rstrip(os.sep) + os.sep))
    return tuple(dirs), sys.modules, types.ModuleType, sys._current_frames


def _library_modules(dirs: tuple, modules: dict, module_type: type) -> dict:
    """The library modules loaded now (the cell may have imported some: a pool's module is imported lazily), by the
    identity of their globals: a module object whose `__file__` is in the library folders."""
    found = {}
    for m in list(modules.values()):
        names = m.__dict__ if isinstance(m, module_type) else None  # (never a module's own __getattr__)
        file = names.get("__file__") if type(names) is dict else None
        if isinstance(file, str) and file.startswith(dirs):
            found[id(names)] = m
    return found


def _library_thread(thread: Any, libs: Any, found: dict) -> bool:
    """Whether a thread the cell left running is a library's, idle (tqdm's monitor, joblib/loky's executor manager
    and queue feeders, a thread pool's idle workers): it keeps running in the kernel after the cell as here, so it is
    not waited for and leaves the verdict certain. Both must hold: what it was started to run (its class's `run`,
    else its target or a Timer's function, unwrapped from `functools.partial`, bound methods and a Thread's own
    `run`) is a library's Python code, and every frame on its stack now runs library code — a code object in the
    library folders with the globals of a loaded library module (`libraries_now`). So a C callable
    (`os._exit`, `os.kill`), the notebook's code, a notebook function running in a pool's thread, a target swapped
    after the start or a code object whose file name the cell forged (its globals are the notebook's) is waited for.
    Not followed: what a library's idle thread will call later that the cell handed it (a `sched` queue, an event
    loop's `call_later`), and a function the cell made with a library module's globals and file name."""
    if not libs:
        return False
    dirs, loaded, module_type, current_frames = libs
    if not _library_target(thread, dirs):
        return False
    if "modules" not in found:
        found["modules"] = _library_modules(dirs, loaded, module_type)
    modules = found["modules"]
    try:
        frame = current_frames().get(thread.ident)
    except Exception:  # noqa: BLE001 - (refused where a guard holds it: the thread is then waited for)
        return False
    if frame is None:
        return False
    while frame is not None:
        module = modules.get(id(frame.f_globals))
        filename = frame.f_code.co_filename
        if module is None or module.__dict__ is not frame.f_globals or not isinstance(filename, str) \
                or not filename.startswith(dirs):
            return False
        frame = frame.f_back
    return True


def _library_target(thread: Any, dirs: tuple) -> bool:
    """Whether what a thread was started to run is a library's Python code (`_library_thread`)."""
    import functools
    import threading
    for _ in range(16):
        cls = type(thread)
        run = getattr(cls, "run", None)
        if isinstance(thread, threading.Timer) and run is threading.Timer.run:
            target = getattr(thread, "function", None)
        elif run is threading.Thread.run:
            target = thread.__dict__.get("_target")
        else:
            target = run
        for _ in range(16):
            if isinstance(target, functools.partial):
                target = target.func
            elif hasattr(target, "__func__"):
                owner = getattr(target, "__self__", None)
                if isinstance(owner, threading.Thread) and owner is not thread:
                    break  # (another thread's own `run` as the target: judged by what that one was made to run)
                target = getattr(target, "__func__")  # noqa: B009 - (typed Any)
            else:
                break
        owner = getattr(target, "__self__", None)
        if isinstance(owner, threading.Thread) and owner is not thread:
            thread = owner
            continue
        code = getattr(target, "__code__", None)
        filename = getattr(code, "co_filename", None)
        return isinstance(filename, str) and filename.startswith(dirs)
    return False
