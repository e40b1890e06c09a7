"""Round 9 (issue 40): pyarrow's and polars' native writers however they are reached, under the guard alone
(`confinement="guard"`: the call guard and the audit hook, no OS layer) and the portable sandbox, on the kernels that
have pyarrow and polars (IPython 9's environment):
- pyarrow's original `OSFile` class (`__mro__[1]` of the module's vetted subclass, an instance's class, the class
  behind `CompressedOutputStream`, `CSVWriter`, the IPC and Feather writers): the class itself makes its writes
  vetted (worker/guard.replace_type_new: its C `tp_new` reached only through a vetting `__new__`);
- Cython classes and functions that open their path in C++ themselves (`pyarrow._parquet.ParquetWriter`,
  `FileMetaData.write_metadata_file`, `pyarrow._orc.ORCWriter`, `pyarrow._fs._copy_files`,
  `pyarrow._dataset._filesystemdataset_write`): vetted in their modules (worker/arrow.py);
- polars' own Rust classes (`df._df.write_json`, `lf._ldf.sink_csv`, `serialize_json`): vetted in the classes.
Each attack: `blocked`, nothing outside changed, the kernel unchanged and alive, never a certain crash (`run5`);
honest code using the same writers inside the run keeps the kernel's verdict.
"""

from __future__ import annotations

import sys

import pytest

from .test_portable_round5 import BOTH, GUARD, arrow, k5, run5  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker's run folder view")

PRE = "import os, pyarrow as pa, pyarrow.parquet as pq, pyarrow.csv as pc, polars as pl\nt = pa.table({'a': [1]})\n"
NATIVE = {
    "OSFile's original class": "pa.OSFile.__mro__[1]('@OUTSIDE@/a.bin', 'w').write(b'x')",
    "OSFile's class from an instance, append": "type(pa.OSFile('r9.bin', 'w')).__mro__[1]('@OUTSIDE@/target.txt',"
                                                " mode='ab').write(b'x')",
    "OSFile with a str subclass mode": "class M(str):\n    def __contains__(self, c):\n        return False\n"
                                       "pa.OSFile.__mro__[1]('@OUTSIDE@/m.bin', M('w')).write(b'x')",
    "a subclass of the original": "class S(pa.OSFile.__mro__[1]):\n    pass\nS('@OUTSIDE@/s.bin', 'wb').write(b'x')",
    "CompressedOutputStream's original": "pa.CompressedOutputStream.__mro__[1]('@OUTSIDE@/c.gz', 'gzip').write(b'x')",
    "CSVWriter's original": "pc.CSVWriter.__mro__[1]('@OUTSIDE@/d.csv', t.schema).write(t)",
    "the ipc writer's Cython class": "import pyarrow.ipc as ipc\nW = ipc.RecordBatchFileWriter.__mro__[1]\n"
                                     "w = W.__new__(W)\nw._open('@OUTSIDE@/k.arrow', t.schema)\nw.write(t)",
    "_parquet.ParquetWriter": "import pyarrow._parquet as P\n"
                              "P.ParquetWriter('@OUTSIDE@/e.parquet', t.schema, writer_engine_version='V2')",
    "write_metadata_file": "pq.write_table(t, 'm.parquet')\n"
                           "pq.read_metadata('m.parquet').write_metadata_file('@OUTSIDE@/m.meta')",
    "_orc.ORCWriter": "import pyarrow._orc as O\nO.ORCWriter().open('@OUTSIDE@/f.orc', file_version='0.12')",
    "_fs._copy_files": "import pyarrow._fs as F\nopen('s.txt', 'w').write('x')\nL = F.LocalFileSystem.__mro__[1]\n"
                       "F._copy_files(L(), os.path.abspath('s.txt'), L(), '@OUTSIDE@/g.txt', 1024, False)",
    "_dataset._filesystemdataset_write": "import pyarrow._dataset as D, pyarrow.dataset as ds, pyarrow._fs as F\n"
                                         "sc = ds.Scanner.from_batches(t.to_batches(), schema=t.schema)\n"
                                         "D._filesystemdataset_write(sc, '@OUTSIDE@/dsw', 'p-{i}.parquet', "
                                         "F.LocalFileSystem.__mro__[1](), ds.DirectoryPartitioning(pa.schema([])), "
                                         "False, ds.ParquetFileFormat().make_write_options(), 1024, None, "
                                         "'overwrite_or_ignore', 900, 0, 0, 1 << 20, True)",
    "polars' _df.write_json": "pl.DataFrame({'a': [1]})._df.write_json('@OUTSIDE@/h.json')",
    "polars' _ldf.sink_ndjson by keyword": "import polars.lazyframe.sink_plan as sp\n"
                                           "sp._sink_ndjson_plan(pl.LazyFrame({'a': [1]}), '@OUTSIDE@/i.json', "
                                           "compression='uncompressed', compression_level=None, check_extension=True,"
                                           " maintain_order=True, storage_options=None, credential_provider=None, "
                                           "sync_on_close=None, mkdir=False).collect()",
    "polars' _ldf.serialize_json": "pl.LazyFrame({'a': [1]})._ldf.serialize_json('@OUTSIDE@/j.json')",
}
HONEST = """
import pyarrow.dataset as ds, pyarrow.fs as pfs, pyarrow.feather as fe
with pa.OSFile.__mro__[1]('o.bin', 'w') as f:
    f.write(b'1')
with pa.CompressedOutputStream.__mro__[1]('c.gz', 'gzip') as f:
    f.write(b'2')
pq.write_table(t, 'h.parquet')
import pyarrow._parquet as P
w = P.ParquetWriter('h2.parquet', t.schema, writer_engine_version='V2')
w.write_table(t)
w.close()
fe.write_feather(t, 'h.feather')
ds.write_dataset(t, 'dd', format='parquet')
pfs.copy_files('h.parquet', os.path.abspath('h3.parquet'))
pl.DataFrame({'b': [3]}).write_json('h.json')
pl.LazyFrame({'b': [1]}).sink_parquet('s.parquet')
print(pa.OSFile('o.bin').read(), pa.CompressedInputStream(pa.OSFile('c.gz'), 'gzip').read(),
      pq.read_table('h3.parquet').num_rows + pq.read_table('h2.parquet').num_rows, fe.read_table('h.feather').num_rows, os.listdir('dd'),
      pl.read_json('h.json').shape, pl.read_parquet('s.parquet').shape)
"""
HONEST_OUT = "b'1' b'2' 2 1 ['part-0.parquet'] (1, 1) (1, 1)"


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("attack", list(NATIVE))
def test_native_writers_reached_any_way(k5, arrow, attack, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, PRE + NATIVE[attack], sandbox)
    assert v.verdict == "blocked", v
    assert [p.name for p in k5["outside"].iterdir()] == ["target.txt"], v
    if sandbox is GUARD:
        assert v.refusal is not None and v.refusal.layer != "landlock", v
        assert ("pyarrow" in v.refusal.call or "polars" in v.refusal.call), v.refusal


@pytest.mark.parametrize("sandbox", BOTH)
def test_honest_native_writers_keep_the_kernels_verdict(k5, arrow, sandbox):  # noqa: F811 (fixtures)
    v = run5(k5, PRE + HONEST, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", HONEST_OUT), v
