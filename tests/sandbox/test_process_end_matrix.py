"""Issue 41: a cell that ends its process gets the same verdict on every path — one-shot fork, transplant and portable
runs, and fork, transplant and portable sessions — on IPython 8 and 9 kernels, and that verdict is what the real
kernel does (`test_the_kernel_itself` runs each cell in a throwaway kernel of each environment):

- the kernel's process ends (`os._exit(n)`, `os.abort()`, a signal whose default action ends it sent or raised to
  itself, a finalizer calling `os._exit` at `del o`, a thread calling it, `exit()` / `quit()`: ipykernel replies `ok`
  with an `ask_exit` payload, then its process ends): `crash DeadKernelError`;
- the kernel survives: its own verdict (`sys.exit()`: IPython catches SystemExit and the reply is the error
  `SystemExit`; SIGINT: `KeyboardInterrupt`; `exit(keep_kernel=True)`: `no-crash`).

Before (h4, this session): a fork session's command signalling its own process was `blocked` ("signalling another
process": the audit hook compared with the head's pid); a transplant or portable session's SIGKILL to itself read as
the budget's (`timeout`); a portable session's guard refused `posix._exit`, `posix.abort` and `raise_signal`
(`blocked`); `exit()` was `no-crash` on the fork paths and `crash AttributeError` (a terminal shell's missing
`ask_exit`) on the copy paths; a session command's `os._exit(87)` or `os._exit(70)` read as CRANE's own codes
(`blocked`), `os._exit(11)` as a rollback, `os._exit(12)` as the session's close. Now kernel/audit._guard_process_end catches the cell's end on every path
and a session's command ends with `shared/process_end.cell_end_code`, read by the one decision every session path
makes (`shared/process_end.ended_outcome`).

The one `blocked`: where the portable sandbox has no OS layer under it (its guard a per-call hook: macOS,
Windows, no Landlock), the guard refuses every thread a cell starts (`threading.Thread.start`,
worker/guard.GUARD_TABLE: a thread escapes its profile hook), whatever the thread then does — not a verdict on the
process's end. Under an OS layer (Linux, Landlock) the thread runs and its `os._exit` is the kernel's answer
(round 14, h2: it was `blocked` there too). The kernel and the files are unchanged after every run; a session serves its next command."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.errors import KernelDead
from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python
from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

DEAD = ("crash", "DeadKernelError")
ENDINGS = {  # name -> (the cell, what the real kernel does: verdict, ename)
    "os._exit(0)": ("import os\nos._exit(0)", DEAD),
    "os._exit(3)": ("import os\nos._exit(3)", DEAD),
    "os._exit(87)": ("import os\nos._exit(87)", DEAD),  # (a session's code for a command that rebound CRANE's)
    "os._exit(11)": ("import os\nos._exit(11)", DEAD),  # (a fork session head's code for a rollback)
    "os._exit(12)": ("import os\nos._exit(12)", DEAD),  # (a fork session head's code for its close)
    "sys.exit()": ("import sys\nsys.exit()", ("crash", "SystemExit")),
    "sys.exit(2)": ("import sys\nsys.exit(2)", ("crash", "SystemExit")),
    "os.abort()": ("import os\nos.abort()", DEAD),
    "kill SIGTERM": ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", DEAD),
    "kill SIGKILL": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", DEAD),
    "kill SIGINT": ("import os, signal\nos.kill(os.getpid(), signal.SIGINT)", ("crash", "KeyboardInterrupt")),
    "kill SIGUSR1": ("import os, signal\nos.kill(os.getpid(), signal.SIGUSR1)", DEAD),
    "raise_signal SIGTERM": ("import signal\nsignal.raise_signal(signal.SIGTERM)", DEAD),
    "raise_signal SIGINT": ("import signal\nsignal.raise_signal(signal.SIGINT)", ("crash", "KeyboardInterrupt")),
    "exit()": ("exit()", DEAD),
    "quit()": ("quit()", DEAD),
    "exit(keep_kernel=True)": ("exit(keep_kernel=True)", ("no-crash", None)),
    "finalizer at del": ("import os, weakref\nclass O:\n    pass\no = O()\nweakref.finalize(o, os._exit, 0)\ndel o",
                         DEAD),
    "thread": ("import os, threading\nt = threading.Thread(target=os._exit, args=(0,))\nt.start()\nt.join()", DEAD),
}


def _guard_refuses_threads(path: str, ending: str, v) -> bool:
    """A portable run's thread refused by the guard: only where no OS layer held the worker, as far as the verdict's
    layers say (a one-shot run's name Landlock where it ran: there the thread's end must be the kernel's answer)."""
    layers = v.transplant.layers if v.transplant is not None else []
    return (path.startswith("portable") and ending == "thread" and v.verdict == "blocked"
            and "landlock" not in (layers or []))


pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)


def _served(sb) -> None:
    assert sb.inspect("x") == "1"  # (a new worker or command process where this one ended)
    after = sb.run("y = x + 1")
    assert after.verdict == "no-crash", after


def _verdict(pk, path: str, source: str):
    """The cell's verdict on `path`; the kernel and the files untouched, a session's next command served."""
    return path_verdict(pk, path, source, _served)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("ending", list(ENDINGS))
def test_every_path_says_what_the_kernel_does(pk, ending, path):
    source, (verdict, ename) = ENDINGS[ending]
    v = _verdict(pk, path, source)
    if _guard_refuses_threads(path, ending, v):
        assert v.verdict == "blocked" and "threading.Thread.start is refused" in (v.reason or ""), v
        return
    assert (v.verdict, v.ename) == (verdict, ename), v
    if ename == "DeadKernelError":
        assert "would end the kernel's process" in (v.evalue or ""), v


def _kernel_ended(kernel) -> bool:
    """The throwaway kernel's process ended (waited for: exit() ends it after its reply)."""
    process = getattr(kernel.manager.provisioner, "process", None)
    assert process is not None, kernel.manager.provisioner
    try:
        process.wait(timeout=60)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: it is alive
        return False
    return True


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_kernel_itself(kernel_env, ending, tmp_path):
    """What the real kernel does with each cell (the expectations above are not CRANE's guesses)."""
    source, (verdict, ename) = ENDINGS[ending]
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        try:
            run = kernel.connection.run_cell(source, timeout=60)
        except KernelDead:
            run = None
        if ename == "DeadKernelError":
            assert _kernel_ended(kernel), run
        else:
            assert run is not None and (run.status == "ok") == (verdict == "no-crash"), run
            assert run.ename == ename, run
            assert kernel.connection.run_cell("1 + 1", timeout=60).status == "ok"  # alive
    finally:
        kernel.shutdown()
