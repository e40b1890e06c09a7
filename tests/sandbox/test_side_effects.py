"""Side effects attempted in the sandbox, in both modes: in layered mode file writes, programs and worker
processes succeed in the private layer; in blocking mode they are refused ("blocked"). Network, mounts, ptrace
and writes outside the layers are refused in both. Either way nothing changes on disk (the working directory,
a directory outside every layer reached through a symlink, $HOME), nothing reaches a listening loopback socket,
nothing reaches the notebook (iopub), the kernel is untouched, and no attempt is reported as a crash."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from crane.sandbox import speculate

from ..library_versions import skip_without_torch_in
from ..sacred import kernel_state, settle
from .conftest import tree_hash

SETUP = """
import os, sys, shutil, pathlib, pickle, sqlite3, socket, subprocess, signal, tempfile, ctypes, json
import numpy as np, pandas as pd
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
import multiprocessing as mp
df = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})
arr = np.arange(10)
fh = open('log.txt', 'a')
rfh = open('data.csv')
mm = np.memmap('mm.dat', dtype='uint8', mode='w+', shape=(4096,))
shared = mp.Array('i', 8)
import mmap
huge = mmap.mmap(-1, 300 << 20)  # anonymous shared memory too large to copy: the sandbox makes it read-only
plt.plot([1, 2, 3])
libc = ctypes.CDLL(None, use_errno=True)
def must(rc, what):
    if rc != 0:
        raise OSError(ctypes.get_errno(), what)
"""

N, B = "no-crash", "blocked"
# name: (source, verdict in layered mode, verdict in blocking mode)
ATTEMPTS = {
    "open-w": ("open('out.txt', 'w').write('x')\nassert open('out.txt').read() == 'x'", N, B),
    "open-append": ("with open('data.csv', 'a') as f:\n    f.write('5,6\\n')\nassert open('data.csv').read().endswith('5,6\\n')", N, B),
    "pathlib-write_text": ("pathlib.Path('out.txt').write_text('x')", N, B),
    "os.remove": ("os.remove('data.csv')\nassert not os.path.exists('data.csv')", N, B),
    "pathlib-unlink": ("pathlib.Path('data.csv').unlink()", N, B),
    "os.rename": ("os.rename('data.csv', 'moved.csv')\nassert os.path.exists('moved.csv')", N, B),
    "shutil.rmtree": ("shutil.rmtree('sub')", N, B),
    "os.mkdir": ("os.mkdir('newdir')\nopen('newdir/f', 'w').write('x')", N, B),
    "os.chmod": ("os.chmod('data.csv', 0o777)", N, B),
    "os.truncate": ("os.truncate('data.csv', 0)\nassert os.path.getsize('data.csv') == 0", N, B),
    "os.symlink": ("os.symlink('data.csv', 'link.csv')", N, B),
    "shutil.copy": ("shutil.copy('data.csv', 'copy.csv')", N, B),
    "DataFrame.to_csv": ("df.to_csv('out.csv')\nassert pd.read_csv('out.csv', index_col=0).equals(df)", N, B),
    "np.save": ("np.save('arr.npy', arr)\nassert (np.load('arr.npy') == arr).all()", N, B),
    "pickle.dump": ("with open('obj.pkl', 'wb') as f:\n    pickle.dump(df, f)", N, B),
    "joblib.dump": ("import joblib\njoblib.dump(df, 'df.joblib')\nassert joblib.load('df.joblib').equals(df)", N, B),
    "torch.save": ("import torch\ntorch.save({'w': torch.ones(3)}, 'w.pt')\nassert torch.load('w.pt')['w'].sum() == 3", N, B),
    "sqlite3-file": ("con = sqlite3.connect('db.sqlite')\ncon.execute('create table t (x)')\ncon.commit()", N, B),
    "plt.savefig": ("plt.savefig('fig.png')\nassert os.path.getsize('fig.png') > 0", N, B),
    "writefile-magic": ("%%writefile made_by_magic.txt\nhello", N, B),
    "write-tmp": ("open('/tmp/crane_sandbox_should_not_exist.txt', 'w').write('x')", N, B),
    "write-dev-shm": ("open('/dev/shm/crane_sandbox_should_not_exist', 'w').write('x')", N, B),
    "write-home-config": ("p = os.path.expanduser('~/.config/crane_sandbox_should_not_exist')\n"
                          "os.makedirs(p, exist_ok=True)\nopen(p + '/x', 'w').write('x')", N, B),
    "proc-self-root": ("open('/proc/self/root' + os.path.abspath('data.csv'), 'w').write('via /proc/self/root')", N, B),
    "symlink-outside": ("open('outside_link', 'w').write('through a symlink')", B, B),
    "write-outside-layers": ("open(os.path.join(os.path.dirname(os.path.realpath('outside_link')), 'new.txt'), 'w')", B, B),
    "rename-directory": ("os.rename('sub', 'sub2')", B, B),  # overlayfs: EXDEV (userxattr has no redirect_dir)
    "shutil.move-directory": ("shutil.move('sub', 'sub2')\nassert os.path.exists('sub2/inner.txt')", N, B),
    "already-open-file": ("fh.write('through an inherited file object\\n')\nfh.flush()", N, N),
    "inherited-fd-dup-write": ("os.write(os.dup(fh.fileno()), b'through a dup of an inherited descriptor')", N, N),
    "inherited-read-seek": ("rfh.seek(0)\nassert rfh.read().startswith('a,b')\nos.lseek(rfh.fileno(), 0, 2)", N, N),
    "memmap-write": ("mm[:] = 7\nmm.flush()\nassert int(mm.sum()) == 7 * 4096", N, N),
    "shared-array-write": ("with shared.get_lock():\n    shared[0] = 5\nassert shared[0] == 5", N, N),
    "huge-shared-mapping-write": ("huge[0] = 7", B, B),  # SIGSEGV on the read-only copy: blocked, not a crash
    "subprocess.run": ("subprocess.run(['touch', 'made_by_subprocess'], check=True)\nassert os.path.exists('made_by_subprocess')", N, B),
    "subprocess-shell-write": ("subprocess.run('echo hi > shell_made.txt && cat shell_made.txt', shell=True, check=True)", N, B),
    "os.system": ("assert os.system('touch made_by_system') == 0", N, B),
    "shell-escape": ("!touch made_by_bang", N, B),
    "os.execv": ("os.execv('/usr/bin/touch', ['touch', 'made_by_exec'])", B, B),
    "os.fork": ("pid = os.fork()\nif pid == 0:\n    open('made_by_fork', 'w').write('x')\n    os._exit(0)\n"
                "os.waitpid(pid, 0)\nassert open('made_by_fork').read() == 'x'", N, B),
    "multiprocessing-child-write": ("def w(path):\n    open(path, 'w').write('child')\n"
                                    "p = mp.Process(target=w, args=('made_by_child.txt',))\np.start()\np.join()\n"
                                    "assert p.exitcode == 0 and open('made_by_child.txt').read() == 'child'", N, B),
    "joblib-workers-write": ("from joblib import Parallel, delayed\n"
                             "def w(i):\n    open(f'made_by_worker_{i}.txt', 'w').write(str(os.getpid()))\n    return os.getpid()\n"
                             "pids = Parallel(n_jobs=2)(delayed(w)(i) for i in range(4))\n"
                             "assert all(os.path.exists(f'made_by_worker_{i}.txt') for i in range(4))", N, B),
    "dataloader-workers-write": ("import torch\nfrom torch.utils.data import DataLoader, Dataset\n"
                                 "class D(Dataset):\n    def __len__(self):\n        return 8\n"
                                 "    def __getitem__(self, i):\n        open(f'made_by_loader_{i}.txt', 'w').write('x')\n"
                                 "        return torch.tensor([float(i)])\n"
                                 "total = sum(float(b.sum()) for b in DataLoader(D(), batch_size=2, num_workers=2))\n"
                                 "assert total == 28.0", N, B),
    "socket-connect": ("s = socket.create_connection(('127.0.0.1', PORT), timeout=1)\ns.sendall(b'hello')", B, B),
    "udp-sendto": ("u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nu.sendto(b'hello', ('127.0.0.1', UDP_PORT))", B, B),
    "urllib": ("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:PORT/', timeout=1).read()", B, B),
    "ctypes-socket-connect": ("s = libc.socket(2, 1, 0)\nmust(-1 if s < 0 else 0, 'socket')", B, B),
    "worker-network": ("def c(port):\n    socket.create_connection(('127.0.0.1', port), timeout=1).sendall(b'hi')\n"
                       "p = mp.Process(target=c, args=(PORT,))\np.start()\np.join()", N, B),
    "program-network": ("subprocess.run([sys.executable, '-c', 'import socket; socket.create_connection((\"127.0.0.1\", PORT), timeout=1).sendall(b\"hi\")'], check=True)", B, B),
    "program-network-swallowed": ("subprocess.run([sys.executable, '-c', 'import socket\\ntry:\\n    socket.socket().connect((\"127.0.0.1\", PORT))\\nexcept OSError:\\n    pass'], check=True)", B, B),
    "local-service-unix-socket": ("s = socket.socket(socket.AF_UNIX)\ns.connect(UNIX_PATH)\ns.sendall(b'hi')", B, B),
    "kill-kernel": ("os.kill(os.getppid(), signal.SIGTERM)", B, B),  # the kernel's parent: refused, reported
    "mount-over-cwd": ("must(libc.mount(b'none', os.getcwd().encode(), b'tmpfs', 0, None), 'mount')", B, B),
    "umount-layer": ("must(libc.umount2(os.getcwd().encode(), 2), 'umount2')", B, B),
    "unshare": ("must(libc.unshare(0x10000000 | 0x20000), 'unshare')", B, B),
    "ptrace-kernel": ("must(-1 if libc.ptrace(16, os.getppid() or 1, 0, 0) < 0 else 0, 'ptrace')", B, B),
}


@pytest.fixture(scope="module")
def prepared(conn, watcher, workdir, listener, outside):
    res = conn.run_cell(SETUP)
    assert res.status == "ok", res
    settle(watcher, conn)  # the setup's messages all in before the watcher is cleared
    watcher.clear()
    return {"state": kernel_state(conn), "tree": tree_hash(workdir), "outside": tree_hash(outside)}


def _check_nothing_changed(name, conn, watcher, workdir, listener, outside, prepared):
    time.sleep(0.05)
    assert tree_hash(workdir) == prepared["tree"], f"{name} changed the working directory"
    assert tree_hash(outside) == prepared["outside"], f"{name} changed a directory outside the layers"
    for p in ("/tmp/crane_sandbox_should_not_exist.txt", "/dev/shm/crane_sandbox_should_not_exist",
              os.path.expanduser("~/.config/crane_sandbox_should_not_exist")):
        assert not Path(p).exists(), f"{name} created {p}"
    assert listener.received == [], f"{name} reached the loopback listener: {listener.received}"
    assert watcher.outputs() == [], f"{name} sent output to iopub: {watcher.outputs()}"
    assert kernel_state(conn) == prepared["state"]


@pytest.mark.parametrize("mode", ["layered", "blocking"])
@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_side_effect(name, mode, conn, watcher, workdir, listener, outside, prepared):
    source, layered_expect, blocking_expect = ATTEMPTS[name]
    if "import torch" in source:
        skip_without_torch_in(conn)
    source = source.replace("UDP_PORT", str(listener.udp_port)).replace("PORT", str(listener.port))
    source = source.replace("UNIX_PATH", repr(listener.unix_path))
    v = speculate(conn, source, budget_s=30.0, layer=mode)
    assert v.mode == mode, (v.mode, v.mode_reason)
    assert v.verdict != "crash", (name, v)
    assert v.verdict == (layered_expect if mode == "layered" else blocking_expect), (name, v)
    if v.verdict == "blocked":
        assert v.reason, v  # says what was refused
    _check_nothing_changed(name, conn, watcher, workdir, listener, outside, prepared)


def test_at_least_forty_attempts():
    assert len(ATTEMPTS) >= 40


def test_inherited_objects_unchanged_in_the_kernel(conn, prepared):
    """The kernel's own memmap, shared array and open files saw none of the sandbox's writes."""
    for mode in ("layered", "blocking"):
        for name in ("memmap-write", "shared-array-write", "already-open-file", "inherited-read-seek"):
            assert speculate(conn, ATTEMPTS[name][0], budget_s=10.0, layer=mode).verdict == "no-crash"
    assert conn.evaluate("int(mm.sum())") == 0
    assert conn.evaluate("shared[0]") == 0
    assert conn.evaluate("huge[0]") == 0
    assert conn.evaluate("(fh.closed, fh.tell() == os.path.getsize('log.txt'))") == (False, True)
    assert conn.evaluate("rfh.tell()") == 0
    assert conn.evaluate("len(df)") == 2


def test_scratch_directory_is_writable_and_private(conn, workdir, prepared):
    src = (
        "import tempfile\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as t:\n"
        "    t.write('scratch')\n"
        "print(open(t.name).read(), t.name.startswith(tempfile.gettempdir()))"
    )
    for mode in ("layered", "blocking"):
        v = speculate(conn, src, budget_s=5.0, layer=mode)
        assert v.verdict == "no-crash", v
        assert v.stdout.strip() == "scratch True"
    assert tree_hash(workdir) == prepared["tree"]
