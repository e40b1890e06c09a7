"""Issue 41 (h1, session 12): a cell that returns normally but leaves armed what ends the kernel's process a moment
later (a pending `alarm`/`setitimer` whose signal's action ends it, `faulthandler.dump_traceback_later(...,
exit=True)`, a `threading.Timer` or daemon thread that calls `os._exit` or signals its own process, a `sys.stdout`
whose `flush`, which ipykernel calls before its reply, calls `os._exit`). The real kernel
replies `ok`, then its process ends (`test_the_kernel_itself`, IPython 8 and 9); every sandbox path now says
`crash DeadKernelError` (kernel/armed.settle), where before the record was written as the statements returned and
read `no-crash` on the fork and transplant paths, one-shot and session. A `sys.stdout` whose flush raises leaves the
kernel alive but answering no cell again (no reply): the sandbox says the cell's crash, the flush's exception.

An honest cell (a daemon thread that ends, a short Timer, an alarm it disarms, a timer whose signal it handles)
stays `no-crash`, certain; a thread still running after the grace leaves `no-crash` only likely (a library's idle
thread is not waited for: test_armed_library_threads.py). The portable sandbox's guard refuses every Timer a cell
makes, every signal handler it sets, `signal.alarm`, `signal.setitimer` and faulthandler's functions (`blocked`, as
before), and every thread a cell starts only where no OS layer holds the worker (no Landlock): under Landlock the
thread runs and its end is the kernel's answer, as in test_process_end_matrix.py."""

from __future__ import annotations

import sys
import time

import pytest

from crane.kernel.errors import KernelDead, KernelTimeout
from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python
from . import end_paths
from .end_paths import BUDGET_S, PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

DEAD = ("crash", "DeadKernelError")
CLEAN = ("no-crash", None)
NO_REPLY = ("crash", "ZeroDivisionError")  # (the kernel lives, but answers no cell again)
TIMER, THREAD, HANDLER = "threading.Timer", "threading.Thread.start", "signal.signal"
ALARM, LATER = "_signal.alarm", "faulthandler.dump_traceback_later"
ARMED = {  # name -> (the cell, what the real kernel does, the call the portable guard refuses in it, if any)
    "alarm(1)": ("import signal\nsignal.alarm(1)", DEAD, ALARM),
    "setitimer REAL": ("import signal\nsignal.setitimer(signal.ITIMER_REAL, 0.5)", DEAD,
                       "_signal.setitimer"),
    "faulthandler later exit": ("import faulthandler\nfaulthandler.dump_traceback_later(1, exit=True)", DEAD,
                                LATER),
    "Timer os._exit": ("import os, threading\nthreading.Timer(0.5, os._exit, (3,)).start()", DEAD, TIMER),
    "Timer SIGTERM": ("import os, signal, threading\n"
                      "threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()", DEAD, TIMER),
    # (the thread waits for the cell's last statement, then 0.1 s: its end comes after the statements whatever the
    # load, and 0.9 s inside the grace; the kernel may die before its reply)
    "daemon thread SIGKILL": ("import os, signal, threading, time\ndone = threading.Event()\ndef later():\n"
                              "    done.wait(30)\n    time.sleep(0.1)\n    os.kill(os.getpid(), signal.SIGKILL)\n"
                              "threading.Thread(target=later, daemon=True).start()\ndone.set()", DEAD, THREAD),
    # (a stream made by `type`: a class statement reads the kernel's `__name__`, which the transplant tests' stand-in
    # `cupy` module keeps from loading)
    "stdout flush os._exit": ("import os, sys\nsys.stdout = type('Out', (), {'write': lambda self, s: len(s), "
                              "'flush': lambda self: os._exit(5)})()", DEAD, None),
    # (ipykernel flushes sys.stdout before its reply: it never comes, for this cell or any later one)
    "stdout flush raises": ("import sys\nsys.stdout = type('Out', (), {'write': lambda self, s: len(s), "
                            "'flush': lambda self: 1 / 0})()", NO_REPLY, None),
    # honest cells: the kernel survives
    "stdout StringIO": ("import io, sys\nsys.stdout = io.StringIO()\nprint('kept')", CLEAN, None),
    "alarm disarmed": ("import signal\nsignal.alarm(5)\nsignal.alarm(0)", CLEAN, ALARM),
    "alarm handled": ("import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)\nsignal.alarm(1)", CLEAN, HANDLER),
    "faulthandler cancelled": ("import faulthandler\nfaulthandler.dump_traceback_later(1, exit=True)\n"
                               "faulthandler.cancel_dump_traceback_later()", CLEAN, LATER),
    # (the cell waits until the thread's code ran: at its end the thread is alive at most for its last steps, so the
    # grace never runs out on a loaded machine and the verdict stays certain)
    "daemon thread ends": ("import threading\nran = threading.Event()\n"
                           "threading.Thread(target=lambda: ran.set(), daemon=True).start()\nassert ran.wait(30)", CLEAN,
                           THREAD),
    "short Timer": ("import threading\nfired = threading.Event()\n"
                    "threading.Timer(0.05, lambda: (print('hi'), fired.set())).start()\nassert fired.wait(30)", CLEAN,
                    TIMER),
}


pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)


def _served(sb) -> None:
    after = sb.run("import time\ntime.sleep(1.5)\ny = x + 1")  # (past what the cell armed: not poisoned)
    assert after.verdict == "no-crash", after
    assert sb.inspect("y") == "2"


def _verdict(pk, path: str, source: str):
    """The cell's verdict on `path`; the kernel and the files untouched, a session's next command served clean."""
    return path_verdict(pk, path, source, _served)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", list(ARMED))
def test_every_path_says_what_the_kernel_does(pk, cell, path):
    source, (verdict, ename), refused = ARMED[cell]
    v = _verdict(pk, path, source)
    layers = v.transplant.layers if v.transplant is not None else []
    # (its guard refuses every handler and timer; every thread a cell starts only where no OS layer holds the worker,
    # as far as the verdict's layers say: a one-shot run names Landlock where it ran, and its thread then runs)
    if refused and path.startswith("portable") and (
            refused != THREAD or v.verdict == "blocked" and "landlock" not in (layers or [])):
        assert v.verdict == "blocked" and f"{refused} is refused" in (v.reason or ""), v
        return
    assert (v.verdict, v.ename) == (verdict, ename), v
    if ename == "DeadKernelError":
        assert "would end the kernel's process" in (v.evalue or ""), v
    else:
        assert v.certain, v


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("flush", ["os._exit(5)", "1 / 0", "_flush(self)"])
def test_a_flush_set_on_the_streams_class_is_blocked(pk, path, flush):
    """A `flush` set on the stream's class: in a run the cell's `sys.stdout` is CRANE's capture, whose class is part
    of what the record is made with (kernel/common._fence): `blocked`, never a verdict, even for a harmless wrapper
    (the kernel's own OutStream is not what the cell sees there); the kernel and the session unharmed."""
    source = f"import os, sys\nOUT = type(sys.stdout)\n_flush = OUT.flush\nOUT.flush = lambda self: {flush}"
    v = _verdict(pk, path, source)
    assert v.verdict == "blocked", v
    assert "changed CRANE's own code" in (v.reason or ""), v


@pytest.mark.parametrize("path", ["fork", "transplant", "fork session", "transplant session"])
def test_a_thread_still_running_is_only_likely(pk, path):
    """A thread the cell left running past the grace: `no-crash`, not certain (what it does later was not seen)."""
    v = _verdict(pk, path, "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()")
    assert v.verdict == "no-crash" and not v.certain, v
    assert "thread(s) running after its reply" in (v.reason or ""), v


@pytest.mark.parametrize("path", ["fork", "fork session"])
def test_a_timer_past_the_budget_is_not_waited_for(pk, path):
    """A Timer that fires after the run's budget is not waited for (before: the whole budget, 60 s here, then the
    same answer): `no-crash`, only likely."""
    t0 = time.monotonic()
    v = _verdict(pk, path, "import os, threading\nthreading.Timer(600, os._exit, (3,)).start()")
    assert v.verdict == "no-crash" and not v.certain, v
    assert time.monotonic() - t0 < BUDGET_S - 5, v  # (far from the budget whatever the load: no wait for it)


def _kernel_ended(kernel) -> bool:
    process = getattr(kernel.manager.provisioner, "process", None)
    assert process is not None, kernel.manager.provisioner
    try:
        process.wait(timeout=30)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: it is alive
        return False
    return True


@pytest.mark.parametrize("cell", list(ARMED))
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_kernel_itself(kernel_env, cell, tmp_path, monkeypatch):
    """What the real kernel does with each cell: the reply is `ok`, then the process ends (or does not). Started as
    a notebook's kernel is, not as pytest's: ipykernel does not capture its stderr's descriptor where it sees
    PYTEST_CURRENT_TEST (ipykernel/iostream.py), so `sys.stderr.fileno()` (faulthandler's file) would raise."""
    source, (verdict, ename), _ = ARMED[cell]
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        try:
            run = kernel.connection.run_cell(source, timeout=20 if (verdict, ename) == NO_REPLY else 60)
        except (KernelDead, KernelTimeout):
            run = None
        if (verdict, ename) == NO_REPLY:
            assert run is None, run
            with pytest.raises(KernelTimeout):  # (no later cell's reply either: the sandbox's crash is right)
                kernel.connection.run_cell("1 + 1", timeout=20)
            return
        if verdict == "crash":  # (the reply `ok` comes before the end, as measured at low load; a flush ending it
            # comes before the reply. Not asserted: on a loaded machine the reply may leave after a 0.5 s timer fired)
            assert run is None or run.status == "ok", run
            assert _kernel_ended(kernel), run
        else:
            assert run is not None and run.status == "ok", run
            time.sleep(1.5)  # (past every timer the honest cells arm; a wrongly expected survival fails below)
            assert kernel.connection.run_cell("1 + 1", timeout=60).status == "ok"  # alive
    finally:
        kernel.shutdown()


@pytest.mark.parametrize("path", ["fork session", "transplant session", "portable session"])
@pytest.mark.parametrize("how", ["os.kill(os.getpid(), signal.SIGTERM)", "signal.raise_signal(signal.SIGUSR1)",
                                 "os.kill(os.getpid(), signal.SIGKILL)"])
def test_a_session_names_the_signal(pk, path, how):
    """A session's command that signals its own process says which signal, as a one-shot run's record does (before:
    "ended by the cell (a signal, or an exit status the session reserves)", the name lost in exit code 86)."""
    v = _verdict(pk, path, f"import os, signal\n{how}")
    name = how.split("signal.")[-1].rstrip(")")
    assert (v.verdict, v.ename) == DEAD, v
    assert f"the cell's own {name}" in (v.evalue or ""), v


def test_an_exit_status_in_the_signal_band_is_not_a_signal():
    """The cell's own `os._exit(n)` for n in the band of signal codes reads as the cell's end, never a signal."""
    from crane.sandbox.shared.process_end import SIGNAL_EXITS, cell_end_code, ended_outcome, exit_status
    assert cell_end_code(128 + 15) == SIGNAL_EXITS + 15
    for own in (SIGNAL_EXITS + 1, SIGNAL_EXITS + 15, SIGNAL_EXITS + 31):
        out = ended_outcome(exit_status(cell_end_code(own)))
        assert out["ename"] == "DeadKernelError" and "own SIG" not in out["evalue"], (own, out)
    assert "own SIGTERM" in ended_outcome(exit_status(cell_end_code(128 + 15)))["evalue"]
