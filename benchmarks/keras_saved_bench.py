#!/usr/bin/env python3
"""Benchmark: a Keras model's pickling in the user's kernel, saved by Keras at every export (before) or reused while
its content key is equal (kernel/keras_saved.py, issue 45), side by side in one kernel.

Starts a kernel of --python (default: the today environment), builds the models (`small`: transplant_bench's
compiled 8-16-1 model; `large`: a compiled MLP of --large-units wide Dense layers, fitted one step so the optimizer
holds its slots), runs one transplant so the kernel holds CRANE's private `_crane_transplant`, then, in the kernel,
times per model and alternating (--rounds rounds of --reps calls each, median of the rounds): Keras's own
`__reduce__` as the export called it (`save`), the content key alone (`key`), and `saved_reduce` answering from the
kept bytes (`reused`, what a warm verdict on an unchanged model pays). CPU time (the kernel's process time: what
the load does not inflate) and wall time, per call, in ms.

Usage: .venv/bin/python benchmarks/keras_saved_bench.py [--rounds 5] [--reps 10] [--large-units 1024]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from crane.kernel.manager import start_kernel
from crane.sandbox.transplant import transplant

SETUP = """
import os
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
import numpy as np, tensorflow as tf, keras
X = np.random.rand(256, 8).astype('float32')
small = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu'), keras.layers.Dense(1)])
small.compile(optimizer='adam', loss='mse')
large = keras.Sequential([keras.Input((8,))] + [keras.layers.Dense({units}, activation='relu') for _ in range(3)]
                         + [keras.layers.Dense(1)])
large.compile(optimizer='adam', loss='mse')
large.fit(X, X[:, :1], epochs=1, batch_size=256, verbose=0)
"""
TIMING = """
def _crane_bench(rounds, reps):
    import sys, time, statistics
    m = sys.modules['_crane_transplant']
    own = m._cls_dict(keras.src.saving.keras_saveable.KerasSaveable)['__reduce__']
    out = {}
    for name, model in (('small', small), ('large', large)):
        lib = m._Lib(m._Proof())
        lib.proof.prewalk(model)
        m.forget_saved()
        m.saved_reduce(lib, model, own)  # kept now
        steps = {'save': lambda: lib.call(own, '__reduce__', model), 'key': lambda: m._ks_key(lib, model),
                 'reused': lambda: m.saved_reduce(lib, model, own)}
        rows = {k: ([], []) for k in steps}
        for _ in range(rounds):
            for k, f in steps.items():
                f()
                c, w = time.process_time(), time.perf_counter()
                for _ in range(reps):
                    f()
                rows[k][0].append((time.process_time() - c) * 1000.0 / reps)
                rows[k][1].append((time.perf_counter() - w) * 1000.0 / reps)
        params = int(sum(int(np.prod(v.shape)) for v in model.variables))
        out[name] = {'variables (values)': params, 'counts': dict(m.KERAS_SAVES)} | {
            f'{k} cpu/wall ms': [round(statistics.median(c), 2), round(statistics.median(w), 2)]
            for k, (c, w) in rows.items()}
    return out
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--large-units", type=int, default=1024)
    ap.add_argument("--python", default=str(Path("build/kernel-today/bin/python")))
    a = ap.parse_args()
    kernel = start_kernel(Path(tempfile.mkdtemp(prefix="crane-ksbench-")), python=a.python)
    try:
        conn = kernel.connection
        for code in (SETUP.format(units=a.large_units), TIMING):
            run = conn.run_cell(code, timeout=600)
            if run.status != "ok":
                raise SystemExit(f"setup failed: {run.ename}: {run.evalue}")
        v = transplant(conn, "y = small(X[:4])", 120.0)  # installs _crane_transplant
        if v.verdict != "no-crash":
            raise SystemExit(f"unexpected verdict: {v.verdict} {v.reason}")
        print(json.dumps(conn.evaluate(f"_crane_bench({a.rounds}, {a.reps})", timeout=1200), indent=1), flush=True)
    finally:
        kernel.shutdown()


if __name__ == "__main__":
    main()
