#!/usr/bin/env python3
"""Benchmark (issue 45): the export's proof and sizing of the transplant bench's TF/Keras state, CPU time.

Installs CRANE's private export module (`_crane_transplant`, as the daemon sends it) in a fresh interpreter of
--python (default: the today environment), builds the state of benchmarks/transplant_bench.py (an array, a small
compiled and called Keras model, a 1-row frame) and times, in CPU time (`process_time`: the machine's load counts
little), what one warm export does before pickling: `_Proof().check` of each value and `_raw_bytes` (the sizing)
of each, with the proofs' walks kept from the first round (kernel/witness.py), as at every verdict after the
first. Prints the median over --rounds warm rounds, and of it the kept witnesses' checks (`_Witness.holds`).
Measure before/after side by side: run it with PYTHONPATH set to each tree's `server` in turn.

Usage: .venv/bin/python benchmarks/witness_bench.py [--rounds 10] [--python build/kernel-today/bin/python]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from crane.sandbox.transplant import TRANSPLANT_MODULE

INNER = r"""
import os, sys, json, time, statistics
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np, pandas as pd, tensorflow as tf, keras
import IPython
eval(open(sys.argv[1]).read())
m = sys.modules["_crane_transplant"]
X = np.random.rand(256, 8).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model(X[:4])
df = pd.DataFrame({"a": [1.0]})
W = m._Witness
orig = W.holds
acc = [0.0]
def holds(self, *a):
    t = time.process_time()
    try:
        return orig(self, *a)
    finally:
        acc[0] += time.process_time() - t
W.holds = holds
rows = []
for i in range(int(sys.argv[2]) + 1):
    acc[0] = 0.0
    t = time.process_time()
    p = m._Proof()
    for o in (X, model, df):
        p.check(o)
    for o in (X, model, df):
        m._raw_bytes(o, p, 0, {})
    rows.append(((time.process_time() - t) * 1000.0, acc[0] * 1000.0))
warm = rows[1:]
print(json.dumps({"first_ms": round(rows[0][0], 1), "proof+sizing_ms": round(statistics.median(r[0] for r in warm), 1),
                  "witness_check_ms": round(statistics.median(r[1] for r in warm), 1), "rounds": len(warm),
                  "reach_counts": m.REACH_COUNTS}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--python", default=str(Path("build/kernel-today/bin/python")))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="crane-wbench-") as d:
        install = Path(d) / "install.py"
        install.write_text(TRANSPLANT_MODULE.install_expression(), encoding="utf-8")
        out = subprocess.run([a.python, "-c", INNER, str(install), str(a.rounds)], capture_output=True, text=True,
                             check=False, timeout=600)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
