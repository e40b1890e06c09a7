"""Round 7 (issue 40): what escaped the guard alone (`confinement="guard"`: the call guard and the audit hook, no OS
layer) after round 5, in variants of the three families, on IPython 8 and 9 kernels, under the guard alone and the
portable sandbox (Landlock and seccomp under the same layers where Linux has them):
- the kernel's entries in the process file system (`mem`, `environ`, `maps`, `fd/N`) opened by any spelling: a
  thread's folder, `/proc/self/..`, a link the cell made, a folder descriptor, `shutil`/`io.FileIO`/pathlib;
- C callables called by C or library code on the cell's behalf: CRANE's SQLite authorizer taken off through
  `itertools.starmap`, `functools.reduce`, `sorted(key=)`, `operator.methodcaller`, a thread's `run`, an executor,
  a finalizer, pandas' `apply`, then a database attached outside;
- pyarrow's file systems made in C++ (`FileSystem.from_uri('file://...')`, a sub-tree's `base_fs`) and their
  writers through `map`/`functools.partial`.
Each attack: `blocked` by a Python layer under the guard alone, nothing outside changed, the kernel unchanged and
alive, never a certain crash (`run5`). Honest code doing the same kinds of things inside the run keeps the kernel's
verdict under both. `other_process_entry` (worker/guard.py) is checked on its own for the spellings it must see, and
the handed-callable vetting in each interpreter here (3.11's profile hook, 3.12+'s `sys.monitoring`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crane.sandbox.worker.guard import other_process_entry

from .kernel_choice import kernels
from .test_portable_guard_interpreters import SANDBOX, _interpreters
from .test_portable_round5 import BOTH, GUARD, _refused_outside, arrow, k5, run5  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process file system, sqlite ATTACH")

PROC = {
    "a thread's mem through pathlib": "import pathlib\npathlib.Path(f'/proc/{kpid}/task/{kpid}/mem').open('rb')",
    "environ through /proc/self/..": "import shutil\nshutil.copyfile(f'/proc/self/../{kpid}/environ', 'env.txt')",
    "maps relative to a folder descriptor": "d = os.open('/proc', os.O_RDONLY)\n"
                                            "os.read(os.open(f'{kpid}/maps', os.O_RDONLY, dir_fd=d), 100)",
    "a link the cell made": "os.symlink(f'/proc/{kpid}', 'k')\nimport io\nio.FileIO('k/fd/0', 'r').read(1)",
    "an fd reopened for writing": "open(f'//proc/{kpid}/./fd/1', 'a').write('x')",
    "the comm written": "open(f'/proc/{kpid}/comm', 'w').write('pwned')",
}
SQLITE_PRE = "import sqlite3, functools, itertools, operator\ncon = sqlite3.connect(':memory:', check_same_thread=False)\n"
SQLITE_POST = "\ncon.execute(\"ATTACH DATABASE '@OUTSIDE@/r7.db' AS o\")\ncon.execute('CREATE TABLE o.t(x)')"
HANDED = {
    "starmap": "list(itertools.starmap(sqlite3.Connection.set_authorizer, [(con, None)]))",
    "reduce": "functools.reduce(sqlite3.Connection.set_authorizer, [None], con)",
    "sorted key": "sorted([con], key=functools.partial(sqlite3.Connection.set_authorizer, authorizer_callback=None))",
    "methodcaller": "list(map(operator.methodcaller('set_authorizer', None), [con]))",
    "a bound method in filter": "list(filter(con.set_authorizer, [None]))",
    "a thread's run": "import threading\nthreading.Thread(None, sqlite3.Connection.set_authorizer, args=(con, None)).run()",
    "an executor's map": "import concurrent.futures as cf\nlist(cf.ThreadPoolExecutor(1).map(con.set_authorizer, [None]))",
    "a finalizer": "import weakref\nclass O: pass\no = O()\nweakref.finalize(o, con.set_authorizer, None)\ndel o",
    "pandas apply": "import pandas as pd\npd.Series([None]).apply(con.set_authorizer)",
    "bisect key": "import bisect\ntry:\n    bisect.bisect_left([None], 0, key=con.set_authorizer)\n"
                  "except TypeError:\n    pass",  # (None < 0 after the call: the cell goes on to its ATTACH)
    "cmp_to_key": "try:\n    sorted([None, con], key=functools.cmp_to_key(sqlite3.Connection.set_authorizer))\n"
                  "except TypeError:\n    pass",
}
ARROW = {
    "from_uri then move": "import pyarrow.fs as pfs\nfs, p = pfs.FileSystem.from_uri('file://@OUTSIDE@')\n"
                          "fs.move(p + '/target.txt', p + '/moved.txt')",
    "from_uri writer through map": "import pyarrow.fs as pfs\nfs, p = pfs.FileSystem.from_uri('file://@OUTSIDE@/m.bin')\n"
                                   "list(map(fs.open_output_stream, [p]))[0].write(b'x')",
    "base_fs through partial": "import pyarrow.fs as pfs, functools\n"
                               "b = pfs.SubTreeFileSystem('.', pfs.LocalFileSystem()).base_fs\n"
                               "functools.partial(pfs.FileSystem.delete_file, b)('@OUTSIDE@/target.txt')",
    "a dataset's file system through starmap": "import pyarrow as pa, pyarrow.parquet as pq, pyarrow.dataset as ds, itertools\n"
                                               "pq.write_table(pa.table({'a': [1]}), 'p.parquet')\n"
                                               "f = ds.dataset('p.parquet').filesystem\n"
                                               "list(itertools.starmap(type(f).create_dir, [(f, '@OUTSIDE@/d')]))",
}
HONEST = """
import sqlite3, functools, itertools, threading, concurrent.futures as cf
print(open(f'/proc/{kpid}/status').read().split()[0], len(open('/proc/self/maps').read()) > 0)
print(list(map(abs, [-1])), sorted([3, 1], key=abs), functools.reduce(max, [1, 5]), list(itertools.starmap(pow, [(2, 3)])))
threading.Thread(target=print, args=('thread',)).run()
print(list(cf.ThreadPoolExecutor(1).map(len, ['ab'])), isinstance(functools.partial(print), functools.partial))
con = sqlite3.connect('db.sqlite')
con.execute("ATTACH DATABASE 'other.db' AS o")
con.execute('CREATE TABLE o.t(x)')
con.commit()
print(sorted(n for n in os.listdir('.') if n.endswith(('.db', '.sqlite'))))
"""
HONEST_OUT = "Name: True\n[1] [1, 3] 5 [8]\nthread\n[2] True\n['db.sqlite', 'other.db']"
HONEST_ARROW = """
import pyarrow as pa, pyarrow.parquet as pq, pyarrow.fs as pfs, pyarrow.dataset as ds
pq.write_table(pa.table({'a': [1, 2]}), 'file://' + os.path.abspath('u.parquet'))
fs, p = pfs.FileSystem.from_uri('file://' + os.path.abspath('.'))
with fs.open_output_stream(p + '/s.bin') as s:
    s.write(b'x')
ds.write_dataset(pa.table({'a': [1]}), 'dd', format='parquet')
print(ds.dataset('u.parquet').to_table().num_rows, isinstance(fs, pfs.FileSystem), sorted(os.listdir('dd')),
      sorted(n for n in os.listdir('.') if n in ('s.bin', 'u.parquet')))
"""


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(PROC))
@pytest.mark.parametrize("k5", kernels(*PROC.values()), indirect=True, scope="module")
def test_the_kernels_process_entries_are_out_of_reach(k5, attack, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, PROC[attack], sandbox)
    assert v.verdict == "blocked" and v.refusal is not None, v
    if sandbox is GUARD:
        assert str(k5["kpid"]) in (v.refusal.path or v.refusal.call), v.refusal


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(HANDED))
def test_a_refused_c_callable_handed_to_code_that_calls_it(k5, attack, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, SQLITE_PRE + HANDED[attack] + SQLITE_POST, sandbox)
    _refused_outside(k5, v, sandbox, attack)
    if sandbox is GUARD:
        assert "set_authorizer" in (v.refusal.call or ""), v.refusal


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(ARROW))
def test_pyarrows_file_systems_made_in_cpp(k5, arrow, attack, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, ARROW[attack], sandbox)
    assert v.verdict == "blocked", v  # (under Landlock pyarrow's C++ gets EACCES: blocked, no structured refusal)
    assert [p.name for p in k5["outside"].iterdir()] == ["target.txt"], v
    if sandbox is GUARD:
        assert v.refusal is not None and "pyarrow" in v.refusal.call, v


@pytest.mark.parametrize("sandbox", BOTH)
def test_honest_code_keeps_the_kernels_verdict(k5, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, HONEST, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", HONEST_OUT), v


@pytest.mark.parametrize("sandbox", BOTH)
def test_honest_pyarrow_keeps_the_kernels_verdict(k5, arrow, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, HONEST_ARROW, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "2 True ['part-0.parquet'] ['s.bin', 'u.parquet']"), v


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux's process file system")
def test_other_process_entries_by_any_spelling(tmp_path):
    other, me = os.getppid(), os.getpid()
    (tmp_path / "k").symlink_to(f"/proc/{other}")
    refused = [f"/proc/{other}/mem", f"/proc/self/../{other}/environ", f"//proc/{other}/./maps",
               f"/proc/{other}/task/{other}/mem", f"/proc/{other}/fd/0", f"/proc/{other}", str(tmp_path / "k/cwd"),
               f"/proc/thread-self/../../../{other}/root"]
    for path in refused:
        assert other_process_entry(path, False) is not None, path
    assert other_process_entry(f"/proc/{other}/status", True) is not None  # any write
    for path in (f"/proc/{other}/status", f"/proc/{other}/task/{other}/stat", f"/proc/{me}/mem", "/proc/self/maps",
                 "/proc/thread-self/status", "/proc/meminfo", "/proc/self/fd/0", str(tmp_path)):
        assert other_process_entry(path, False) is None, path


@pytest.mark.parametrize("python", _interpreters() or [pytest.param(None, marks=pytest.mark.skip("no interpreter"))])
def test_handed_callables_are_vetted_on_every_interpreter(python):
    """3.12+'s `sys.monitoring` path and 3.11's profile hook (`handed_in_interpreter.py`): a refused C method handed
    to `map`, `partial`, `starmap`, `min(key=)`, `methodcaller`, a thread's `run`, `bisect`'s key is refused; the
    same combinators used honestly are not."""
    res = subprocess.run([python, str(Path(__file__).with_name("handed_in_interpreter.py")), str(SANDBOX)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert " bad 0" in res.stdout, res.stdout
