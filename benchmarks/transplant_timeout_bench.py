#!/usr/bin/env python3
"""Benchmark (issue 45): the wall of a transplant run that times out, `while True: pass` under a small budget.

Starts a kernel of --python (default: the today environment, build/kernel-today) with JAX loaded (the fork sandbox
refuses it: the run is a transplant), then times `transplant(conn, CELL, --budget)` --runs times (the first on a
cold worker, the next on the warm one the first left), printing each run's wall, verdict, the worker's confinement,
whether it was warm, the machine's 1-minute load and the verdict's reason (which deadline ended the run:
crane.sandbox.cell_deadline). Before issue 45 a layered worker's cell (pid 1 of its namespace, where its timer
cannot fire) ran to the setup's whole allowance (budget + 20 s). Run the before tree with PYTHONPATH=<tree>/server.

Usage: .venv/bin/python benchmarks/transplant_timeout_bench.py [--budget 2] [--runs 2] [--label after]
       [--python build/kernel-today/bin/python]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from crane.kernel.manager import start_kernel
from crane.sandbox.transplant import transplant

ROOT = Path(__file__).resolve().parent.parent
CELL = "n = X.sum()\nwhile True:\n    pass"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--label", default="run")
    ap.add_argument("--python", default=str(ROOT / "build" / "kernel-today" / "bin" / "python"))
    a = ap.parse_args()
    kernel = start_kernel(Path(tempfile.mkdtemp(prefix="crane-timeout-bench-")), python=a.python)
    try:
        assert kernel.connection.run_cell("import numpy as np, jax\nX = np.arange(3.0)", timeout=180).status == "ok"
        for i in range(a.runs):
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            v = transplant(kernel.connection, CELL, a.budget)
            wall = time.monotonic() - t0
            info = v.transplant
            print(f"{a.label} run{i} wall={wall:.1f}s verdict={v.verdict} "
                  f"confinement={info.confinement if info else None} warm={info.warm if info else None} "
                  f"load1={load:.2f} reason={v.reason!r}", flush=True)
    finally:
        kernel.shutdown()


if __name__ == "__main__":
    main()
