"""The notebook's threads still running in the kernel make a fork's verdict "likely" (red team round 17h, F7;
kernel/fork_threads.py): a forked child has only the thread that forked, so `worker.join()` returned at once there
and `results['score']` was a certain KeyError while the kernel's thread would have filled it. The kernel's live
threads are read just before the fork (only exact types and C-level reads: nothing of theirs runs) and named in
the child's setup line; a crash or clean run is then only likely, naming them. The kernel's machinery (ipykernel,
IPython) and a library's own thread class (tqdm's monitor) do not count. IPython 8 and 9, one-shot and session
(the copy paths copy no thread: a `Thread` is not a value the worker gets)."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
FORK_PATHS = [p for p in PATHS if p.startswith("fork")]
WORKER = ("import threading\nresults = {}\ngo = threading.Event()\ndef train():\n    go.wait(600)\n"
          "    results['score'] = 0.9\n")
STARTS = {
    "thread": WORKER + "worker = threading.Thread(target=train, name='trainer', daemon=True)\nworker.start()",
    "subclass": WORKER + "class Trainer(threading.Thread):\n    def run(self):\n        train()\n"
                "worker = Trainer(name='trainer', daemon=True)\nworker.start()",
    "timer": WORKER + "worker = threading.Timer(600, train)\nworker.name = 'trainer'\nworker.daemon = True\n"
             "worker.start()",
}
ENDS = {"thread": "go.set()\nworker.join(30)", "subclass": "go.set()\nworker.join(30)",
        "timer": "worker.cancel()\nworker.join(30)"}


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", FORK_PATHS)
@pytest.mark.parametrize("start", sorted(STARTS))
def test_a_running_notebook_thread_makes_the_verdict_likely(pk, path, start):
    conn = pk["conn"]
    assert conn.run_cell(STARTS[start], timeout=60).status == "ok"
    try:
        crash = path_verdict(pk, path, "worker.join(0.5)\nprint(results['score'] * 100)", _served)
        clean = path_verdict(pk, path, "z = 2 * 21", _served)
    finally:
        assert conn.run_cell(ENDS[start], timeout=60).status == "ok"
    assert (crash.verdict, crash.ename, crash.certain) == ("crash", "KeyError", False), crash
    assert "'trainer'" in (crash.reason or "") and "thread" in (crash.reason or ""), crash
    assert (clean.verdict, clean.certain) == ("no-crash", False) and "'trainer'" in (clean.reason or ""), clean


@pytest.mark.parametrize("path", FORK_PATHS)
def test_no_notebook_thread_leaves_the_verdict_certain(pk, path):
    """The kernel's own threads, an ended notebook thread, thread pools' idle workers (an executor's, and
    multiprocessing's ThreadPool, whose threads are a Thread subclass) and tqdm's monitor (where tqdm is installed)
    leave the fork's verdicts certain."""
    conn = pk["conn"]
    history = (WORKER + "worker = threading.Thread(target=train, name='trainer', daemon=True)\nworker.start()\n"
               "go.set()\nworker.join(30)\nassert not worker.is_alive()\n"
               "from concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(2)\n"
               "assert pool.submit(int, '1').result() == 1\n"
               "from multiprocessing.pool import ThreadPool\ntp = ThreadPool(2)\nassert tp.map(int, ['1']) == [1]\n"
               "try:\n    from tqdm import tqdm\n    for _ in tqdm(range(2)):\n        pass\nexcept ImportError:\n    pass")
    assert conn.run_cell(history, timeout=60).status == "ok"
    try:
        crash = path_verdict(pk, path, "assert results['score'] == 1.0", _served)
        clean = path_verdict(pk, path, "z = results['score'] * 2", _served)
    finally:
        assert conn.run_cell("pool.shutdown()\ntp.close()\ntp.join()", timeout=60).status == "ok"
    assert (crash.verdict, crash.ename, crash.certain) == ("crash", "AssertionError", True), crash
    assert (clean.verdict, clean.certain) == ("no-crash", True), clean
