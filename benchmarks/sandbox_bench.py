#!/usr/bin/env python3
"""Benchmark: fork-and-verdict overhead of the speculative sandbox on a kernel holding a large array.

Starts a kernel, allocates an array of --gb GiB (touched, so every page is resident), then runs `speculate`
on a trivial cell --runs times and reports medians: total wall time, the cell's own run time in the child,
the overhead (total minus the cell's time: private request, fork, confinement, collection), the child's
setup time, and the kernel's request round trip. Target: overhead median <= 20 ms with a 1 GiB array.

With --juno DIR (e.g. ../shared/bench/junobench-lite) it instead replays every case variant's history in a
fresh kernel (cwd = case dir, MPLBACKEND=Agg), runs `speculate` on the target cell and reports the sandbox's
accuracy (crash vs no crash), exception-name match on crashing variants, false alarms, verdict counts, and
whether the user's kernel stayed unchanged (namespace keys and ids, execution count, In/Out, no iopub output
seen by a second client) after every run.

Usage: .venv/bin/python benchmarks/sandbox_bench.py [--gb 1.0] [--runs 30] [--cell "x = 1"]
       .venv/bin/python benchmarks/sandbox_bench.py --juno ../shared/bench/junobench-lite [--budget 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate


def juno(root: Path, budget: float) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.sandbox.conftest import IopubWatcher, kernel_state

    from crane.notebook.history import history_before
    from crane.notebook.model import load_notebook

    rows = []
    for case_file in sorted(root.glob("*/case.json")):
        case = json.loads(case_file.read_text())
        for name, var in case["variants"].items():
            nb = load_notebook(case_file.parent / var["notebook"])
            target = nb.cell(var["target_cell"]).source
            kernel = start_kernel(case_file.parent)
            try:
                conn = kernel.connection
                for cell in history_before(nb, var["target_cell"]):
                    conn.run_cell(cell.source, timeout=300)
                watcher = IopubWatcher(kernel.manager.get_connection_info())
                time.sleep(0.2)
                before = kernel_state(conn)
                v = speculate(conn, target, budget)
                time.sleep(0.2)
                unchanged = kernel_state(conn) == before and not watcher.outputs()
                watcher.close()
            finally:
                kernel.shutdown()
            exp = var["expect"]
            rows.append((case["id"], name, exp, v, unchanged))
            got = f"{v.verdict} {v.ename or ''}".strip()
            print(f"{case['id']:>24}/{name:<5} expect {'crash ' + exp.get('ename', '') if exp['crash'] else 'no-crash':<28}"
                  f" got {got:<34} {v.elapsed_ms:8.0f} ms {'' if unchanged else 'KERNEL CHANGED'}"
                  f"{'' if v.conclusive else '  (' + (v.reason or '')[:70] + ')'}", flush=True)
    n = len(rows)
    correct = sum((r[3].verdict == "crash") == r[2]["crash"] for r in rows)
    buggy = [r for r in rows if r[2]["crash"]]
    ename_ok = sum(r[3].verdict == "crash" and r[3].ename == r[2].get("ename") for r in buggy)
    false_alarms = sum(r[3].verdict == "crash" for r in rows if not r[2]["crash"])
    counts = {}
    for r in rows:
        counts[r[3].verdict] = counts.get(r[3].verdict, 0) + 1
    print(f"variants {n}; accuracy {correct / n:.3f}; exception-name match {ename_ok / max(1, len(buggy)):.3f} "
          f"({ename_ok}/{len(buggy)}); false alarms {false_alarms}; verdicts {counts}; "
          f"kernel unchanged {sum(r[4] for r in rows)}/{n}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the array held by the kernel, GiB")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--cell", default="y = x.shape[0] + 1\ny", help="the cell to run speculatively")
    ap.add_argument("--juno", type=Path, help="score the sandbox on a benchmark set instead")
    ap.add_argument("--budget", type=float, default=20.0, help="sandbox budget per target (with --juno)")
    args = ap.parse_args()
    if args.juno:
        return juno(args.juno, args.budget)
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
