#!/usr/bin/env python3
"""Benchmark: a warm verdict of the portable sandbox (crane.sandbox.portable) next to the OS sandbox's, in the
same run, on the same kernel.

Two kernels of --python (default: the today environment, build/kernel-today): a pandas/scikit-learn one (a
fitted model and a small frame: the OS sandbox forks it) and a TensorFlow/Keras one (a small model: the OS sandbox
runs a transplant worker confined by namespaces, Landlock and seccomp). On each, --runs verdicts of a small cell
under each confinement, alternating `os` and `portable` (so both meet the same load); each run waits first until
the kernel's idle worker has done its imports (a second verdict some seconds after the first finds it warm); the
first verdict of each confinement (cold) is not counted. Reports medians: wall time of the verdict, the cell's own
time, the overhead. Target (issue 34): a warm portable verdict within 1 s for a small state.

Usage: .venv/bin/python benchmarks/portable_bench.py [--runs 5] [--python build/kernel-today/bin/python]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.transplant import POOL

KERNELS = {
    "pandas/scikit-learn": (
        "import numpy as np, pandas as pd\nfrom sklearn.linear_model import LogisticRegression\n"
        "rng = np.random.default_rng(0)\ndf = pd.DataFrame(rng.random((500, 4)), columns=list('abcd'))\n"
        "y = (df.a > 0.5).astype(int)\nclf = LogisticRegression().fit(df, y)\n",
        "p = clf.predict_proba(df[['a', 'b', 'c', 'd']])[:, 1]\ns = df.assign(p=p).groupby(y).p.mean()\ns",
    ),
    "TensorFlow/Keras": (
        "import numpy as np, tensorflow as tf, keras\nX = np.random.rand(256, 8).astype('float32')\n"
        "model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu'), "
        "keras.layers.Dense(1)])\nmodel.compile(optimizer='adam', loss='mse')\n",
        "y = model(X[:4])\ny.shape",
    ),
}


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 1) if xs else float("nan")


def bench(python: str | None, name: str, setup: str, cell: str, runs: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="crane-pbench-"))
    kernel = start_kernel(work, python=python)
    try:
        r = kernel.connection.run_cell(setup, timeout=300)
        assert r.status == "ok", r
        exe = kernel.connection.evaluate("__import__('sys').executable")
        out: dict = {}
        for i in range(runs + 1):
            for conf in ("os", "portable"):
                POOL.wait_ready(exe, 120.0)
                t0 = time.monotonic()
                v = speculate(kernel.connection, cell, 60.0, sandbox=SandboxOptions(confinement=conf))
                wall = (time.monotonic() - t0) * 1000.0
                rec = out.setdefault(conf, {"mode": v.mode, "verdicts": [], "wall": [], "cell": [], "overhead": []})
                rec["verdicts"].append(v.verdict)
                if i > 0:
                    rec["wall"].append(wall)
                    rec["cell"].append(v.elapsed_ms)
                    rec["overhead"].append(v.overhead_ms)
        return {conf: {"mode": rec["mode"], "verdicts": rec["verdicts"], "wall_ms": _median(rec["wall"]),
                       "cell_ms": _median(rec["cell"]), "overhead_ms": _median(rec["overhead"])}
                for conf, rec in out.items()}
    finally:
        kernel.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="warm verdicts per confinement and kernel")
    ap.add_argument("--python", default=str(Path(__file__).resolve().parent.parent / "build/kernel-today/bin/python"))
    ap.add_argument("--only", choices=list(KERNELS), help="one kernel only")
    args = ap.parse_args()
    report = {}
    for name, (setup, cell) in KERNELS.items():
        if args.only and name != args.only:
            continue
        report[name] = bench(args.python, name, setup, cell, args.runs)
        print(json.dumps({name: report[name]}), flush=True)
    POOL.shutdown()


if __name__ == "__main__":
    main()
