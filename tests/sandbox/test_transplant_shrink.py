"""Transplant runs shrink large values in the kernel BEFORE copying them (kernel/miniature's rules: consistent row
subsets): in a miniature run, and when the values a cell reads hold more than the copy limit. The verdict says
how it was reached (transplant, what was copied, what was shrunk and why); a crash on the kept rows is certain
unless the smaller data may explain it (a label the subset dropped: inconclusive); the kernel is unchanged. On
IPython 8 and 9 kernels (pandas 2 and 3)."""

from __future__ import annotations

import os

import msgspec
import pytest

from crane.commands.check_text import _scale
from crane.engine import CellResult
from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.scale import miniature_spec
from crane.sandbox.transplant import transplant
from crane.sandbox.verdict import verdict_markdown

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")

SETUP = """
import numpy as np, pandas as pd, random
np.random.seed(1)
random.seed(1)
n = 200_000
df = pd.DataFrame(np.random.rand(n, 8), columns=list('abcdefgh'))
df['id'] = [f'row-{i}' for i in range(n)]
df['label'] = np.arange(n) % 3
y = df['label'].to_numpy()
lookup = pd.DataFrame({'label': [0, 1, 2], 'name': ['x', 'y', 'z']})
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("shrink"), python=kernel_python(request.param))
    assert k.connection.run_cell(SETUP, timeout=120).status == "ok"
    yield k.connection
    k.shutdown()


def _run(conn, source: str, monkeypatch, copy_mb: str = "2", **kw):
    use_options(monkeypatch, transplant_copy_mb=int(copy_mb))
    with Untouched(conn) as watch:
        v = transplant(conn, source, 60.0, **kw)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    return v


def test_values_over_the_copy_limit_are_shrunk_before_the_copy(kernel, monkeypatch):
    v = _run(kernel, "m = df.merge(lookup, on='label')\nassert len(m) == len(y)\nm['name'].iloc[0]", monkeypatch)
    assert v.verdict == "no-crash" and v.mode == "transplant" and v.scale == "miniature", v
    t = v.transplant
    assert t is not None and t.shrunk and "MiB a transplant copies whole" in t.shrunk, t
    assert t.raw_bytes > 16_000_000 and t.bytes < t.raw_bytes / 4, t  # the copy is the subset's
    kept = {k.name: (k.rows, k.of) for k in v.kept}
    assert kept["df"][1] == 200_000 and kept["df"] == kept["y"] and "lookup" not in kept, kept  # aligned; small whole
    how = v.how()
    assert "shrunk before the copy" in how and "kept" in how and "200,000 rows of df, y" in how, how
    assert "shrunk before the copy" in verdict_markdown(v)
    result = CellResult(cell=1, prediction="no-crash", sandbox=v)
    back = msgspec.json.decode(msgspec.json.encode(result), type=CellResult).sandbox  # crane check --json
    assert back is not None and back == v and back.transplant is not None and back.transplant.shrunk == t.shrunk and back.kept
    assert "shrunk first: the values it reads hold" in _scale(v)  # crane check's text
    # the same cell under a limit it fits in: copied whole
    whole = _run(kernel, "df['a'].sum()", monkeypatch, copy_mb="0")
    assert whole.verdict == "no-crash" and whole.scale == "full" and not whole.transplant.shrunk, whole


def test_crashes_on_kept_rows_are_certain_unless_a_dropped_label_explains_them(kernel, monkeypatch):
    v = _run(kernel, "df['nope']", monkeypatch)  # a column the data never had: the real KeyError
    assert v.verdict == "crash" and v.ename == "KeyError" and v.scale == "miniature", v
    assert kernel.run_cell("df['nope']").status == "error"
    src = "df.set_index('id').loc[[f'row-{i}' for i in range(0, 200_000, 997)]].shape"
    assert kernel.run_cell(src).status == "ok"
    v = _run(kernel, src, monkeypatch)  # labels the subset dropped: inconclusive, never a crash
    assert v.verdict == "timeout" and "artefact" in (v.reason or ""), v
    assert "full state was not copied" in (v.reason or ""), v.reason


def test_a_miniature_run_shrinks_in_the_kernel(kernel, monkeypatch):
    v = _run(kernel, "df.groupby('label')['a'].mean().shape", monkeypatch, copy_mb="0",
             miniature=miniature_spec(100.0))
    assert v.verdict == "no-crash" and v.scale == "miniature" and v.transplant.shrunk is None, v
    assert v.transplant.bytes < 10_000_000 and {k.name for k in v.kept} == {"df"}, v
    v = _run(kernel, "lookup.shape", monkeypatch, copy_mb="0", miniature=miniature_spec(100.0))
    assert v.verdict == "timeout" and "no miniature run" in (v.reason or ""), v


UNREADIED = """
import sys, scipy.sparse.linalg  # scikit-learn imports it: ARPACK/PROPACK wrappers built by f2py
_mro_slot = type.__dict__['__mro__']
assert any(_mro_slot.__get__(type(v), type) is None
           for n, m in list(sys.modules.items()) if n.startswith('scipy.sparse')
           for v in list(getattr(m, '__dict__', {}).values())), 'no object of a type never readied here'
"""


def test_shrinking_looks_past_compiled_types_never_readied(tmp_path, monkeypatch):
    """SciPy's f2py modules (scipy.sparse.linalg's ARPACK and PROPACK, loaded by scikit-learn) hold objects of a
    static type that was never readied, whose `__mro__` slot reads None. Shrinking checks that the libraries it
    calls are the notebook's nowhere (kernel/proof's `_untouched`, scanning scipy.sparse) and took that None for
    a tuple: every miniature run of a notebook that imported scikit-learn was lost ("no miniature run: TypeError:
    'NoneType' object is not iterable"). The bench environment's SciPy (1.13) has such types; 1.17's has none."""
    k = start_kernel(tmp_path, python=kernel_python("ipython8"))
    try:
        conn = k.connection
        assert conn.run_cell(SETUP, timeout=120).status == "ok"
        assert conn.run_cell(UNREADIED, timeout=120).status == "ok"
        v = _run(conn, "df.groupby('label')['a'].mean().shape", monkeypatch, copy_mb="0",
                 miniature=miniature_spec(100.0))
        assert v.verdict == "no-crash" and v.scale == "miniature", v
        assert {k.name for k in v.kept} == {"df"} and v.transplant.bytes < 10_000_000, v
        v = _run(conn, "m = df.merge(lookup, on='label')\nassert len(m) == len(y)", monkeypatch)  # over the limit
        assert v.verdict == "no-crash" and v.transplant.shrunk and {k.name for k in v.kept} == {"df", "y"}, v
    finally:
        k.shutdown()


def test_a_large_value_a_cell_names_only_in_a_string_is_left_out_not_shrinking_the_rest(kernel, monkeypatch):
    """A name read by a string is a guess (kernel/export._guessed_objects): taken where it fits the copy; a large one
    it does not fit is left out, and the values the cell reads by name are copied whole, not shrunk because of it."""
    v = _run(kernel, "print(len(lookup), 'df' in globals())", monkeypatch)
    assert v.verdict == "no-crash" and v.scale == "full" and not v.transplant.shrunk, v
    copied = {c.split(" (")[0] for c in v.transplant.copied}
    assert "lookup" in copied and "df" not in copied, v.transplant.copied
