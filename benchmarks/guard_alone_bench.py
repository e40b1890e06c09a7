"""The guard alone's own cost (`--sandbox guard`: the call guard as the worker installs it where no OS layer ran),
in this process: a pandas cell and a loop of calls that hand callables around, each timed best of `--repeats` with
the guard installed. Compare two trees side by side (the same interpreter, alternated):

    PYTHONPATH=<before>/server python benchmarks/guard_alone_bench.py --label before
    PYTHONPATH=<after>/server python benchmarks/guard_alone_bench.py --label after
"""

from __future__ import annotations

import argparse
import time
from typing import Any

CELLS = {
    "pandas": """
def f():
    import numpy as np, pandas as pd
    df = pd.DataFrame({'k': np.arange(20000) % 97, 'v': np.arange(20000.0), 's': [str(i % 13) for i in range(20000)]})
    out = df.groupby('k').agg({'v': ['mean', 'max'], 's': 'first'})
    df['t'] = df['s'].map(lambda x: x + 'a')
    m = df.merge(out.reset_index().droplevel(1, axis=1).iloc[:, :2], on='k')
    df.describe()
    return len(m), df.pivot_table(index='k', columns='s', values='v', aggfunc='sum').shape
""",
    "calls": """
def f():
    import os.path, json
    for i in range(20000):
        os.path.join('a', 'b'); json.dumps(i); min(i, 3); list(map(abs, (1, 2))); sorted((2, 1))
""",
    "methods": """
def f():
    import sqlite3, numpy as np
    con = sqlite3.connect(':memory:')
    con.execute('create table t(x)')
    for i in range(3000):
        con.execute('insert into t values (?)', (i,)); np.arange(3).sum(); [3, 1].sort(key=abs)
    return con.execute('select count(*) from t').fetchone()
""",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", default="")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    from crane.sandbox.worker import guard as g

    guard = g.CallGuard(lambda label: print("refused:", label))
    bare: dict[str, float] = {}
    for name, src in CELLS.items():  # the cells' own time first (nothing of the guard installed yet)
        ns0: dict[str, Any] = {}
        exec(compile(src, "/tmp/a-notebook-cell.py", "exec"), ns0)  # noqa: S102 - user code, as a cell's file
        ns0["f"]()
        bare[name] = _best(ns0["f"], a.repeats)
    # what the worker sets up where no OS layer ran (`shield_unaudited`: the combinators since round 7, the C methods
    # in their types and the C functions in their modules since round 8)
    g.shield_unaudited(guard)
    for name, src in CELLS.items():
        ns: dict[str, Any] = {}
        exec(compile(src, "/tmp/a-notebook-cell.py", "exec"), ns)  # noqa: S102 - user code, as a cell's file
        ns["f"]()  # (imports and first-call costs out of the timing)
        guard.install()
        try:
            best = _best(ns["f"], a.repeats)
        finally:
            guard.uninstall()
        print(f"{a.label} {name}: {best * 1000:.0f} ms under the guard alone, {bare[name] * 1000:.0f} ms bare "
              f"({best / bare[name]:.2f}x; best of {a.repeats})")


def _best(f: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


if __name__ == "__main__":
    main()
