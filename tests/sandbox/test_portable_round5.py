"""Round 5's portable-path families (../shared/notes/sandbox-attacks-5.md P1-P4, P6), on IPython 8 and 9 kernels,
through the portable sandbox (`SandboxOptions(confinement="portable")`: the call guard, the audit hook and, where
Linux has Landlock, the OS layer) and through the guard alone (`confinement="guard"`) for honest code:
- every attempt: nothing outside changed (files hashed, a loopback listener), the kernel unchanged (namespace,
  execution count, outputs: `Untouched`; nice value, CPU affinity, scheduling policy) and alive;
- attacks: `blocked` (refused by a Python layer) or a run whose calls the OS refused; never a certain crash;
- honest code (`..` paths, the view walked, resolved, listed): the kernel's own verdict, the real files unchanged.
A table of cells that use the standard library alone runs on the first kernel only where both kernels run one
interpreter (kernel_choice.kernels: the worker runs the same code under the same layers for either); cells that go
through an environment's own libraries (numpy, psutil, pyarrow, polars: their own tables) and P70's ends run on both.
"""

from __future__ import annotations

import os
import time

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .kernel_choice import kernels

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux process controls")

PORTABLE = SandboxOptions(confinement="portable")
GUARD = SandboxOptions(confinement="guard")  # the Python layers alone: what must hold for honest code without the OS
BOTH = [pytest.param(PORTABLE, id="portable"), pytest.param(GUARD, id="guard")]
LANDLOCK = linux_layer_available() is None
SETUP = "import os, functools, itertools, signal\nkpid = os.getpid()\nx = 41\n"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def k5(request, workdir, outside, listener):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP, timeout=120)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid")}
    kernel.shutdown()


def _sched(pid: int) -> tuple:
    return os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid)), os.sched_getscheduler(pid)


def run5(k5, source: str, sandbox: SandboxOptions = PORTABLE, may_be_certain: bool = False):
    """The cell in the sandbox; asserts nothing outside the run changed and the kernel is unchanged and alive
    (`may_be_certain`: a cell the kernel itself would crash on, e.g. one ending its own process)."""
    conn, kpid = k5["conn"], k5["kpid"]
    src = source.replace("@OUTSIDE@", str(k5["outside"])).replace("@WORK@", str(k5["work"]))
    before = (tree_hash(k5["work"]), tree_hash(k5["outside"]), _sched(kpid))
    with Untouched(conn) as watch:
        v = speculate(conn, src, 60.0, sandbox=sandbox)
    assert watch.unchanged, (watch.changes(), v)
    assert conn.evaluate("x") == 41
    assert (tree_hash(k5["work"]), tree_hash(k5["outside"]), _sched(kpid)) == before, v
    assert k5["listener"].received == []
    assert v.mode == "portable", v
    assert may_be_certain or not (v.verdict == "crash" and v.certain), v  # an attack never makes a certain crash
    return v


# P2: the user's kernel re-niced, pinned, re-scheduled or killed, through C intermediaries and library calls
P2 = {
    "setpriority through map": "list(map(os.setpriority, [os.PRIO_PROCESS], [kpid], [19]))",
    "setpriority through partial": "functools.partial(os.setpriority, os.PRIO_PROCESS, kpid, 18)()",
    "setpriority of the user": "list(map(os.setpriority, [os.PRIO_USER], [os.getuid()], [19]))",
    "affinity through map": "list(map(os.sched_setaffinity, [kpid], [{0}]))",
    "SCHED_IDLE through starmap": "list(itertools.starmap(os.sched_setscheduler, [(kpid, os.SCHED_IDLE, "
                                  "os.sched_param(0))]))",
    "pidfd kill through map": "list(map(signal.pidfd_send_signal, map(os.pidfd_open, [kpid]), [9]))",
    "a pool thread makes a FIFO outside": "import concurrent.futures as cf\n"
                                          "cf.ThreadPoolExecutor(1).submit(os.mkfifo, '@OUTSIDE@/fifo').result()",
    "mknod through map": "list(map(os.mknod, ['@OUTSIDE@/node']))",
    "a program through spawnv_passfds": "import multiprocessing.util as u\n"
                                        "u.spawnv_passfds(b'/bin/sh', [b'sh', b'-c', b'touch @OUTSIDE@/sh'], [])",
    "ctypes.pythonapi": "import ctypes\nctypes.pythonapi.system(b'touch @OUTSIDE@/ct')",
    "gc walked by library code": "import gc, concurrent.futures.thread as t, concurrent.futures as cf\n"
                                 "fu = cf.Future()\nt._WorkItem(fu, gc.get_objects, (), {}).run()\nlen(fu.result())",
    "a thread with no profile hook": "import _thread\nlist(map(_thread.start_new_thread, [os.mkfifo], "
                                     "[('@OUTSIDE@/late',)]))",
}
P2_PSUTIL = {  # through the environment's own psutil (its C extension)
    "psutil nice": "import psutil\npsutil.Process(kpid).nice(19)",
    "psutil affinity": "import psutil\npsutil.Process(kpid).cpu_affinity([0])",
}


def _p2(k5, source: str, sandbox: SandboxOptions) -> None:
    v = run5(k5, source, sandbox)
    assert v.verdict in ("blocked", "no-crash", "crash"), v
    if v.verdict == "blocked":
        assert (v.reason or "").startswith("crane sandbox: "), v
    assert os.path.exists(f"/proc/{k5['kpid']}")


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(P2))
@pytest.mark.parametrize("k5", kernels(*P2.values()), indirect=True, scope="module")
def test_p2_the_kernel_is_neither_reniced_pinned_rescheduled_nor_signalled(k5, attack, sandbox):
    _p2(k5, P2[attack], sandbox)


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(P2_PSUTIL))
@pytest.mark.parametrize("k5", kernels(*P2_PSUTIL.values()), indirect=True, scope="module")
def test_p2_nor_through_psutil(k5, attack, sandbox):
    _p2(k5, P2_PSUTIL[attack], sandbox)


ITSELF = ("os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0))\n"
          "os.sched_setaffinity(0, os.sched_getaffinity(0))\nprint('ok')")


@pytest.mark.parametrize("k5", kernels(ITSELF), indirect=True, scope="module")
def test_p2_the_worker_may_still_change_itself(k5):
    v = run5(k5, ITSELF)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "ok"), v


# P1: `..` after a mirrored folder, after the cell's own link, through the writers of the guard table: honest code
# keeps working on the run's private copies; nothing reaches the real folder or anything outside it
P1_HONEST = """
import os, shutil, numpy as np
open(os.path.join('sub', '..', 'results.csv'), 'w').write('x')
assert open('results.csv').read() == 'x'
os.remove('sub/../log.txt')
assert not os.path.exists('log.txt')
np.save('sub/../arr.npy', np.arange(3))
assert np.load('arr.npy').tolist() == [0, 1, 2]
open('sub/../data.csv', 'a').write('5,6\\n')
os.truncate('sub/../data.csv', 4)
os.chmod('sub/../data.csv', 0o600)
os.rename('sub/../data.csv', 'sub/../data2.csv')
shutil.rmtree('sub/../sub')
assert sorted(os.listdir('.')) == sorted(['arr.npy', 'data2.csv', 'outside_link', 'results.csv']), os.listdir('.')
print('ok')
"""

P1_ESCAPES = {
    "up from a mirrored folder": "open('sub/' + '../' * 40 + '@OUTSIDE@'.lstrip('/') + '/new.txt', 'w').write('x')",
    "remove through a mirrored folder": "os.remove('sub/' + '../' * 40 + '@OUTSIDE@'.lstrip('/') + '/target.txt')",
    "the cell's own link": "os.symlink('@OUTSIDE@', 'o2')\nopen('o2/../' + os.path.basename('@OUTSIDE@') + "
                           "'/pwn.txt', 'w').write('x')",
}
P1_ESCAPES_NUMPY = {  # through the environment's own numpy
    "a writer up from a mirrored folder": "import numpy as np\nnp.save('sub/' + '../' * 40 + "
                                          "'@OUTSIDE@'.lstrip('/') + '/a.npy', np.arange(2))",
}


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k5", kernels(P1_HONEST), indirect=True, scope="module")
def test_p1_dotdot_after_a_mirrored_folder_stays_in_the_run(k5, sandbox):
    v = run5(k5, P1_HONEST, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "ok"), v
    assert v.transplant is not None and ("landlock" in v.transplant.layers) == (sandbox is PORTABLE and LANDLOCK), v
    # a link of the working folder to a file outside: the write goes to the run's private copy
    v = run5(k5, "open('outside_link', 'w').write('x')\nprint(open('outside_link').read())", sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "x"), v


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(P1_ESCAPES))
@pytest.mark.parametrize("k5", kernels(*P1_ESCAPES.values()), indirect=True, scope="module")
def test_p1_dotdot_never_reaches_outside(k5, attack, sandbox):
    v = run5(k5, P1_ESCAPES[attack], sandbox)
    assert v.verdict in ("blocked", "crash"), v  # refused by a Python layer, or by the OS (PermissionError)


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(P1_ESCAPES_NUMPY))
@pytest.mark.parametrize("k5", kernels(*P1_ESCAPES_NUMPY.values()), indirect=True, scope="module")
def test_p1_dotdot_never_reaches_outside_through_numpy(k5, attack, sandbox):
    v = run5(k5, P1_ESCAPES_NUMPY[attack], sandbox)
    assert v.verdict in ("blocked", "crash"), v  # refused by a Python layer, or by the OS (PermissionError)


# P3: writers in native code. Attacks: refused (blocked) or failing on the OS layer; honest writers in the working
# folder, over files that are there (the view's links), write the run's private copies.
P3_SQLITE = {
    "ATTACH outside": "import sqlite3\nc = sqlite3.connect(':memory:')\n"
                      "c.execute(\"ATTACH DATABASE '@OUTSIDE@/att.db' AS x\")\nc.execute('create table x.t(a)')",
    "VACUUM INTO outside": "import sqlite3\nsqlite3.connect(':memory:').execute(\"VACUUM INTO '@OUTSIDE@/vac.db'\")",
    "ATTACH from a local database": "import sqlite3\nsqlite3.connect('local.db').execute("
                                    "\"ATTACH '@OUTSIDE@/shared.db' AS s\")",
    "mode=ro as a substring": "import sqlite3\nsqlite3.connect('file:@OUTSIDE@/u.db?mode=rwc&x=mode=ro', uri=True)"
                              ".execute('create table t(a)')",
    "mode=ro then mode=rwc": "import sqlite3\nsqlite3.connect('file:@OUTSIDE@/u2.db?mode=ro&mode=rwc', uri=True)"
                             ".execute('create table t(a)')",
    "the authorizer removed": "import sqlite3\nc = sqlite3.connect(':memory:')\nc.set_authorizer(None)\n"
                              "c.execute(\"ATTACH '@OUTSIDE@/att2.db' AS x\")",
}
P3_ARROW = {
    "ParquetWriter": "import pyarrow as pa, pyarrow.parquet as pq\nt = pa.table({'a': [1]})\n"
                     "w = pq.ParquetWriter('@OUTSIDE@/w.parquet', t.schema)\nw.write_table(t)\nw.close()",
    "write_dataset": "import pyarrow as pa, pyarrow.dataset as ds\n"
                     "ds.write_dataset(pa.table({'a': [1]}), '@OUTSIDE@/ds', format='parquet')",
    "ipc.new_file": "import pyarrow as pa\nt = pa.table({'a': [1]})\nw = pa.ipc.new_file('@OUTSIDE@/t.arrow', t.schema)\n"
                    "w.write_table(t)\nw.close()",
    "polars sink_ndjson": "import polars as pl\npl.DataFrame({'a': [1]}).lazy().sink_ndjson('@OUTSIDE@/p.ndjson')",
    "polars write_ipc_stream": "import polars as pl\npl.DataFrame({'a': [1]}).write_ipc_stream('@OUTSIDE@/p.arrows')",
}
P3_HONEST_SQLITE = """
import sqlite3
c = sqlite3.connect('local.db')
c.execute('create table t(a)')
c.execute("ATTACH 'other.db' AS o")
c.execute('create table o.t(a)')
c.execute("VACUUM INTO 'copy.db'")
ro = sqlite3.connect('file:copy.db?mode=ro', uri=True)
print(ro.execute('select count(*) from t').fetchone()[0])
"""
P3_HONEST_ARROW = """
import pyarrow as pa, pyarrow.parquet as pq, pyarrow.dataset as ds, polars as pl
t = pa.table({'a': [1, 2]})
pq.write_table(t, 'log.txt')                      # over a file of the working folder: its private copy
ds.write_dataset(t, 'sub', format='parquet', existing_data_behavior='overwrite_or_ignore')
pl.DataFrame({'a': [1]}).write_ipc_stream('data.csv')
print(pq.read_table('log.txt').num_rows, sorted(os.listdir('sub')))
"""


def _has(k5, module: str) -> bool:
    known = k5.setdefault("has", {})
    if module not in known:
        known[module] = bool(k5["conn"].evaluate(f"__import__('importlib.util').util.find_spec({module!r}) is not None"))
    return known[module]


ARROW_IMPORTS = "import pyarrow, pyarrow.parquet, pyarrow.dataset, pyarrow.ipc, pyarrow.fs, pyarrow.csv, pyarrow.orc, polars"


@pytest.fixture
def arrow(k5):
    """pyarrow and polars imported in the kernel (once per kernel; the P3 tests that use them run last in this file):
    the run's worker then has them imported before the run, as a warm worker has the kernel's library imports,
    instead of importing them in every cell (seconds each: the bulk of this file's time)."""
    if not (_has(k5, "pyarrow") and _has(k5, "polars")):
        pytest.skip("pyarrow and polars are in the IPython 9 kernel's environment")
    if not k5.get("arrow"):
        run = k5["conn"].run_cell(ARROW_IMPORTS, timeout=120)
        assert run.status == "ok", run
        k5["arrow"] = True


def _refused_outside(k5, v, sandbox, attack: str) -> None:
    assert v.verdict == "blocked", v  # refused by a Python layer, or the OS layer's refusal made the run blocked
    assert v.refusal is not None and v.refusal.layer in ("call guard", "audit hook", "landlock"), v
    if sandbox is GUARD:
        assert v.refusal.layer != "landlock", v
    if attack.startswith(("ATTACH", "VACUUM")):
        assert v.refusal.path and v.refusal.path.startswith(str(k5["outside"])), v.refusal
    assert not [p for p in k5["outside"].iterdir() if p.name != "target.txt"], v


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(P3_SQLITE))
@pytest.mark.parametrize("k5", kernels(*P3_SQLITE.values()), indirect=True, scope="module")
def test_p3_sqlite_writes_nothing_outside(k5, attack, sandbox):
    _refused_outside(k5, run5(k5, P3_SQLITE[attack], sandbox), sandbox, attack)


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k5", kernels(P3_HONEST_SQLITE), indirect=True, scope="module")
def test_p3_honest_sqlite_writes_the_runs_copies(k5, sandbox):
    v = run5(k5, P3_HONEST_SQLITE, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "0"), v


# P6: honest code that walks, lists or resolves the working folder: the same answers as in the kernel (the view's
# folders are real folders once listed), and a crash that went near what still differs (links where the kernel has
# files, paths resolving out of the view) is never certain
P6_SAME = """
import os
from pathlib import Path
paths = sorted(os.path.join(r, f) for r, _, fs in os.walk('.') for f in fs if f == 'inner.txt')
print(Path(paths[0]).read_text().strip())
print([p.name for p in Path('.').rglob('*.txt') if p.name == 'inner.txt'][0])
print(sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk('.') for f in fs))
print(sorted(d for _, ds, _ in os.walk('..') for d in ds if d == 'sub'))
"""
P6_DIFFERENT = {
    "islink": "assert not os.path.islink('data.csv')",
    "resolve": "from pathlib import Path\nPath('data.csv').resolve().relative_to(Path.cwd().resolve())",
    "realpath": "assert os.path.realpath('data.csv').startswith(os.getcwd())",
}


def _walked_size(root) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(root) for f in fs)


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k5", kernels(P6_SAME), indirect=True, scope="module")
def test_p6_walks_and_globs_see_what_the_kernel_sees(k5, sandbox):
    v = run5(k5, P6_SAME, sandbox)
    assert v.verdict == "no-crash", v
    subs = sorted(d for _, ds, _ in os.walk(k5["work"].parent) for d in ds if d == "sub")  # what the kernel sees
    assert v.stdout.split("\n")[:4] == ["keep me", "inner.txt", str(_walked_size(k5["work"])), str(subs)], v.stdout


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("cell", list(P6_DIFFERENT))
@pytest.mark.parametrize("k5", kernels(*P6_DIFFERENT.values()), indirect=True, scope="module")
def test_p6_a_crash_the_view_may_have_caused_is_never_certain(k5, cell, sandbox):
    v = run5(k5, P6_DIFFERENT[cell], sandbox)
    assert v.verdict in ("crash", "no-crash"), v
    assert not v.certain or v.verdict == "no-crash", v


# P4: CRANE's state reached by walking frames up from the cell (the guard switched off, the audit hook told to let
# everything through), then a program run: refused at the walk's first step, nothing runs
P4 = {
    "sys._getframe": "import sys\nf = sys._getframe()\nwhile f is not None:\n"
                     "    c = f.f_locals.get('ctx')\n"
                     "    if c is not None and hasattr(c, 'audit_state'):\n        c.audit_state['own'] = True\n"
                     "    f = f.f_back\nos.system('touch @OUTSIDE@/fw.txt')",
    "inspect.stack": "import inspect\nfor fi in inspect.stack():\n    c = fi.frame.f_locals.get('ctx')\n"
                     "    if c is not None and hasattr(c, 'audit_state'):\n        c.audit_state['own'] = True\n"
                     "os.system('touch @OUTSIDE@/fw2.txt')",
    "a traceback's frame": "import sys\ntry:\n    1/0\nexcept ZeroDivisionError:\n    tb = sys.exc_info()[2]\n"
                           "f = getattr(tb, 'tb_' + 'frame')\nwhile f is not None:\n    f = f.f_back\n"
                           "os.system('touch @OUTSIDE@/fw3.txt')",
    "an exception's __traceback__": "import operator\ntry:\n    1/0\nexcept ZeroDivisionError as e:\n"
                                    "    f = operator.attrgetter('tb_frame')(e.__traceback__)\n"
                                    "os.system('touch @OUTSIDE@/fw4.txt')",
    "a generator's frame": "def g():\n    yield 1\nf = next(map(getattr, [g()], ['gi_frame']))\n"
                           "os.system('touch @OUTSIDE@/fw5.txt')",
    "every thread's frame": "import sys\nf = list(sys._current_frames().values())[0]\n"
                            "os.system('touch @OUTSIDE@/fw6.txt')",
}


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(P4))
@pytest.mark.parametrize("k5", kernels(*P4.values()), indirect=True, scope="module")
def test_p4_crane_state_is_not_walked_to_from_the_cell(k5, attack, sandbox):
    v = run5(k5, P4[attack], sandbox)
    assert v.verdict == "blocked" and v.refusal is not None and v.refusal.layer in ("call guard", "audit hook"), v
    assert "frame" in v.refusal.call or "inspect" in v.refusal.call, v.refusal  # the walk's first step, not later
    assert not [p for p in k5["outside"].iterdir() if p.name != "target.txt"], v


# P4: the way to CRANE's frames that the Python layers once did not see (`traceback.walk_stack`: library code
# calling sys._getframe, then the frames' f_locals): refused at the first read of a CRANE frame's locals
# (worker/frames.py); with no Python layer at all, Landlock and seccomp hold the worker on Linux
# (test_portable_linux_layer.py, test_portable_seccomp.py: raw libc calls in a process with no Python layer)
WALL = """
import traceback
off = 0
for f, _ in traceback.walk_stack(None):
    for v in list(f.f_locals.values()):
        st = getattr(getattr(v, 'ctx', None), 'audit_state', None)
        if isinstance(st, dict):
            st['own'] = st['bypass'] = True
            off += 1
        if hasattr(getattr(v, 'guard', None), 'uninstall'):
            v.guard.uninstall()
            off += 1
print('off', off)
for what, fn in [('write', lambda: open('@OUTSIDE@/wall.txt', 'w').write('x')),
                 ('remove', lambda: os.remove('@OUTSIDE@/target.txt')),
                 ('program', lambda: os.execv('/bin/sh', ['sh', '-c', 'touch @OUTSIDE@/wall2.txt'])),
                 ('signal', lambda: os.kill(kpid, 0))]:
    try:
        fn()
        print(what, 'ran')
    except OSError as e:
        print(what, 'refused')
"""


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k5", kernels(WALL), indirect=True, scope="module")
def test_p4_a_library_walk_to_cranes_frames_is_refused_at_their_locals(k5, sandbox):
    v = run5(k5, WALL, sandbox)
    assert v.verdict == "blocked" and v.refusal is not None and v.refusal.layer == "call guard", v
    assert v.refusal.call == "reading a frame's f_locals (CRANE's: the walk to its state)", v.refusal
    assert "off" not in v.stdout, v  # nothing of CRANE's was switched off
    assert not [p for p in k5["outside"].iterdir() if p.name != "target.txt"], v


# P4 (P70): a fork child that leaves every registry Python keeps (os.setsid through a C intermediary, out of
# multiprocessing's `_children`, `os.getppid`/`os._exit` rebound) ends with the run however the run ends: the
# worker is its subreaper and the child has a parent-death SIGKILL from the Linux kernel (worker/reaper.py)
P70_CHILD = """
import multiprocessing as mp, time, collections
def child():
    collections.defaultdict(os.setsid)[0]  # (a C type calling its factory: no hook sees it, nor is it vetted)
    os.getppid = lambda: 1
    os._exit = lambda *a: None
    while True:
        time.sleep(0.05)
p = mp.Process(target=child)
p.start()
mp.process._children.discard(p)
while os.getsid(p.pid) != p.pid and p.exitcode is None:  # (a child whose setsid was refused has ended)
    time.sleep(0.01)
print(p.pid, p.exitcode, flush=True)
"""
P70_ENDS = {
    "the run ends": "",
    "the cell ends its process": "os._exit(0)",
    "the run is refused": "os.system('true')",
}


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("end", list(P70_ENDS))
def test_p4_a_fork_child_that_left_the_registries_does_not_outlive_the_run(k5, end, sandbox):
    if sandbox is PORTABLE and end != "the run ends":
        pytest.skip("how the worker ends is the same under both: each end once, under the guard alone")
    v = run5(k5, P70_CHILD + P70_ENDS[end], sandbox, may_be_certain=True)
    if v.verdict == "blocked" and v.refusal is not None and "setsid" in v.refusal.call:
        # held earlier: the guard refuses the child's setsid itself (worker/guard.py: the lean guard under Landlock,
        # and, since round 8, the guard alone, which wraps the refused C functions in their modules, so the
        # defaultdict's factory is the wrapper); the child never left the worker's process group
        return
    assert v.verdict == {"": "no-crash", "os._exit(0)": "crash", "os.system('true')": "blocked"}[P70_ENDS[end]], v
    pid_text, exitcode = v.stdout.split()[:2]
    assert exitcode == "None", v  # the child left its session and was still running when the cell went on
    pid = int(pid_text)
    if end == "the run ends":  # ended and reaped by the worker before it wrote its record
        assert not _running(pid), pid
        return
    deadline = time.monotonic() + 60  # the worker's end: the Linux kernel's parent-death signal (an event, waited
    while _running(pid) and time.monotonic() < deadline:  # for; the bound only ends a failing test)
        time.sleep(0.05)
    assert not _running(pid), pid


def _running(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # (a zombie: ended, left to init to reap)
    except psutil.NoSuchProcess:
        return False

# P3's pyarrow/polars writers: last in this file (the `arrow` fixture imports them in the kernel)
@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(P3_ARROW))
def test_p3_native_writers_write_nothing_outside(k5, arrow, attack, sandbox):
    _refused_outside(k5, run5(k5, P3_ARROW[attack], sandbox), sandbox, attack)


@pytest.mark.parametrize("sandbox", BOTH)
def test_p3_honest_native_writers_write_the_runs_copies(k5, arrow, sandbox):
    v = run5(k5, P3_HONEST_ARROW, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "2 ['inner.txt', 'part-0.parquet']"), v


# P3: pyarrow's Cython entry points that open, create, move or delete files by path (worker/arrow.py): refused
# outside the run under the guard alone too (no OS layer under it); honest use in the working folder writes the run's
# private copies
P3_ARROW_NATIVE = {
    "OSFile": "import pyarrow as pa\nf = pa.OSFile('@OUTSIDE@/o.bin', 'wb')\nf.write(b'x')\nf.close()",
    "output_stream": "import pyarrow as pa\nwith pa.output_stream('@OUTSIDE@/s.bin') as f:\n    f.write(b'x')",
    "CompressedOutputStream": "import pyarrow as pa\nwith pa.CompressedOutputStream('@OUTSIDE@/c.gz', 'gzip') as f:\n"
                              "    f.write(b'x')",
    "fs open_output_stream": "import pyarrow.fs as pfs\nwith pfs.LocalFileSystem().open_output_stream("
                             "'@OUTSIDE@/f.bin') as f:\n    f.write(b'x')",
    "fs delete_file": "import pyarrow.fs as pfs\npfs.LocalFileSystem().delete_file('@OUTSIDE@/target.txt')",
    "fs move": "import pyarrow.fs as pfs\npfs.LocalFileSystem().move('@OUTSIDE@/target.txt', 'moved.txt')",
    "fs create_dir": "import pyarrow.fs as pfs\npfs.LocalFileSystem().create_dir('@OUTSIDE@/d')",
    "fs copy_file": "import pyarrow.fs as pfs\npfs.LocalFileSystem().copy_file('data.csv', '@OUTSIDE@/copy.csv')",
    "a sub-tree file system": "import pyarrow.fs as pfs\npfs.SubTreeFileSystem('@OUTSIDE@', pfs.LocalFileSystem())"
                              ".delete_file('target.txt')",
    "ipc.new_file onto an OSFile": "import pyarrow as pa\nt = pa.table({'a': [1]})\n"
                                   "w = pa.ipc.new_file(pa.OSFile('@OUTSIDE@/t.arrow', 'wb'), t.schema)",
    "ParquetWriter onto a file system": "import pyarrow as pa, pyarrow.parquet as pq, pyarrow.fs as pfs\n"
                                        "t = pa.table({'a': [1]})\nw = pq.ParquetWriter('@OUTSIDE@/w.parquet', "
                                        "t.schema, filesystem=pfs.LocalFileSystem())",
    "orc.write_table onto an output stream": "import pyarrow as pa, pyarrow.orc as orc\n"
                                             "orc.write_table(pa.table({'a': [1]}), pa.output_stream('@OUTSIDE@/t.orc'))",
    "csv.CSVWriter": "import pyarrow as pa, pyarrow.csv as pc\nt = pa.table({'a': [1]})\n"
                     "pc.CSVWriter('@OUTSIDE@/w.csv', t.schema).write_table(t)",
}
P3_ARROW_NATIVE_HONEST = """
import pyarrow as pa, pyarrow.fs as pfs, pyarrow.orc as orc
f = pa.OSFile('log.txt', 'wb')          # over a file of the working folder (a link to the real one): its copy
f.write(b'arrow')
f.close()
fs = pfs.LocalFileSystem()
with fs.open_output_stream(os.path.abspath('new.bin')) as s:
    s.write(b'x')
fs.move(os.path.abspath('data.csv'), os.path.abspath('moved.csv'))
fs.delete_file(os.path.abspath('moved.csv'))
fs.create_dir(os.path.abspath('made'))
orc.write_table(pa.table({'a': [1]}), 'sub/t.orc')
print(open('log.txt').read(), sorted(os.listdir('.')), orc.read_table('sub/t.orc').num_rows)
"""


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(P3_ARROW_NATIVE))
def test_p3_pyarrows_native_entry_points_write_nothing_outside(k5, arrow, attack, sandbox):
    v = run5(k5, P3_ARROW_NATIVE[attack], sandbox)
    _refused_outside(k5, v, sandbox, attack)
    if sandbox is GUARD:
        assert v.refusal is not None and "pyarrow" in v.refusal.call, v
        assert str(k5["outside"]) in (v.refusal.path or v.refusal.call), v.refusal


@pytest.mark.parametrize("sandbox", BOTH)
def test_p3_pyarrows_native_entry_points_write_the_runs_copies(k5, arrow, sandbox):
    v = run5(k5, P3_ARROW_NATIVE_HONEST, sandbox)
    assert v.verdict == "no-crash", v
    assert v.stdout.split("\n")[0] == "arrow ['log.txt', 'made', 'new.bin', 'outside_link', 'sub'] 1", v.stdout
