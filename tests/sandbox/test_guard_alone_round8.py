"""Round 8 (issue 40): what still got past the guard alone (`confinement="guard"`: the call guard and the audit hook,
no OS layer) after round 7, in variants written for it, on IPython 8 and 9 kernels, under the guard alone and the
portable sandbox (Landlock and seccomp under the same layers where Linux has them):
- a refused C method handed to C callers on no list (`list.sort(key=)`, a `property`, `functools.lru_cache`,
  `numpy.frompyfunc`, the method taken from its type's dict or `__mro__`): the methods are vetted in their types
  (worker/guard.vet_c_methods), whoever calls them;
- pyarrow file systems reached other ways (`pyarrow._fs`'s originals, `FileSystem.from_uri` of the Cython module, a
  dataset's `filesystem`, a sub-tree over the original class), their writers called directly: pyarrow's
  `FileSystem` vetted in the class (worker/arrow.py), through the sub-trees to the local path;
- the kernel's connection file read natively by pyarrow or polars (`pa.memory_map`, `pa.OSFile` and its original
  class, `pa.input_stream`, `pyarrow.json`, a `LocalFileSystem` stream, `pl.read_csv`, `pl.scan_ndjson` of a glob,
  `pd.read_csv(engine='pyarrow')`): announced to the audit layer as the reads they are.
Each attack: `blocked`, nothing outside changed, the kernel unchanged and alive, never a certain crash (`run5`).
Honest code using the same functions inside the run keeps the kernel's verdict under both. The handed-method
vetting in each interpreter (3.11's profile hook, 3.12+'s `sys.monitoring`, which scans no arguments) is run by
`handed_anywhere_in_interpreter.py`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .kernel_choice import kernels
from .test_portable_guard_interpreters import SANDBOX, _interpreters
from .test_portable_round5 import BOTH, GUARD, _refused_outside, arrow, k5, run5  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sqlite ATTACH, the connection file")

SQLITE_PRE = ("import sqlite3, functools, operator\ncon = sqlite3.connect(':memory:', check_same_thread=False)\n"
              "class Yes:\n    def __call__(self, *a):\n        return 0\n")
SQLITE_POST = "\ncon.execute(\"ATTACH DATABASE '@OUTSIDE@/r8.db' AS o\")\ncon.execute('CREATE TABLE o.t(x)')"
HANDED = {
    "list.sort key": "[None].sort(key=con.set_authorizer)",
    "a property": "class P(Yes):\n    a = property(con.set_authorizer)\nP().a",
    "the type's dict in a sort key": "[con].sort(key=lambda c: sqlite3.Connection.__dict__['set_authorizer']"
                                      ".__get__(c, sqlite3.Connection)(None))",  # (__get__(c) alone: SIGSEGV in 3.11.7)
    "numpy.frompyfunc": "import numpy as np\nnp.frompyfunc(con.set_authorizer, 1, 1)(np.array([None], dtype=object))",
}
NUMPY = {
    "tofile through map": "import numpy as np\nlist(map(np.arange(3).tofile, ['@OUTSIDE@/a.bin']))",
    "tofile as a sort key": "import numpy as np\n['@OUTSIDE@/b.bin'].sort(key=np.arange(3).tofile)",
}
ARROW = {
    "pyarrow._fs's original LocalFileSystem": "import pyarrow._fs as f\n"
                                               "f.LocalFileSystem.__mro__[1]().delete_file('@OUTSIDE@/target.txt')",
    "the Cython module's from_uri": "import pyarrow._fs as f\nfs, p = f.FileSystem.from_uri('file://@OUTSIDE@')\n"
                                    "fs.move(p + '/target.txt', p + '/moved.txt')",
    "a dataset's file system": "import pyarrow as pa, pyarrow.parquet as pq, pyarrow.dataset as ds\n"
                               "pq.write_table(pa.table({'a': [1]}), 'p8.parquet')\n"
                               "ds.dataset('p8.parquet').filesystem.create_dir('@OUTSIDE@/d')",
    "a sub-tree over the original class": "import pyarrow.fs as pfs\n"
                                          "s = pfs.SubTreeFileSystem.__mro__[1]('@OUTSIDE@', "
                                          "pfs.LocalFileSystem.__mro__[1]())\n"
                                          "s.open_output_stream('w.bin').write(b'x')",
    "write_dataset through a sub-tree": "import pyarrow as pa, pyarrow.fs as pfs, pyarrow.dataset as ds\n"
                                        "s = pfs.SubTreeFileSystem.__mro__[1]('@OUTSIDE@', pfs.LocalFileSystem())\n"
                                        "ds.write_dataset(pa.table({'a': [1]}), 'out', format='parquet', filesystem=s)",
    "MemoryMappedFile.create": "import pyarrow as pa\npa.MemoryMappedFile.create('@OUTSIDE@/c.bin', 8)",
    "a sub-tree's writer as a sort key": "import pyarrow.fs as pfs\n"
                                         "s = pfs.SubTreeFileSystem('.', pfs.LocalFileSystem()).base_fs\n"
                                         "['@OUTSIDE@/target.txt'].sort(key=s.delete_file)",
}
READS = {
    "pa.memory_map": "import pyarrow as pa\nprint(pa.memory_map(CONN).read())",
    "pa.OSFile": "import pyarrow as pa\nprint(pa.OSFile(CONN).read())",
    "pa.OSFile's original class": "import pyarrow as pa\nprint(pa.OSFile.__mro__[1](CONN, 'r').read())",
    "pa.input_stream": "import pyarrow as pa\nprint(pa.input_stream(CONN).read())",
    "pyarrow.json": "import pyarrow.json as pj\nprint(pj.read_json(CONN))",
    "a LocalFileSystem stream": "import pyarrow._fs as f\nprint(f.FileSystem.from_uri('file://' + CONN)[0]"
                                ".open_input_stream(CONN).read())",
    "pl.read_csv": "import polars as pl\nprint(pl.read_csv(CONN, has_header=False, separator='\\x01'))",
    "pl.scan_ndjson of a glob": "import polars as pl\nprint(pl.scan_ndjson(CONN[:-6] + '*' + CONN[-5:]).collect())",
    "pd.read_csv with pyarrow": "import pandas as pd\nprint(pd.read_csv(CONN, engine='pyarrow', sep='\\x01'))",
}
HONEST = """
import sqlite3, functools, numpy as np
con = sqlite3.connect('h8.sqlite')
[3, -1].sort(key=functools.lru_cache(abs))
np.arange(3).tofile('a.bin')
print(np.fromfile('a.bin', dtype=np.arange(3).dtype).tolist(), con.execute('select 1').fetchall())
"""
HONEST_ARROW = """
import pyarrow as pa, pyarrow._fs as f, pyarrow.fs as pfs, pyarrow.dataset as ds, pyarrow.parquet as pq, polars as pl
pq.write_table(pa.table({'a': [1, 2]}), 'h.parquet')
fs = ds.dataset('h.parquet').filesystem
with fs.open_output_stream(os.path.abspath('s.bin')) as s:
    s.write(b'xy')
sub = pfs.SubTreeFileSystem(os.path.abspath('.'), f.LocalFileSystem.__mro__[1]())
sub.create_dir('sd')
with sub.open_output_stream('sd/t.bin') as s:
    s.write(b'z')
pl.DataFrame({'b': [3]}).write_csv('h.csv')
ds.write_dataset(pa.table({'a': [1]}), 'dd', format='parquet', filesystem=sub)
print(pa.memory_map('s.bin').read(), pa.OSFile('sd/t.bin').read(), pl.read_csv('h.csv').shape,
      pl.scan_parquet('h*.parquet').collect().shape, pq.read_table('h.parquet').num_rows,
      sorted(x.path.rsplit('/', 1)[-1] for x in fs.get_file_info(pfs.FileSelector(os.path.abspath('sd')))),
      os.listdir('dd'))
"""
HONEST_ARROW_OUT = "b'xy' b'z' (1, 1) (2, 1) 2 ['t.bin'] ['part-0.parquet']"


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(HANDED))
@pytest.mark.parametrize("k5", kernels(*HANDED.values()), indirect=True, scope="module")
def test_a_refused_c_method_handed_to_any_caller(k5, attack, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, SQLITE_PRE + HANDED[attack] + SQLITE_POST, sandbox)
    _refused_outside(k5, v, sandbox, attack)
    if sandbox is GUARD:
        assert "set_authorizer" in (v.refusal.call or ""), v.refusal


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(NUMPY))
def test_a_c_writer_handed_to_any_caller(k5, attack, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, NUMPY[attack], sandbox)
    _refused_outside(k5, v, sandbox, attack)
    if sandbox is GUARD:
        assert "tofile" in (v.refusal.call or ""), v.refusal


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(ARROW))
def test_pyarrow_file_systems_reached_any_way(k5, arrow, attack, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, ARROW[attack], sandbox)
    assert v.verdict == "blocked", v
    assert [p.name for p in k5["outside"].iterdir()] == ["target.txt"], v
    if sandbox is GUARD:
        assert v.refusal is not None and "pyarrow" in v.refusal.call, v


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(READS))
def test_the_connection_file_read_natively(k5, arrow, attack, sandbox):  # noqa: F811 (fixtures)
    conn_file = k5["conn"].evaluate("__import__('ipykernel.connect').connect.get_connection_file()")
    v = run5(k5, f"CONN = {conn_file!r}\n" + READS[attack], sandbox)
    assert v.verdict == "blocked", v
    assert '"key"' not in v.stdout and "signature_scheme" not in v.stdout, v.stdout
    if sandbox is GUARD:
        assert v.refusal is not None and "connection file" in v.refusal.call, v.refusal


@pytest.mark.parametrize("sandbox", BOTH)
def test_honest_numpy_and_sqlite_keep_the_kernels_verdict(k5, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, HONEST, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", "[0, 1, 2] [(1,)]"), v


@pytest.mark.parametrize("sandbox", BOTH)
def test_honest_pyarrow_and_polars_keep_the_kernels_verdict(k5, arrow, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, HONEST_ARROW, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", HONEST_ARROW_OUT), v


@pytest.mark.parametrize("python", _interpreters() or [pytest.param(None, marks=pytest.mark.skip("no interpreter"))])
def test_handed_methods_are_vetted_in_their_types_on_every_interpreter(python):
    res = subprocess.run([python, str(Path(__file__).with_name("handed_anywhere_in_interpreter.py")), str(SANDBOX)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert " bad 0" in res.stdout, res.stdout
