"""Miniature runs (real kernel): the large objects a cell reads are replaced, in the sandbox only, by consistent
row subsets that keep NaN rows and every class of low-cardinality columns; exceptions the smaller data may
cause are inconclusive, real ones are crashes; a long cell whose last run outlasted the budget goes straight
to a miniature; the kernel is untouched."""

from __future__ import annotations

import pytest

from crane.sandbox import speculate
from crane.sandbox.scale import miniature_spec, speculate_scaled

from ..sacred import kernel_state, settle

SETUP = """
import time, numpy as np, pandas as pd, torch
from torch.utils.data import DataLoader, TensorDataset
rng = np.random.default_rng(0)
N = 10000
df = pd.DataFrame({'x': rng.normal(size=N), 'cls': rng.choice(['a', 'b', 'c'], N), 'g': rng.integers(0, 5000, N)},
                  index=pd.RangeIndex(100, 100 + N))
df.loc[105, 'x'] = np.nan
df.loc[9100, 'x'] = np.nan
df.loc[7777, 'cls'] = 'rare'
y = pd.Series(rng.integers(0, 2, N), index=df.index, name='y')
X = rng.normal(size=(N, 3))
labels = torch.as_tensor(rng.integers(0, 4, N))
labels[4321] = 9
loader = DataLoader(TensorDataset(torch.as_tensor(X, dtype=torch.float32), labels), batch_size=64, shuffle=True)
lookup = pd.DataFrame({'k': range(300)})
frames = {'train': df, 'n': 3}
"""

CHECK = """
out = []
out.append(len(df) == len(y) and (df.index == y.index).all())
out.append(len(X) == len(df) and len(loader.dataset) == len(df) and len(labels) == len(df))
out.append(int(df['x'].isna().sum()) == 2 and 'rare' in set(df['cls']))
out.append(9 in set(labels.tolist()))
out.append(len(lookup) == 300 and len(frames['train']) == len(df) and frames['n'] == 3)
sizes = [len(xb) for xb, _ in loader]
out.append(sizes[-1] == 10000 % 64 and all(s == 64 for s in sizes[:-1]))
out.append(isinstance(df, pd.DataFrame) and isinstance(loader, DataLoader) and loader.batch_size == 64)
print(len(df), *out)
"""


@pytest.fixture(scope="module")
def ready(conn, watcher):
    res = conn.run_cell(SETUP, timeout=120)
    assert res.status == "ok", res
    settle(watcher, conn)  # the setup's messages all in before the watcher is cleared
    watcher.clear()
    return kernel_state(conn)


def mini(conn, source: str, budget: float = 20.0, fraction_of: float = 40.0):
    return speculate(conn, source, budget, miniature=miniature_spec(fraction_of, 1.0))


def test_consistent_subsets_keep_nan_rows_and_every_class(conn, watcher, ready):
    v = mini(conn, CHECK)
    assert v.verdict == "no-crash" and v.scale == "miniature", v
    n, *checks = v.stdout.split()
    assert checks == ["True"] * 7, v.stdout
    assert 64 <= int(n) < 2000
    kept = {k.name: (k.kind, k.rows, k.of) for k in v.kept}
    assert kept["df"] == ("DataFrame", int(n), 10000) and kept["y"][1:] == (int(n), 10000)
    assert kept["loader"][0] == "DataLoader" and kept["frames['train']"][1] == int(n)
    assert "lookup" not in kept
    assert "miniature run: kept" in v.how() and "of 10,000 rows of" in v.how()
    assert watcher.outputs() == [] and kernel_state(conn) == ready
    assert conn.evaluate("(len(df), len(loader.dataset), len(frames['train']))") == (10000, 10000, 10000)


def test_artefacts_of_smaller_data_are_inconclusive(conn, ready):
    artefacts = {
        "dropped row label": "df.loc[next(i for i in range(100, 10100) if i not in df.index)]",
        "sample count": "n = len(df)\nraise ValueError('n_splits=5 cannot be greater than the number of members in each class.')",
        "a count the miniature changed": "raise ValueError(f'Found input variables with inconsistent numbers of samples: [{len(df)}, 10000]')",
        "empty result": "df[df['g'] == -1].iloc[0]",
        "division by zero": "1 / len(df[df['g'] == -1])",
    }
    for what, src in artefacts.items():
        v = mini(conn, src)
        assert v.verdict == "timeout" and "artefact" in (v.reason or ""), (what, v)
    real = {"missing column": ("df['nope']", "KeyError"), "name": ("n = len(df)\nundefined_name_zz", "NameError"),
            "feature count": ("n = len(df)\nraise ValueError('X has 4 features, but the model is expecting 3 features')",
                              "ValueError")}
    for what, (src, ename) in real.items():
        v = mini(conn, src)
        assert v.verdict == "crash" and v.ename == ename and v.scale == "miniature", (what, v)
    assert kernel_state(conn) == ready


def test_nothing_large_to_shrink(conn, ready):
    v = mini(conn, "lookup['k'].sum()")
    assert v.verdict == "timeout" and "no miniature run" in v.reason, v


def test_recorded_duration_goes_straight_to_a_miniature(conn, ready, monkeypatch):
    # "straight": the runs speculate_scaled starts are recorded (each still the real one), and none is at full size;
    # a wall-clock bound (under the 5 s budget) measured the machine's load as well
    from crane.sandbox import scale

    runs: list = []

    def recorded(*args, **kw):
        runs.append(kw.get("miniature"))
        return speculate(*args, **kw)

    monkeypatch.setattr(scale, "speculate", recorded)
    slow = "t = 0\nfor _, r in df.iterrows():\n    t += 1\n    time.sleep(0.002)\nprint(t)"  # about 20 s in full
    v = speculate_scaled(conn, slow, budget_s=5.0, recorded_s=25.0)
    assert v.verdict == "no-crash" and v.scale == "miniature", v
    assert int(v.stdout) < 10000 and runs and all(m is not None for m in runs), runs
    v = speculate_scaled(conn, slow.replace("print(t)", "df['nope']"), budget_s=5.0, recorded_s=25.0)
    assert v.verdict == "crash" and v.ename == "KeyError" and v.scale == "miniature", v
    assert "miniature run" in v.how()
    assert kernel_state(conn) == ready


def test_a_timeout_then_a_miniature(conn, ready):
    slow = "for _, r in df.iterrows():\n    time.sleep(0.002)\ndf['nope']"
    v = speculate_scaled(conn, slow, budget_s=2.0)
    assert v.verdict == "crash" and v.scale == "miniature" and v.ename == "KeyError", v
    v = speculate_scaled(conn, "time.sleep(30)", budget_s=1.0)
    assert v.verdict == "timeout" and "no miniature run" in (v.reason or ""), v
