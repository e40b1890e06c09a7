"""Issue 42, review r1 finding M1: a private request (kernel/hooks_off.py) changes nothing other threads of the
kernel see. b9b950c set `threading._trace_hook`/`_profile_hook` to None for the whole request (process-wide): a thread
the notebook started meanwhile, from a background thread of its own, ran without the notebook's
`threading.settrace`/`setprofile` hook (a debugger's), for good (the reviewer's /tmp/r1-x/threading_hook_lost.py:
98 of 141 threads started during 5 requests). Real kernels: IPython 8 and 9 (3.11), and the 3.12 and 3.13 kernels.

Not timing-sensitive: the request's own function (a test module's) tells the notebook's background thread to start a
thread (`GO`) and waits until that thread has said which hooks it runs with (`DONE`), so the thread starts inside the
request's window every time.
"""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.private_module import KernelModule, ModuleClient

from ..kernel_envs import KERNEL_ENVS, PYTHON_KERNELS, kernel_python, python_kernel

# the request's function: the notebook's thread starts a thread while the request runs
PART = """
def window(timeout):
    import sys
    ns = sys.modules["__main__"].__dict__
    ns["GO"].set()
    return ns["DONE"].wait(timeout)
"""

NOTEBOOK = r"""
import sys, threading
def tr(frame, event, arg):
    return None
def pr(frame, event, arg):
    return None
GO, DONE = threading.Event(), threading.Event()
SEEN = []
def child():
    SEEN.append((sys.gettrace() is tr, sys.getprofile() is pr))
    DONE.set()
def spawner():
    GO.wait()
    threading.Thread(target=child).start()
"""
START = """
threading.settrace(tr)
threading.setprofile(pr)
threading.Thread(target=spawner, daemon=True).start()
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS + [f"py{v}" for v in PYTHON_KERNELS if v != "3.11"])
def kernel(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"hooks-threads-{request.param}")
    (work / "window.py").write_text(PART)
    python = python_kernel(request.param[2:]) if request.param.startswith("py") else kernel_python(request.param)
    with start_kernel(work, python=python) as k:
        yield k, work


def test_a_thread_the_notebook_starts_during_a_request_keeps_the_notebooks_hooks(kernel):
    k, work = kernel
    conn = k.connection
    client = ModuleClient(conn, KernelModule("_crane_test_hooks_threads", "a test module", [work / "window.py"]))
    client.ensure_installed(timeout=30)
    assert conn.run_cell(NOTEBOOK + START, timeout=60).status == "ok"
    try:
        started = client.call("window", 60, timeout=120, what="demo")
        seen = conn.evaluate("SEEN", timeout=30)
        held = conn.evaluate("threading.gettrace() is tr and threading.getprofile() is pr", timeout=30)
    finally:
        conn.run_cell("threading.settrace(None)\nthreading.setprofile(None)", timeout=60)
    assert started is True  # the thread started (and answered) inside the request
    assert seen == [(True, True)]  # it runs with the notebook's trace and profile functions
    assert held is True


# a notebook's `sys.monitoring` tool (3.12+: a debugger's) sees the events of the notebook's other threads while a
# request runs: b9b950c cleared every tool's callbacks for every request (process-wide), so an event in another
# thread during the window was lost; now only a module whose calls start a thread of CRANE's clears them
# (`KernelModule.threads`: the transplant export)
MONITOR = r"""
M = sys.monitoring
M.use_tool_id(3, 'debugger')
MON = []
def mark():
    return None
def on_start(code, offset):
    MON.append(code.co_name)
M.register_callback(3, M.events.PY_START, on_start)
M.set_local_events(3, mark.__code__, M.events.PY_START)
def child():
    mark()
    SEEN.append(list(MON))
    DONE.set()
threading.Thread(target=spawner, daemon=True).start()
"""


def test_a_notebooks_monitoring_tool_sees_its_other_threads_during_a_request(kernel, request):
    if request.node.callspec.params["kernel"] not in ("py3.12", "py3.13"):
        pytest.skip("sys.monitoring: Python 3.12+ (the 3.12 and 3.13 kernels)")
    k, work = kernel
    conn = k.connection
    client = ModuleClient(conn, KernelModule("_crane_test_hooks_monitor", "a test module", [work / "window.py"]))
    client.ensure_installed(timeout=30)
    assert conn.run_cell(NOTEBOOK + MONITOR, timeout=60).status == "ok"
    try:
        started = client.call("window", 60, timeout=120, what="demo")
        seen = conn.evaluate("SEEN", timeout=30)
        held = conn.evaluate("M.get_tool(3) == 'debugger' and M.register_callback(3, M.events.PY_START, on_start) "
                             "is on_start", timeout=30)
    finally:
        conn.run_cell("threading.settrace(None)\nthreading.setprofile(None)\nM.set_local_events(3, mark.__code__, 0)\n"
                      "M.register_callback(3, M.events.PY_START, None)\nM.free_tool_id(3)", timeout=60)
    assert started is True
    assert seen == [["mark"]]  # the event of the notebook's thread, during the request, reached its tool
    assert held is True
