"""Side effects attempted in the sandbox are refused and reported as "blocked"; nothing changes on disk,
nothing reaches a listening loopback socket, nothing reaches the notebook (iopub), the kernel is untouched."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from crane.sandbox import speculate

from ..sacred import kernel_state
from .conftest import tree_hash

SETUP = """
import os, sys, shutil, pathlib, pickle, sqlite3, socket, subprocess, signal, tempfile
import numpy as np, pandas as pd
import matplotlib.pyplot as plt
df = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})
arr = np.arange(10)
fh = open('log.txt', 'a')
plt.plot([1, 2, 3])
"""

ATTEMPTS = {
    "open-w": "open('out.txt', 'w').write('x')",
    "open-append": "with open('data.csv', 'a') as f:\n    f.write('5,6\\n')",
    "pathlib-write_text": "pathlib.Path('out.txt').write_text('x')",
    "os.remove": "os.remove('data.csv')",
    "pathlib-unlink": "pathlib.Path('data.csv').unlink()",
    "os.rename": "os.rename('data.csv', 'moved.csv')",
    "shutil.rmtree": "shutil.rmtree('sub')",
    "os.mkdir": "os.mkdir('newdir')",
    "os.chmod": "os.chmod('data.csv', 0o777)",
    "os.truncate": "os.truncate('data.csv', 0)",
    "os.symlink": "os.symlink('data.csv', 'link.csv')",
    "shutil.copy": "shutil.copy('data.csv', 'copy.csv')",
    "DataFrame.to_csv": "df.to_csv('out.csv')",
    "np.save": "np.save('arr.npy', arr)",
    "pickle.dump": "with open('obj.pkl', 'wb') as f:\n    pickle.dump(df, f)",
    "sqlite3-file": "con = sqlite3.connect('db.sqlite')\ncon.execute('create table t (x)')\ncon.commit()",
    "socket-connect": "s = socket.create_connection(('127.0.0.1', PORT), timeout=1)\ns.sendall(b'hello')",
    "udp-sendto": "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nu.sendto(b'hello', ('127.0.0.1', UDP_PORT))",
    "urllib": "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:PORT/', timeout=1).read()",
    "subprocess.run": "subprocess.run(['touch', 'made_by_subprocess'])",
    "os.system": "os.system('touch made_by_system')",
    "os.execv": "os.execv('/usr/bin/touch', ['touch', 'made_by_exec'])",
    "multiprocessing": "import multiprocessing as mp\np = mp.Process(target=print)\np.start()\np.join()",
    "os.fork": "pid = os.fork()\nif pid == 0:\n    os._exit(0)",
    "already-open-file": "fh.write('through an inherited file object\\n')\nfh.flush()",
    "plt.savefig": "plt.savefig('fig.png')",
    "shell-escape": "!touch made_by_bang",
    "writefile-magic": "%%writefile made_by_magic.txt\nhello",
    "kill-kernel": "os.kill(os.getppid(), signal.SIGTERM)",
    "write-outside-cwd": "open('/tmp/crane_sandbox_should_not_exist.txt', 'w').write('x')",
}


@pytest.fixture(scope="module")
def prepared(conn, watcher, workdir, listener):
    res = conn.run_cell(SETUP)
    assert res.status == "ok", res
    time.sleep(0.3)
    watcher.clear()
    return {"state": kernel_state(conn), "tree": tree_hash(workdir)}


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_side_effect_is_blocked(name, conn, watcher, workdir, listener, prepared):
    source = ATTEMPTS[name].replace("UDP_PORT", str(listener.udp_port)).replace("PORT", str(listener.port))
    v = speculate(conn, source, budget_s=5.0)
    assert v.verdict == "blocked", (name, v)
    assert v.reason and ("blocked" in v.reason or "refused" in v.reason), v.reason
    time.sleep(0.05)
    assert tree_hash(workdir) == prepared["tree"], f"{name} changed the working directory"
    assert not Path("/tmp/crane_sandbox_should_not_exist.txt").exists()
    assert listener.received == [], f"{name} reached the loopback listener: {listener.received}"
    assert watcher.outputs() == [], f"{name} sent output to iopub: {watcher.outputs()}"
    assert kernel_state(conn) == prepared["state"]


def test_at_least_twenty_attempts():
    assert len(ATTEMPTS) >= 20


def test_scratch_directory_is_writable_and_private(conn, workdir, prepared):
    src = (
        "import tempfile\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as t:\n"
        "    t.write('scratch')\n"
        "print(open(t.name).read(), t.name.startswith(tempfile.gettempdir()))"
    )
    v = speculate(conn, src, budget_s=5.0)
    assert v.verdict == "no-crash", v
    assert v.stdout.strip() == "scratch True"
    assert tree_hash(workdir) == prepared["tree"]


def test_kernel_still_healthy_after_attempts(conn, prepared):
    # the kernel was not killed/signalled and its open file object still works for the user
    assert conn.evaluate("fh.closed") is False
    assert conn.evaluate("len(df)") == 2
