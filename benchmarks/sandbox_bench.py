#!/usr/bin/env python3
"""Benchmark: the speculative sandbox's overhead, and its verdicts over benchmark sets.

Overhead (default): starts a kernel, allocates an array of --gb GiB (touched, so every page is resident), then
runs `speculate` on a trivial cell --runs times and reports medians: total wall time, the cell's own run time
in the child, the overhead (total minus the cell's time: private request, fork, private layer, confinement,
collection), the child's setup time and its steps, the CPU time of each side, and the kernel's request round
trip. Target: overhead median <= 20 ms with a 1 GiB array. `--layer blocking` measures the fallback
confinement instead; `--gap` (0.2 s) separates the runs, as the daemon's one-at-a-time runs are (a run's
processes and private layer are torn down after its verdict is in).

Sets (--set DIR, repeatable; e.g. ../shared/bench/junobench-lite, ../shared/bench/heavy-lite): replays every
variant's history in a fresh kernel (cwd = case dir, MPLBACKEND=Agg), then decides the target cell the way
`crane check --mode auto` does (`crane.sandbox.scale`: a full-size run under --budget; when it times out, a
miniature run) and reports: accuracy of the sandbox alone (crash vs no crash; an inconclusive verdict counts
as "no crash predicted"), false alarms, the share of variants the sandbox decided, the verdict histogram, the
scale (full / miniature) and mode (layered / blocking) of the verdicts, the time a miniature verdict took
once the cell was known to be long (target: within 3 s), and whether the user's kernel stayed unchanged
(namespace keys and ids, execution count, In/Out, no iopub output seen by a second client) after every run.

Usage: .venv/bin/python benchmarks/sandbox_bench.py [--gb 1.0] [--runs 30] [--cell "x = 1"] [--layer auto]
       .venv/bin/python benchmarks/sandbox_bench.py --set ../shared/bench/heavy-lite [--budget 30] [--jobs 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.scale import speculate_scaled


def _variant(case_dir: Path, case: dict, name: str, var: dict, budget: float) -> dict:
    from crane.kernel.untouched import Untouched
    from crane.notebook.history import history_before
    from crane.notebook.model import load_notebook

    nb = load_notebook(case_dir / var["notebook"])
    target = nb.cell(var["target_cell"]).source
    kernel = start_kernel(case_dir)
    mini_s = None
    try:
        conn = kernel.connection
        for cell in history_before(nb, var["target_cell"]):
            conn.run_cell(cell.source, timeout=900)
        with Untouched(conn) as check:  # state fingerprint and a second iopub client, around the runs
            t0 = time.monotonic()
            v = speculate(conn, target, budget, places=[str(case_dir)])
            if v.verdict == "timeout":  # a long cell: what crane.sandbox.scale does next, timed on its own
                t1 = time.monotonic()
                v = speculate_scaled(conn, target, budget, recorded_s=4 * budget, places=[str(case_dir)])
                if v.scale == "miniature" and v.conclusive:
                    mini_s = time.monotonic() - t1
            took = time.monotonic() - t0
        unchanged = check.unchanged
    finally:
        kernel.shutdown()
    return {"case": case["id"], "variant": name, "expect": var["expect"], "v": v, "unchanged": unchanged,
            "seconds": took, "mini_s": mini_s}


def sets(roots: list[Path], budget: float, jobs: int) -> int:
    work = []
    for root in roots:
        for case_file in sorted(root.glob("*/case.json")):
            case = json.loads(case_file.read_text())
            for name, var in case["variants"].items():
                work.append((case_file.parent, case, name, var))

    def one(item):
        r = _variant(*item, budget)
        v, exp = r["v"], r["expect"]
        got = f"{v.verdict} {v.ename or ''}".strip()
        extra = f"{v.scale}/{v.mode}" if v.verdict != "unavailable" else ""
        print(f"{r['case']:>38}/{r['variant']:<5} expect {'crash ' + exp.get('ename', '') if exp['crash'] else 'no-crash':<26}"
              f" got {got:<28} {extra:<19} {r['seconds']:6.1f} s{'' if r['unchanged'] else '  KERNEL CHANGED'}"
              f"{'' if v.conclusive else '  (' + (v.reason or '')[:90] + ')'}", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        rows = list(pool.map(one, work))
    n = len(rows)
    correct = sum((r["v"].verdict == "crash") == r["expect"]["crash"] for r in rows)
    buggy = [r for r in rows if r["expect"]["crash"]]
    ename_ok = sum(r["v"].verdict == "crash" and r["v"].ename == r["expect"].get("ename") for r in buggy)
    false_alarms = sum(r["v"].verdict == "crash" for r in rows if not r["expect"]["crash"])
    decided = sum(r["v"].conclusive for r in rows)
    verdicts = Counter(r["v"].verdict for r in rows)
    scales = Counter(r["v"].scale for r in rows if r["v"].conclusive)
    modes = Counter(r["v"].mode for r in rows if r["v"].mode)
    minis = [r["mini_s"] for r in rows if r["mini_s"] is not None]
    print(f"variants {n}; accuracy {correct / n:.3f}; exception-name match {ename_ok / max(1, len(buggy)):.3f} "
          f"({ename_ok}/{len(buggy)}); false alarms {false_alarms}; decided by the sandbox {decided}/{n} "
          f"({decided / n:.1%}); verdicts {dict(verdicts)}; scale of decided {dict(scales)}; modes {dict(modes)}; "
          f"kernel unchanged {sum(r['unchanged'] for r in rows)}/{n}")
    if minis:
        print(f"miniature verdict on a long cell: median {statistics.median(minis):.2f} s, max {max(minis):.2f} s "
              f"({len(minis)} variants; the full-size attempt not counted)")
    return 0


def overhead(gb: float, runs: int, cell: str, layer: str, gap: float) -> int:
    with tempfile.TemporaryDirectory() as cwd:
        kernel = start_kernel(cwd)
        try:
            conn = kernel.connection
            n = int(gb * (1 << 30) // 8)
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
            speculate(conn, "pass", 5.0, layer=layer)  # installs the kernel-side module
            total, cell_ms, over, setup, steps, daemon_cpu, fork_cpu = [], [], [], [], [], [], []
            verdicts, modes = set(), set()
            for _ in range(runs):
                time.sleep(gap)  # the previous run's processes and private layer are torn down meanwhile
                t, c = time.perf_counter(), time.thread_time()
                v = speculate(conn, cell, 5.0, layer=layer)
                total.append((time.perf_counter() - t) * 1000)
                daemon_cpu.append((time.thread_time() - c) * 1000)
                fork_cpu.append(v.fork_cpu_ms or 0.0)
                cell_ms.append(v.elapsed_ms)
                over.append(v.overhead_ms)
                setup.append(v.setup_ms)
                steps.append(v.setup_steps)
                verdicts.add(v.verdict)
                modes.add(v.mode)
            med = statistics.median
            print(f"kernel RSS: {rss} MiB (array {gb:g} GiB); runs: {runs}; verdicts: {sorted(verdicts)}; "
                  f"mode: {sorted(str(m) for m in modes)}")
            print(f"private request round trip   median {med(rtt):7.2f} ms")
            print(f"speculate total              median {med(total):7.2f} ms")
            print(f"cell run time (in the child) median {med(cell_ms):7.2f} ms")
            print(f"child setup before the cell  median {med(setup):7.2f} ms   "
                  + ", ".join(f"{k} {med([s.get(k, 0.0) for s in steps]):.2f}" for k in steps[-1]
                              if k not in ("total", "cpu")))
            cpu = [s.get("cpu", 0.0) for s in steps]
            print(f"CPU time (no waiting): daemon {med(daemon_cpu):.2f} ms, kernel fork {med(fork_cpu):.2f} ms, "
                  f"child setup {med(cpu):.2f} ms; sum {med(daemon_cpu) + med(fork_cpu) + med(cpu):.2f} ms "
                  f"(the rest of the overhead is the kernel's request handling and waiting for a CPU)")
            print(f"fork-and-verdict overhead    median {med(over):7.2f} ms   (target <= 20 ms)   "
                  f"p90 {sorted(over)[int(0.9 * (len(over) - 1))]:.2f} ms")
            return 0 if med(over) <= 20.0 else 1
        finally:
            kernel.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the array held by the kernel, GiB")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--cell", default="y = x.shape[0] + 1\ny", help="the cell to run speculatively")
    ap.add_argument("--layer", choices=("auto", "layered", "blocking"), default="auto",
                    help="sandbox mode to measure (auto: what the CLI and the daemon use; the trivial cell runs "
                         "blocking there, as cells without a sign of side effects do)")
    ap.add_argument("--gap", type=float, default=0.2,
                    help="seconds between runs (the daemon runs one cell at a time; a run's teardown happens after "
                         "its verdict)")
    ap.add_argument("--set", dest="sets", type=Path, action="append", help="score the sandbox on a benchmark set")
    ap.add_argument("--juno", dest="sets", type=Path, action="append", help=argparse.SUPPRESS)  # older name
    ap.add_argument("--budget", type=float, default=30.0, help="full-size sandbox budget per target (with --set)")
    ap.add_argument("--jobs", type=int, default=1, help="variants in parallel (with --set)")
    args = ap.parse_args()
    if args.sets:
        return sets(args.sets, args.budget, args.jobs)
    return overhead(args.gb, args.runs, args.cell, args.layer, args.gap)


if __name__ == "__main__":
    sys.exit(main())

