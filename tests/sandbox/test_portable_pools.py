"""Pools inside the wall (issue 45): under `--sandbox portable` where the Linux layer holds the worker (Landlock,
seccomp), joblib's and multiprocessing's pools start real processes inside the run, on IPython 8 and 9 kernels:
- joblib `Parallel(n_jobs=2)` (loky's place taken by a fork pool: worker/pools.py): a clean one is `no-crash`
  with its tasks run in other processes than the worker, a lambda and a notebook function work as under loky, a
  crash in a task is the real exception (the same the kernel raises); `n_jobs=-1` is capped to the run's CPUs;
- `multiprocessing.Pool` and `ProcessPoolExecutor`: `map` runs in the pool's processes; a task's crash is real;
- a pool whose task writes outside the working folder is `blocked` (the child's refusal is the run's), nothing
  written; a spawn context's pool stays refused;
- no process of the run is left after its verdict (a pool left open included);
- the kernel is untouched (namespace, execution count, outputs), its files unchanged.
With `--sandbox guard` (no OS layer) pools stay refused and joblib runs its tasks in the worker's process."""

from __future__ import annotations

import os

import psutil
import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels"),
              pytest.mark.skipif(linux_layer_available() is not None,
                                 reason=f"pools run only under the Linux layer: {linux_layer_available()}")]

PORTABLE = SandboxOptions(confinement="portable")
GUARD = SandboxOptions(confinement="guard")
SETUP = """
import os
from joblib import Parallel, delayed
kpid = os.getpid()
def add_one(x):
    return x + 1
def check(i):
    if i == 5:
        raise ValueError(f"bad row {{i}}")
    return i
def whoami(_):
    return os.getpid()
def poke(_):
    os.kill(kpid, __import__("signal").SIGCONT)
def renice(_):
    os.setpriority(os.PRIO_PROCESS, kpid, 19)
def dial(port):
    __import__("socket").create_connection(("127.0.0.1", port), timeout=5)
def threaded(i):
    return sum(Parallel(n_jobs=2, prefer="threads")(delayed(add_one)(j) for j in range(i)))
def write_outside(i):
    with open({target!r}, "w") as f:
        f.write("pwned")
    return i
"""
CPUS = len(os.sched_getaffinity(0))


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def pk(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    target = str(outside / "pwned")
    run = conn.run_cell(SETUP.format(target=target), timeout=120)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "target": target}
    kernel.shutdown()


def _run(pk, source: str, sandbox: SandboxOptions = PORTABLE, budget_s: float = 60.0):
    conn = pk["conn"]
    before = (tree_hash(pk["work"]), tree_hash(pk["outside"]))
    with Untouched(conn) as watch:
        v = speculate(conn, source, budget_s, sandbox=sandbox)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert conn.evaluate("1 + 1") == 2
    assert (tree_hash(pk["work"]), tree_hash(pk["outside"])) == before, v
    assert not os.path.exists(pk["target"]), v
    assert v.mode == "portable", v
    return v


def _gone(pids: list[int]) -> None:
    """Every one of `pids` has ended (waited for as an event, never a fixed sleep): none outlives the run."""
    procs = [psutil.Process(p) for p in pids if psutil.pid_exists(p)]
    _, alive = psutil.wait_procs(procs, timeout=120)
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in alive if p.is_running()), alive


def _pids(stdout: str) -> tuple[int, set[int]]:
    """(the worker's pid, the pids its tasks ran in) from a cell's last line `worker <pid> tasks <pid> <pid> ...`."""
    words = stdout.strip().splitlines()[-1].split()
    assert words[0] == "worker" and words[2] == "tasks", stdout
    return int(words[1]), {int(w) for w in words[3:]}


def test_joblib_runs_its_tasks_in_processes_of_the_run(pk):
    cell = ("squares = Parallel(n_jobs=2)(delayed(pow)(i, 2) for i in range(10))\n"
            "plus = Parallel(n_jobs=2)(delayed(lambda x: x + 1)(i) for i in range(4))\n"
            "ones = Parallel(n_jobs=2)(delayed(add_one)(i) for i in range(4))\n"
            "nested = Parallel(n_jobs=2)(delayed(threaded)(i) for i in range(4))\n"
            "pids = Parallel(n_jobs=2, batch_size=1)(delayed(whoami)(i) for i in range(8))\n"
            "print(sum(squares), plus, ones, nested)\n"
            "print('worker', os.getpid(), 'tasks', *sorted(set(pids)))")
    v = _run(pk, cell)
    assert v.verdict == "no-crash", v
    assert v.stdout.splitlines()[0] == "285 [1, 2, 3, 4] [1, 2, 3, 4] [0, 1, 3, 6]", v.stdout
    worker, tasks = _pids(v.stdout)
    if CPUS >= 2:  # (a run with one CPU runs joblib's tasks in its own process, as n_jobs=1 does)
        assert tasks and worker not in tasks and pk["conn"].evaluate("kpid") not in tasks, v.stdout
    _gone(sorted(tasks - {worker}))
    v = _run(pk, "from joblib.parallel import get_active_backend\nb = get_active_backend()[0]\n"
                 "print(b.effective_n_jobs(-1), b.effective_n_jobs(512))")
    assert v.verdict == "no-crash" and v.stdout.split() == [str(CPUS), str(CPUS)], v


def test_a_crash_in_a_joblib_task_is_the_real_one(pk):
    cell = "out = Parallel(n_jobs=2)(delayed(check)(i) for i in range(8))"
    v = _run(pk, cell)
    real = pk["conn"].run_cell(cell, timeout=120)  # (the kernel's own loky pool: the label)
    assert real.status == "error" and real.ename == "ValueError", real
    assert (v.verdict, v.ename, v.evalue, v.certain) == ("crash", "ValueError", real.evalue, True), v


def test_multiprocessing_pools_map_in_their_processes(pk):
    cell = ("import multiprocessing as mp\nwith mp.Pool(2) as p:\n    print(p.map(add_one, range(5)))\n"
            "    pids = p.map(whoami, range(8), chunksize=1)\n"
            "from concurrent.futures import ProcessPoolExecutor\n"
            "with ProcessPoolExecutor(2) as ex:\n    print(list(ex.map(add_one, range(3))))\n"
            "from multiprocessing.pool import ThreadPool\nwith ThreadPool(2) as tp:\n    print(tp.map(add_one, [7]))\n"
            "print('worker', os.getpid(), 'tasks', *sorted(set(pids)))")
    v = _run(pk, cell)
    assert v.verdict == "no-crash", v
    assert v.stdout.splitlines()[:3] == ["[1, 2, 3, 4, 5]", "[1, 2, 3]", "[8]"], v.stdout
    worker, tasks = _pids(v.stdout)
    assert tasks and worker not in tasks, v.stdout
    _gone(sorted(tasks))
    v = _run(pk, "import multiprocessing as mp\nwith mp.Pool(2) as p:\n    p.map(check, range(8))")
    assert (v.verdict, v.ename, v.evalue) == ("crash", "ValueError", "bad row 5"), v


def test_a_pool_left_open_ends_with_the_run(pk):
    v = _run(pk, "import multiprocessing as mp\np = mp.Pool(2)\nprint(*[w.pid for w in p._pool])")
    assert v.verdict == "no-crash", v
    _gone([int(w) for w in v.stdout.split()])


def test_a_pools_side_effect_is_refused_like_the_workers(pk):
    for cell in ("import multiprocessing as mp\nwith mp.Pool(2) as p:\n    p.map(write_outside, range(4))",
                 "Parallel(n_jobs=2)(delayed(write_outside)(i) for i in range(4))"):
        v = _run(pk, cell)
        assert v.verdict == "blocked", (cell, v)
        assert "writing a file outside the cell's working folder" in (v.reason or ""), (cell, v)
        assert any("a process the cell started" in d for d in v.denied), (cell, v)  # (the child's, not the worker's)
    v = _run(pk, "import multiprocessing as mp\nwith mp.get_context('spawn').Pool(2) as p:\n    p.map(abs, [1])")
    assert v.verdict == "blocked" and "multiprocessing.pool.Pool is refused" in (v.reason or ""), v


def test_a_pools_processes_keep_every_refusal_the_worker_has(pk, listener):
    """Children run under the same guard, audit hook, Landlock and seccomp: a signal to the kernel, re-nicing it, a
    TCP connection, each from a pool's task, is `blocked`; the kernel keeps its priority, the listener hears nothing."""
    kpid = pk["conn"].evaluate("kpid")
    nice = psutil.Process(kpid).nice()
    for fn, arg in (("poke", 0), ("renice", 0), ("dial", listener.port)):
        v = _run(pk, f"import multiprocessing as mp\nwith mp.Pool(2) as p:\n    p.map({fn}, [{arg}] * 2)")
        assert v.verdict == "blocked", (fn, v)
        assert any("a process the cell started" in d for d in v.denied), (fn, v)
    assert psutil.Process(kpid).nice() == nice
    assert not listener.received, listener.received


def test_without_an_os_layer_pools_stay_refused_and_joblib_runs_in_the_worker(pk):
    v = _run(pk, "import multiprocessing as mp\nwith mp.Pool(2) as p:\n    p.map(abs, [1])", sandbox=GUARD)
    assert v.verdict == "blocked" and "multiprocessing.pool.Pool is refused" in (v.reason or ""), v
    v = _run(pk, "pids = Parallel(n_jobs=2)(delayed(whoami)(i) for i in range(4))\n"
                 "print('worker', os.getpid(), 'tasks', *sorted(set(pids)))", sandbox=GUARD)
    assert v.verdict == "no-crash", v
    worker, tasks = _pids(v.stdout)
    assert tasks == {worker}, v.stdout


def test_a_joblib_the_cell_imports_itself_gets_the_pool_too(workdir, outside):
    """A kernel that never imported joblib: the worker has not loaded it either, and the cell's own import gets the
    fork pool right after `joblib.parallel` runs (worker/pools.py's finder); the kernel untouched."""
    kernel = start_kernel(workdir, python=kernel_python(KERNEL_ENVS[0]))
    try:
        conn = kernel.connection
        assert conn.run_cell("import os\nx = 1", timeout=120).status == "ok"
        pk = {"conn": conn, "work": workdir, "outside": outside, "target": str(outside / "pwned")}
        v = _run(pk, "import os\nfrom joblib import Parallel, delayed\n"
                     "pids = Parallel(n_jobs=2, batch_size=1)(delayed(os.getpid)() for _ in range(6))\n"
                     "print('worker', os.getpid(), 'tasks', *sorted(set(pids)))")
        assert v.verdict == "no-crash", v
        worker, tasks = _pids(v.stdout)
        if CPUS >= 2:
            assert tasks and worker not in tasks, v.stdout
        _gone(sorted(tasks - {worker}))
        assert conn.evaluate("'joblib' in __import__('sys').modules") is False
    finally:
        kernel.shutdown()
