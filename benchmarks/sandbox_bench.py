#!/usr/bin/env python3
"""Benchmark: fork-and-verdict overhead of the speculative sandbox on a kernel holding a large array.

Starts a kernel, allocates an array of --gb GiB (touched, so every page is resident), then runs `speculate`
on a trivial cell --runs times and reports medians: total wall time, the cell's own run time in the child,
the overhead (total minus the cell's time: private request, fork, confinement, collection), the child's
setup time, and the kernel's request round trip. Target: overhead median <= 20 ms with a 1 GiB array.

Usage: .venv/bin/python benchmarks/sandbox_bench.py [--gb 1.0] [--runs 30] [--cell "x = 1"]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the array held by the kernel, GiB")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--cell", default="y = x.shape[0] + 1\ny", help="the cell to run speculatively")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        kernel = start_kernel(cwd)
        try:
            conn = kernel.connection
            n = int(args.gb * (1 << 30) // 8)
            res = conn.run_cell(f"import numpy as np\nx = np.ones({n}, dtype=np.float64)\n", timeout=300)
            if res.status != "ok":
                print(f"setup failed: {res.ename}: {res.evalue}", file=sys.stderr)
                return 2
            rss = conn.evaluate("int(open('/proc/self/statm').read().split()[1]) * 4096 // (1 << 20)")
            rtt = []
            for _ in range(10):
                t = time.perf_counter()
                conn.private({"v": "1"})
                rtt.append((time.perf_counter() - t) * 1000)
            speculate(conn, "pass", 5.0)  # installs the kernel-side module
            total, cell, over = [], [], []
            verdicts = set()
            for _ in range(args.runs):
                t = time.perf_counter()
                v = speculate(conn, args.cell, 5.0)
                total.append((time.perf_counter() - t) * 1000)
                cell.append(v.elapsed_ms)
                over.append(v.overhead_ms)
                verdicts.add(v.verdict)
            med = statistics.median
            print(f"kernel RSS: {rss} MiB (array {args.gb:g} GiB); runs: {args.runs}; verdicts: {sorted(verdicts)}")
            print(f"private request round trip   median {med(rtt):7.2f} ms")
            print(f"speculate total              median {med(total):7.2f} ms")
            print(f"cell run time (in the child) median {med(cell):7.2f} ms")
            print(f"fork-and-verdict overhead    median {med(over):7.2f} ms   (target <= 20 ms)   "
                  f"p90 {sorted(over)[int(0.9 * (len(over) - 1))]:.2f} ms")
            return 0 if med(over) <= 20.0 else 1
        finally:
            kernel.shutdown()


if __name__ == "__main__":
    sys.exit(main())
