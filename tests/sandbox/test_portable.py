"""The portable sandbox end to end (`SandboxOptions(confinement="portable")`, `--sandbox portable`): on Linux, with
every OS confinement off (no namespaces, Landlock, seccomp or rlimits: only the call guard and the audit hook in a
transplant worker), exactly as macOS and Windows would run it. On IPython 8 and 9 kernels:
- honest cells: the real run's verdict, exception and line; `sandbox.mode` "portable" with the layers that ran;
- writes into the cell's working folder are redirected into the run's private folder (the cell sees them), the
  real folder is unchanged;
- an attack per family (through getattr, a lambda pandas calls back, `__del__`, a property, an operator, exec,
  a C intermediary the guard cannot see): `blocked`, naming the call; nothing changed outside (files hashed, a
  loopback listener), the kernel untouched and alive.
An attack of the standard library alone runs on the first kernel only where both run one interpreter
(kernel_choice.kernels: the worker runs the same code under the same layers for either); one through pandas on both."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.worker.linux import linux_layer_available
from crane.sandbox.worker.seccomp import pc_arch

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .kernel_choice import kernels

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels")

PORTABLE = SandboxOptions(confinement="portable")
LINUX_LAYER = linux_layer_available() is None  # Landlock under the guard (worker/linux.py)
SETUP = """
import os, pandas as pd
df = pd.read_csv('data.csv')
kpid = os.getpid()
def add_one(x):
    return x + 1
class Box:
    def __init__(self, v):
        self.v = v
    def __add__(self, other):
        return Box(self.v + other)
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def pk(request, workdir, outside, listener):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP, timeout=120)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener}
    kernel.shutdown()


def _run(pk, source: str, budget_s: float = 60.0):
    conn = pk["conn"]
    before = (tree_hash(pk["work"]), tree_hash(pk["outside"]))
    with Untouched(conn) as watch:
        v = speculate(conn, source, budget_s, sandbox=PORTABLE)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert conn.evaluate("1 + 1") == 2
    assert (tree_hash(pk["work"]), tree_hash(pk["outside"])) == before, v
    assert v.mode == "portable", v
    return v


def test_honest_cells_get_the_real_runs_verdict(pk):
    v = _run(pk, "df['c'] = df.a.map(add_one)\nb = Box(1) + 2\nprint(df.c.tolist(), b.v)")
    assert v.verdict == "no-crash", v
    assert v.stdout.strip() == "[2, 4] 3"
    layers = ["call guard", "audit hook"] + (["landlock"] + (["seccomp"] if pc_arch() else []) if LINUX_LAYER else [])
    assert v.transplant is not None and v.transplant.layers == layers, v.transplant
    assert (v.landlock_abi is not None) == bool(LINUX_LAYER), v
    assert "confine" not in v.setup_steps and "layer" not in v.setup_steps, v
    assert f"portable sandbox: {', '.join(layers)} " + (
        f"(OS layer: {', '.join(layers[2:])})" if LINUX_LAYER else "(no OS confinement)") in v.how()
    v = _run(pk, "x = 1\ny = df['missing'].sum()\n")
    assert (v.verdict, v.ename, v.line) == ("crash", "KeyError", 2), v


def test_writes_in_the_working_folder_are_redirected_into_the_runs_folder(pk):
    cell = """
df.to_csv('out.csv', index=False)
assert pd.read_csv('out.csv').shape == (2, 2)
with open('log.txt', 'a') as f:
    f.write('more\\n')
assert open('log.txt').read() == 'log\\nmore\\n'
with open('sub/inner.txt', 'w') as f:
    f.write('changed')
assert open('sub/inner.txt').read() == 'changed'
os.remove('data.csv')
assert not os.path.exists('data.csv')
os.makedirs('models/v1', exist_ok=True)
import shutil
shutil.rmtree('sub')
open('outside_link', 'w').write('private')
print(sorted(os.listdir('.')))
"""
    v = _run(pk, cell)
    assert v.verdict == "no-crash", v
    assert v.stdout.strip() == "['log.txt', 'models', 'out.csv', 'outside_link']", v.stdout


def test_the_working_folders_surroundings_read_as_in_the_kernel(pk):
    """`../data`-style paths and `Path.cwd()` see what the kernel sees (the run's view mirrors every ancestor);
    a write next to the working folder goes into the view too."""
    name = pk["work"].name
    cell = f"""
from pathlib import Path
assert Path.cwd().name == {name!r}, Path.cwd()
assert pd.read_csv('../{name}/data.csv').shape == (2, 2)
assert (Path.cwd().parent / {name!r} / 'sub' / 'inner.txt').read_text() == 'keep me\\n'
os.makedirs('../{name}-results', exist_ok=True)
df.to_csv('../{name}-results/r.csv')
assert pd.read_csv('../{name}-results/r.csv').shape[0] == 2
"""
    v = _run(pk, cell)
    assert v.verdict == "no-crash", v
    assert not (pk["work"].parent / f"{name}-results").exists()
    assert not (pk["work"] / "out.csv").exists()


def test_making_a_folder_that_exists_outside_is_what_it_is_in_the_kernel(pk):
    """`makedirs(..., exist_ok=True)` of a folder outside that is already there (a library making sure of its cache
    folder: matplotlib's at its first draw in the worker, torch's `/tmp/torchinductor_<user>`) changes nothing in
    the kernel: in the run `os.mkdir` fails with FileExistsError exactly as there (so `exist_ok` goes on), never a
    refusal; a folder that is not there stays refused."""
    outside = str(pk["outside"])
    cell = f"""
from pathlib import Path
os.makedirs({outside!r}, exist_ok=True)
Path({outside!r}).mkdir(parents=True, exist_ok=True)
try:
    os.mkdir({outside!r})
except FileExistsError as e:
    print('exists', e.errno)
"""
    v = _run(pk, cell)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "exists 17"), v
    v = _run(pk, f"from pathlib import Path\nPath({outside + '/new'!r}).mkdir(parents=True, exist_ok=True)")
    assert v.verdict == "blocked" and "os.mkdir outside the cell's working folder" in (v.reason or ""), v
    v = _run(pk, f"os.makedirs({outside + '/new'!r}, exist_ok=True)")
    assert v.verdict == "blocked" and "os.makedirs (writing" in (v.reason or ""), v
    v = _run(pk, f"os.makedirs({outside!r})")  # without exist_ok: refused, as a write outside
    assert v.verdict == "blocked", v
    assert not (pk["outside"] / "new").exists()


ATTACKS = {
    "a signal through a forged multiprocessing registry": (
        "import multiprocessing.process as mpp, signal, types\nclass P:\n    pass\np = P()\n"
        "p._popen = types.SimpleNamespace(pid=kpid, returncode=None)\nmpp._children.add(p)\n"
        "os.kill(kpid, signal.SIGKILL)"),
    "multiprocessing's fork launcher called directly": (
        "import multiprocessing as mp, multiprocessing.popen_fork as pf\n"
        "pf.Popen(mp.Process(target=open, args=('{outside}/pwned', 'w')))"),
    "os.system through getattr": "getattr(os, 'sys' + 'tem')('touch {outside}/pwned')",
    "__del__": "import shutil\nclass C:\n    def __del__(self):\n        shutil.rmtree('{outside}')\nc = C()\ndel c",
    "a property": "import socket\nclass C:\n    @property\n    def p(self):\n"
                  "        return socket.create_connection(('127.0.0.1', {port}))\nC().p",
    "an operator": "import subprocess\nclass C:\n    def __add__(self, o):\n"
                   "        return subprocess.run(['touch', '{outside}/pwned'])\nC() + 1",
    "exec": "exec(\"open('{outside}/target.txt', 'w').write('x')\")",
    "a C intermediary (map)": "list(map(os.remove, ['{outside}/target.txt']))",
    "the network through a library": "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/')",
    "a signal to the kernel": "import signal\nos.kill(kpid, signal.SIGKILL)",
    "ctypes": "import ctypes\nctypes.CDLL(None).system(b'touch {outside}/pwned')",
    # (a thread itself runs where an OS layer holds the worker; what it does is vetted as the cell's own code)
    "a thread writing outside": "import threading\n"
                                "threading.Thread(target=lambda: open('{outside}/target.txt', 'w').write('x')).start()",
    "leaving the run's folder": "os.chdir('{outside}')\nopen('x', 'w').write('x')",
}
# written to the run's private copy of the working folder, never the real one (worker/abs_paths.py: it was blocked)
PRIVATE = {"an absolute path into the working folder": "open('{work}/log.txt', 'w').write('x')\n"
                                                       "print(open('{work}/log.txt').read())"}
ATTACKS_THROUGH_PANDAS = {  # the environment's own pandas
    "a lambda pandas calls back": "df.apply(lambda r: os.remove('{outside}/target.txt'), axis=1)",
    "a library writing outside": "df.to_csv('{outside}/out.csv')",
}
SETUP_LIBRARY_NAMES = ("df", "pd")  # SETUP's names bound to pandas' objects


def _refused(pk, attack: str) -> None:
    src = attack.format(outside=pk["outside"], port=pk["listener"].port, work=pk["work"])
    v = _run(pk, src)
    assert v.verdict == "blocked", v
    assert (v.reason or "").startswith("crane sandbox: ") and "is refused (portable sandbox)" in v.reason, v.reason
    assert not (pk["outside"] / "pwned").exists()
    assert pk["listener"].received == []


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("pk", kernels(*ATTACKS.values(), library_names=SETUP_LIBRARY_NAMES), indirect=True,
                         scope="module")
def test_attacks_are_refused_and_change_nothing(pk, attack):
    _refused(pk, ATTACKS[attack])


@pytest.mark.parametrize("cell", list(PRIVATE))
@pytest.mark.parametrize("pk", kernels(*ATTACKS.values(), library_names=SETUP_LIBRARY_NAMES), indirect=True,
                         scope="module")
def test_a_write_by_absolute_path_into_the_working_folder_is_private(pk, cell):
    v = _run(pk, PRIVATE[cell].format(work=pk["work"]))  # (the real folder's hash unchanged: _run)
    assert v.verdict == "no-crash" and v.certain and v.stdout == "x\n", v
    assert (pk["work"] / "log.txt").read_text() == "log\n"  # the real file as it was


@pytest.mark.parametrize("attack", list(ATTACKS_THROUGH_PANDAS))
@pytest.mark.parametrize("pk", kernels(*ATTACKS_THROUGH_PANDAS.values(), library_names=SETUP_LIBRARY_NAMES),
                         indirect=True, scope="module")
def test_attacks_through_pandas_are_refused_and_change_nothing(pk, attack):
    _refused(pk, ATTACKS_THROUGH_PANDAS[attack])


NAMED = "f = getattr(os, 'sys' + 'tem')\nf('true')"


@pytest.mark.parametrize("pk", kernels(NAMED, library_names=SETUP_LIBRARY_NAMES), indirect=True, scope="module")
def test_a_refusal_names_the_call(pk):
    v = _run(pk, NAMED)
    assert v.reason == "crane sandbox: a call to os: posix.system is refused (portable sandbox)", v.reason


def test_a_portable_session_runs_cells_refuses_side_effects_and_rolls_back(pk):
    """`crane fix`'s and the agent's sandboxed tries (open_session) under the portable sandbox: state persists
    between runs, a refused call makes that run `blocked` and the session goes on, checkpoints roll back."""
    from crane.sandbox.session import open_session

    conn = pk["conn"]
    before = (tree_hash(pk["work"]), tree_hash(pk["outside"]))
    with Untouched(conn) as watch:
        with open_session(conn, budget_s=30.0, sandbox=PORTABLE) as sb:
            v = sb.run("n = len(df)\nm = add_one(n)")
            assert (v.verdict, v.mode) == ("no-crash", "portable"), v
            assert v.transplant is not None and v.transplant.layers == ["call guard", "audit hook"]
            assert sb.inspect("m") == "3"
            v = sb.run(f"getattr(os, 'sys' + 'tem')('touch {pk['outside']}/pwned')")
            assert v.verdict == "blocked" and "posix.system is refused" in (v.reason or ""), v
            v = sb.run(f"open('{pk['outside']}/target.txt', 'w').write('x')")
            assert v.verdict == "blocked", v
            sb.checkpoint()
            v = sb.run("m = 'changed'\ndf.to_csv('copy.csv')\nprint(open('copy.csv').read()[:3])")
            assert v.verdict == "no-crash" and v.stdout.startswith(",a,"), v
            sb.rollback()
            assert sb.inspect("m") == "3"
            v = sb.run("df['missing']")
            assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert (tree_hash(pk["work"]), tree_hash(pk["outside"])) == before
    assert not (pk["outside"] / "pwned").exists()


LOADERS = """
import numpy as np, torch
from torch.utils.data import Dataset, DataLoader
class DS(Dataset):
    def __init__(self, X):
        self.X = X
    def __len__(self):
        return len(self.X)
    def __getitem__(self, i):
        return self.X[i]
good = DS(np.arange(64, dtype=np.float32).reshape(32, 2))
bad = DS(np.array([[1, 'a']] * 32, dtype=object))  # default_collate rejects object rows: TypeError
class Writer(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        open({target!r}, 'w').write('x')
        return i
writer = Writer()
"""


def test_a_dataloaders_worker_processes_run_confined_like_the_worker(pk):
    """`DataLoader(num_workers=2)`: multiprocessing's fork children of the worker start (a copy of it: the guard and
    the audit hook hold in them; its channels are UNIX sockets in the run's scratch) and end with the run. The
    verdict is the real run's (the workers' TypeError, certain); a child's side effect is refused like the
    worker's own (`blocked`, nothing written); a spawned child (a fresh interpreter without either layer), a
    grandchild, and a child left running after the cell are refused or ended."""
    import psutil

    conn = pk["conn"]
    if not conn.evaluate("__import__('importlib.util').util.find_spec('torch') is not None"):
        pytest.skip("torch is not installed for this kernel's Python (pyproject.toml's bench extra has none from 3.12)")
    target = str(pk["outside"] / "pwned")
    assert conn.run_cell(LOADERS.format(target=target), timeout=180).status == "ok"
    v = _run(pk, "s = 0\nfor xb in DataLoader(good, batch_size=8, num_workers=2):\n    s += float(xb.sum())\nprint(s)")
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "2016.0"), v
    cell = "for xb in DataLoader(bad, batch_size=8, num_workers=2):\n    pass"
    v = _run(pk, cell)
    real = conn.run_cell(cell, timeout=120)
    assert real.status == "error" and real.ename == "TypeError", real
    assert (v.verdict, v.ename, v.certain) == ("crash", "TypeError", True), v
    v = _run(pk, "for i in DataLoader(writer, batch_size=2, num_workers=2):\n    pass")
    assert v.verdict == "blocked" and "writing a file outside the cell's working folder" in (v.reason or ""), v
    for cell in ("import multiprocessing as mp\nmp.get_context('spawn').Process(target=print).start()",
                 "import multiprocessing as mp\ndef f():\n    mp.Process(target=print).start()\n"
                 "p = mp.Process(target=f)\np.start()\np.join()"):
        v = _run(pk, cell)
        assert v.verdict == "blocked" and "BaseProcess.start is refused" in (v.reason or ""), (cell, v)
    v = _run(pk, "import multiprocessing as mp, time\np = mp.Process(target=time.sleep, args=(600,))\np.start()\n"
                 "print(p.pid)")
    assert v.verdict == "no-crash", v
    child = psutil.Process(int(v.stdout.strip())) if psutil.pid_exists(int(v.stdout.strip())) else None
    if child is not None:  # ended with the run's worker: wait for its end (an event), never a fixed sleep
        psutil.wait_procs([child], timeout=120)
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert not (pk["outside"] / "pwned").exists()


def test_a_unix_socket_link_in_the_runs_scratch_reaches_nothing_outside(pk, tmp_path_factory):
    """multiprocessing's channels may use UNIX sockets in the run's scratch folder; a link there to a socket
    elsewhere (a local daemon's) is refused by where it really leads."""
    import socket
    import threading

    d = tmp_path_factory.mktemp("sock")
    path = str(d / "daemon.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    srv.settimeout(0.2)
    hits: list = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                hits.append(srv.accept())
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        v = _run(pk, f"import tempfile\nfrom multiprocessing.connection import Client\n"
                     f"link = tempfile.gettempdir() + '/d.sock'\nos.symlink({path!r}, link)\nClient(link, 'AF_UNIX')")
        assert v.verdict == "blocked" and "network connection" in (v.reason or ""), v
    finally:
        stop.set()
        t.join(5)
        srv.close()
    assert hits == []
