"""Issue 41 (lead, session 12): the threads a library starts in a cell and leaves running — joblib/loky's executor
manager and queue feeders after `Parallel(n_jobs=2)`, a `ThreadPoolExecutor`'s workers left alive, tqdm's monitor —
keep running in the kernel after every cell, as they do in the sandbox's run. kernel/armed.settle waited for them
and called the run's `no-crash` only likely ("the cell left 2 thread(s) running after its reply"): every notebook
using joblib's pools or tqdm lost its certain verdict (`crane check`: `decidedBy: none`). Now a thread whose code is
a library's (its class's `run`, or its target, in the interpreter's standard library or installed packages) is not
the cell's to wait for; a thread running the notebook's code or a C callable is waited for as before
(test_armed_end.py: `test_a_thread_still_running_is_only_likely`, the Timer and daemon-thread ends).

A library's thread is told by what it was started to run AND by its stack as the cell ends (every frame a library
module's code, with that module's globals, the module loaded before the cell): the review of eb9e026 (r1, H1) got
five cells past a rule that read only the target's file name, each ending the real kernel ~0.5 s after its `ok`
reply with a certain `no-crash` here (`FORGED`); each is now the kernel's `crash DeadKernelError`."""

from __future__ import annotations

import sys

import pytest

from .test_armed_end import _verdict, pk  # noqa: F401 - the module's kernel fixture, and its verdict helper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

LIBRARY_THREADS = {
    "joblib loky pool": "from joblib import Parallel, delayed\nimport math\n"
                        "r = Parallel(n_jobs=2)(delayed(math.sqrt)(i) for i in range(8))\nassert len(r) == 8",
    "thread pool left open": "from concurrent.futures import ThreadPoolExecutor\nimport math\n"
                             "pool = ThreadPoolExecutor(2)\nassert pool.submit(math.sqrt, 4).result() == 2.0",
}
LATER = "import os, time\ndef later():\n    time.sleep(0.5)\n    os._exit(3)\n"
FORGED = {
    "another thread's run as the target": "import os, threading\n"
                                          "threading.Thread(target=threading.Timer(0.5, os._exit, (3,)).run).start()",
    "a forged file name": LATER + "import threading\n"
                          "later.__code__ = later.__code__.replace(co_filename=threading.__file__)\n"
                          "threading.Thread(target=later).start()",
    "a target swapped after the start": LATER + "import json, threading\nt = threading.Thread(target=later)\n"
                                        "t.start()\nt._target = json.dumps",
    "the notebook's function in a pool's thread": LATER + "from concurrent.futures import ThreadPoolExecutor\n"
                                                  "ThreadPoolExecutor(1).submit(later)",
}
NOTEBOOK_THREAD = ("import threading\nstop = threading.Event()\ndef beat():\n    while not stop.wait(0.2):\n"
                   "        pass\nthreading.Thread(target=beat, daemon=True).start()")


@pytest.mark.parametrize("path", ["fork", "transplant", "fork session"])
@pytest.mark.parametrize("cell", list(LIBRARY_THREADS))
def test_a_librarys_threads_leave_the_verdict_certain(pk, cell, path):  # noqa: F811
    v = _verdict(pk, path, LIBRARY_THREADS[cell])
    assert v.verdict == "no-crash" and v.certain, v
    assert "running after its reply" not in (v.reason or ""), v


@pytest.mark.parametrize("path", ["fork", "transplant"])
def test_the_notebooks_own_thread_is_still_waited_for(pk, path):  # noqa: F811
    v = _verdict(pk, path, NOTEBOOK_THREAD)
    assert v.verdict == "no-crash" and not v.certain, v
    assert "Thread" in (v.reason or "") and "running after its reply" in (v.reason or ""), v


@pytest.mark.parametrize("path", ["fork", "transplant"])
@pytest.mark.parametrize("cell", list(FORGED))
def test_a_thread_that_only_looks_like_a_librarys_is_waited_for(pk, cell, path):  # noqa: F811
    v = _verdict(pk, path, FORGED[cell])
    assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), v
