"""speculate(): verdicts, captured output, line mapping, budgets, and the user's kernel left untouched."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from crane.sandbox import speculate, speculate_async
from crane.sandbox.fork_runner import MODULE_NAME

from ..sacred import kernel_state, settle
from ..sandbox_options import use_options
from .conftest import tree_hash

SETUP = """
import numpy as np, pandas as pd
df = pd.DataFrame({'price': [1.0, 2.0, None], 'city': ['a', 'b', 'c']})
def risky(x):
    y = x + 1
    return y / 0
counter = 0
"""


@pytest.fixture(scope="module")
def ready(conn, watcher):
    res = conn.run_cell(SETUP)
    assert res.status == "ok", res
    settle(watcher, conn)  # the setup's messages all in before the watcher is cleared
    watcher.clear()
    return kernel_state(conn)


def _no_trace(conn, watcher, before):
    assert watcher.outputs() == [], watcher.outputs()
    after = kernel_state(conn)
    assert after == before, (set(after["ns"]) ^ set(before["ns"]), {k: (before[k], after[k]) for k in before if before[k] != after[k] and k != "ns"})


def test_crash_with_real_exception_and_cell_line(conn, watcher, ready):
    v = speculate(conn, "a = 1\nb = df['price'].sum()\nc = df['missing']\nd = 4\n")
    assert v.verdict == "crash" and v.ename == "KeyError" and v.evalue == "'missing'", v
    assert v.line == 3
    assert v.traceback[-1].startswith("KeyError")
    _no_trace(conn, watcher, ready)


def test_crash_inside_function_defined_elsewhere_maps_to_calling_line(conn, watcher, ready):
    v = speculate(conn, "\n\nz = risky(2)\n")
    assert (v.verdict, v.ename, v.line) == ("crash", "ZeroDivisionError", 3), v
    _no_trace(conn, watcher, ready)


def test_syntax_error_line(conn, ready):
    v = speculate(conn, "x = 1\ny = (2 +\n")
    assert v.verdict == "crash" and v.ename == "SyntaxError", v


def test_no_crash_captures_stdout_stderr_and_displays_without_touching_iopub(conn, watcher, ready):
    src = ("import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\n"
           "from IPython.display import display\ndisplay('shown')\ncounter += 1\ndf.shape")
    v = speculate(conn, src)
    assert v.verdict == "no-crash", v
    assert v.stdout == "to stdout\n" and v.stderr == "to stderr\n"
    assert [d.text for d in v.displays] == ["'shown'", "(3, 2)"]
    assert [d.kind for d in v.displays] == ["display_data", "execute_result"]
    assert conn.evaluate("counter") == 0  # the increment happened in the copy only
    _no_trace(conn, watcher, ready)


def test_c_level_output_is_captured_not_forwarded(conn, watcher, ready):
    v = speculate(conn, "import os\nos.write(1, b'fd one\\n')\nos.write(2, b'fd two\\n')")
    assert v.verdict == "no-crash", v
    assert "fd one" in v.stdout and "fd two" in v.stderr
    _no_trace(conn, watcher, ready)


def test_ipython_syntax_is_transformed(conn, ready):
    v = speculate(conn, "%time q = 21 * 2\nq")
    assert v.verdict == "no-crash", v
    assert v.displays[-1].text == "42" and "Wall time" in v.stdout
    v = speculate(conn, "%%time\nw = 1\nw / 0")
    assert v.verdict == "crash" and v.ename == "ZeroDivisionError", v


def test_confinement_holds_below_python_blocking(conn, workdir, ready):
    """libc calls through ctypes bypass the audit hook; Landlock/seccomp still refuse them."""
    src = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "r1 = libc.open(b'c_made.txt', 0o101, 0o644); e1 = ctypes.get_errno()\n"
        "r2 = libc.unlink(b'data.csv'); e2 = ctypes.get_errno()\n"
        "r3 = libc.socket(2, 1, 0); e3 = ctypes.get_errno()\n"
        "r4 = libc.fork(); e4 = ctypes.get_errno()\n"
        "r5 = libc.kill(ctypes.c_int(os.getppid()), 0); e5 = ctypes.get_errno()\n"
        "print(r1, e1, r2, e2, r3, e3, r4, e4, r5, e5)\n"
    ).replace("os.getppid()", "__import__('os').getppid()")
    before = tree_hash(workdir)
    v = speculate(conn, src, layer="blocking")
    # the refused network socket is recorded (the daemon answers the seccomp notification): blocked
    assert v.verdict == "blocked" and v.mode == "blocking", v
    assert any("network socket (AF_INET)" in d for d in v.denied), v.denied
    r1, e1, r2, e2, r3, e3, r4, e4, r5, e5 = map(int, v.stdout.split())
    assert r1 == r2 == r3 == r4 == r5 == -1
    assert e1 in (1, 13) and e2 in (1, 13) and e3 == 1 and e4 == 1 and e5 == 1
    assert tree_hash(workdir) == before


def test_confinement_holds_below_python_layered(conn, workdir, ready):
    """In layered mode libc writes land in the private layer, fork works, the network and files outside the
    layers stay closed, and the kernel cannot be signalled (it is outside the sandbox's pid namespace). The
    network attempt is recorded even though the cell ignored its error: the run is "blocked"."""
    src = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "r1 = libc.open(b'c_made.txt', 0o101, 0o644); e1 = ctypes.get_errno()\n"
        "r2 = libc.unlink(b'data.csv'); e2 = ctypes.get_errno()\n"
        "r3 = libc.socket(2, 1, 0); e3 = ctypes.get_errno()\n"
        "r4 = libc.open(b'/etc/crane_should_not_exist', 0o101, 0o644); e4 = ctypes.get_errno()\n"
        "r5 = libc.kill(ctypes.c_int(KERNEL), 0); e5 = ctypes.get_errno()\n"
        "pid = libc.fork()\n"
        "if pid == 0:\n    libc._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(r1 >= 0, r2, r3, e3, r4, e4, r5, e5, pid > 0, os.path.exists('c_made.txt'), os.path.exists('data.csv'))\n"
    ).replace("KERNEL", str(conn.evaluate("__import__('os').getpid()")))
    before = tree_hash(workdir)
    v = speculate(conn, src, layer="layered")
    assert v.verdict == "blocked" and v.mode == "layered" and "network socket (AF_INET)" in (v.reason or ""), v
    assert v.stdout.split() == ["True", "0", "-1", "1", "-1", "30", "-1", "3", "True", "True", "False"], v.stdout
    assert tree_hash(workdir) == before
    assert not os.path.exists("/etc/crane_should_not_exist")


def test_infinite_loop_is_a_timeout_within_budget_and_leaves_no_process(conn, watcher, ready):
    v = speculate(conn, "while True:\n    pass\n", budget_s=1.5)
    assert v.verdict == "timeout", v
    # ended by the cell's budget (the reason names it), not by a later backstop: a wall-clock bound of budget + 1 s
    # failed at load 25 (2.52 s: the fork and the reaping wait for a CPU), so the property is read from the reason
    # alone (any wall-clock bound is a bet on the machine's speed)
    assert v.reason and ("budget" in v.reason or "within 1.5 s" in v.reason), v
    assert v.pid
    deadline = time.monotonic() + 60  # an event waited for (the child reaped); the bound ends a failing test
    while os.path.exists(f"/proc/{v.pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{v.pid}"), "the sandbox child (or its zombie) is still there"
    _no_trace(conn, watcher, ready)


def test_timeout_reports_partial_output(conn, ready):
    v = speculate(conn, "print('started', flush=True)\nimport time\ntime.sleep(30)", budget_s=1.0)
    assert v.verdict == "timeout" and v.stdout == "started\n", v


def test_memory_hog_is_contained(conn, watcher, ready):
    peak = "__import__('resource').getrusage(__import__('resource').RUSAGE_SELF).ru_maxrss"
    rss_before = conn.evaluate(peak)
    v = speculate(conn, "hog = []\nwhile True:\n    hog.append(bytearray(50 * 1024 * 1024))", budget_s=10,
                  memory_mb=300)
    assert v.verdict == "timeout" and "memory" in (v.reason or ""), v
    rss_after = conn.evaluate(peak)
    assert rss_after - rss_before < 20 * 1024  # KiB: the kernel's peak did not grow by the hog
    _no_trace(conn, watcher, ready)


def test_impossible_allocation_is_a_certain_crash(conn, ready):
    v = speculate(conn, "import numpy as np\nnp.zeros((10**7, 10**7))")
    assert v.verdict == "crash" and "MemoryError" in (v.ename or ""), v


def test_kernel_stays_responsive_while_a_child_runs(conn, ready):
    """The kernel answers while the sandbox's child runs: the child runs until the test stops it, so an answer
    that came is one given while it ran (a wall-clock bound on the answer failed on a loaded machine)."""
    import psutil

    kernel = psutil.Process(conn.evaluate("__import__('os').getpid()"))
    before = {p.pid for p in kernel.children(recursive=True)}
    cancel = threading.Event()
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault(
        "v", speculate(conn, "while True: pass", budget_s=600.0, cancel=cancel)))
    th.start()
    try:
        deadline = time.monotonic() + 120  # an event waited for (the child forked); the bound ends a failing test
        while not {p.pid for p in kernel.children(recursive=True)} - before:
            assert th.is_alive() and time.monotonic() < deadline, box.get("v")
            time.sleep(0.05)
        # (a kernel that waited for the child would not answer before the cancel: the child spins for 600 s)
        assert conn.evaluate("1 + 1", timeout=120) == 2
        assert th.is_alive() and "v" not in box  # answered while the child still runs
    finally:
        cancel.set()
        th.join(120)
    assert box["v"].verdict == "unavailable" and "stopped" in (box["v"].reason or ""), box["v"]


def test_no_names_bound_and_module_private(conn, ready):
    speculate(conn, "pass")
    assert conn.evaluate(f"{MODULE_NAME!r} in __import__('sys').modules") is True
    names = conn.evaluate("sorted(k for k in get_ipython().user_ns if 'crane' in k.lower())")
    assert names == []


async def test_async_variant(conn, ready):
    v = await asyncio.wait_for(speculate_async(conn, "1 / 0"), 20)
    assert v.verdict == "crash" and v.ename == "ZeroDivisionError"


def test_threads_pools_do_not_hang_the_child(conn, ready):
    """GNU OpenMP (torch CPU) used in the kernel would hang a forked child's first parallel region."""
    r = conn.run_cell("import torch\na = torch.randn(600, 600)\nfor _ in range(3): b = a @ a\nc = (torch.randn(2000, 2000) * 2).sum()")
    assert r.status == "ok", r
    v = speculate(conn, "d = (torch.randn(2000, 2000) * 3).sum()\ne = a @ a\nfloat(d) != 0", budget_s=8)
    assert v.verdict == "no-crash", v


def test_unforkable_state_is_unavailable_quickly(tmp_path, monkeypatch):
    from crane.kernel.manager import start_kernel
    use_options(monkeypatch, transplant=False)  # the fork sandbox's own answer (tests/sandbox/test_transplant.py)
    k = start_kernel(tmp_path)
    try:
        k.connection.run_cell("import sys, types\nsys.modules['tensorflow'] = types.ModuleType('tensorflow')")
        v = speculate(k.connection, "x = 1")
        # "quickly": decided from the kernel's state before any fork (the reason names TensorFlow), not by a run
        # that timed out; a wall-clock bound would only measure the machine's load
        assert v.verdict == "unavailable" and "TensorFlow" in (v.reason or ""), v
        assert v.pid is None, v
    finally:
        k.shutdown()


def test_dead_or_busy_kernel_is_unavailable_not_an_exception(tmp_path):
    from crane.kernel.manager import start_kernel
    k = start_kernel(tmp_path)
    try:
        # busy for longer than any load can stretch the run's requests (5 s could end first: then no-crash); the
        # request goes first on the same channel, so the kernel takes it before the run's
        k.connection.client.execute("import time; time.sleep(300)")
        v = speculate(k.connection, "x = 1", request_timeout=0.5)
        assert v.verdict == "unavailable" and "busy" in (v.reason or ""), v
    finally:
        k.shutdown()


def test_auto_mode_starts_cheap_and_escalates_to_a_private_layer(conn, workdir, ready):
    """The default ("auto"): a cell without a sign of side effects runs in the blocking confinement (the
    cheaper one); one the blocking run refused a write to runs again in a private layer; a refused network
    attempt is not retried; a cell with a sign of side effects starts layered."""
    before = tree_hash(workdir)
    v = speculate(conn, "df.shape[0] + 1")
    assert v.verdict == "no-crash" and v.mode == "blocking" and "no sign of side effects" in (v.mode_reason or ""), v
    hidden = "f = getattr(df, 'to_' + 'csv')\nf('hidden.csv')\nprint(open('hidden.csv').read().splitlines()[0])"
    v = speculate(conn, hidden)
    assert (v.verdict, v.mode, v.stdout) == ("no-crash", "layered", ",price,city\n"), v
    v = speculate(conn, "import socket\nsocket.create_connection(('127.0.0.1', 9))")
    assert v.verdict == "blocked" and v.mode == "blocking", v
    v = speculate(conn, "df.to_csv('shown.csv')")
    assert v.verdict == "no-crash" and v.mode == "layered", v
    assert tree_hash(workdir) == before


def test_signs_of_side_effects():
    from crane.sandbox.layer_choice import needs_layer

    for src in ("df.to_csv('a.csv')", "plt.savefig('f.png')", "torch.save(m, 'm.pt')", "joblib.dump(m, 'x')",
                "with open('o.txt', 'w') as f:\n    f.write('x')", "!pip install x", "%%writefile a.py\nx = 1",
                "GridSearchCV(est, grid, n_jobs=-1)", "DataLoader(ds, num_workers=2)", "os.makedirs('out')",
                "subprocess.run(['ls'])", "Path('p').write_text('x')", "con = sqlite3.connect('db')"):
        assert needs_layer(src), src
    for src in ("df['a'].sum()", "model.fit(X, y)", "x = [i * 2 for i in range(10)]\nx[3]", "print(df.head())",
                "np.mean(arr, axis=0)", "plt.plot(x, y)"):
        assert not needs_layer(src), src
