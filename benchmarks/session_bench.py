#!/usr/bin/env python3
"""Benchmark: a fork session's per-command overhead (the repair agent's and `crane fix`'s sandboxed tries).

Starts a kernel, allocates an array of --gb GiB (touched, so every page is resident), opens a `SandboxSession`
and repeats --runs times what `crane fix` does per candidate: roll back to the base checkpoint, a clean run
("x = 1"), a crashing run ("1 / 0"), an inspect of the crashed state ("1 + 1"). Reports the median overhead of a
clean run and of a crashing run (wall time in the daemon minus the cell's own run time: the command round trip,
and since issue 41 the command's fresh fork and the head's read of its outcome), their median wall times (the
cell's own time included: since issue 41 a command's copy-on-write faults fall there), the median wall time of
an inspect and of a rollback. `--think-ms N` waits N ms before each command, as `crane fix` and the agent do
between tries (building the next candidate, asking the model): commands back to back (0, the default) are the
worst case for a session that forks each command's process ahead. It uses the public session interface only,
so the code before a change can be measured with the same script:
`PYTHONPATH=<old checkout>/server .venv/bin/python benchmarks/session_bench.py`.

Usage: .venv/bin/python benchmarks/session_bench.py [--gb 1.0] [--runs 30] [--think-ms 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from crane.kernel.manager import start_kernel
from crane.sandbox.fork_session import SandboxSession


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--think-ms", type=float, default=0.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    kernel = start_kernel(tempfile.mkdtemp(prefix="crane-session-bench-"))
    try:
        conn = kernel.connection
        run = conn.run_cell(f"import numpy as np\nbig = np.ones(int({args.gb} * (1 << 30) / 8))\nbig[::512] = 2.0",
                            timeout=300)
        assert run.status == "ok", run
        clean, crash, inspect, rollback, clean_wall, crash_wall = [], [], [], [], [], []
        think = args.think_ms / 1000.0
        with SandboxSession.open(conn, budget_s=10.0) as sb:
            sb.checkpoint()
            for _ in range(args.runs):
                time.sleep(think)
                t = time.perf_counter()
                sb.rollback()
                sb.checkpoint()
                rollback.append((time.perf_counter() - t) * 1000)
                time.sleep(think)
                t = time.perf_counter()
                v = sb.run("x = 1")
                assert v.verdict == "no-crash", v
                clean_wall.append((time.perf_counter() - t) * 1000)
                clean.append(clean_wall[-1] - v.elapsed_ms)
                time.sleep(think)
                t = time.perf_counter()
                v = sb.run("1 / 0")
                assert v.verdict == "crash", v
                crash_wall.append((time.perf_counter() - t) * 1000)
                crash.append(crash_wall[-1] - v.elapsed_ms)
                time.sleep(think)
                t = time.perf_counter()
                assert sb.inspect("1 + 1") == "2"
                inspect.append((time.perf_counter() - t) * 1000)
        out = {"gb": args.gb, "runs": args.runs, "think_ms": args.think_ms,
               "clean_run_overhead_ms": round(statistics.median(clean), 2),
               "crash_run_overhead_ms": round(statistics.median(crash), 2),
               "clean_run_wall_ms": round(statistics.median(clean_wall), 2),
               "crash_run_wall_ms": round(statistics.median(crash_wall), 2),
               "inspect_ms": round(statistics.median(inspect), 2),
               "rollback_checkpoint_ms": round(statistics.median(rollback), 2)}
    finally:
        kernel.shutdown()
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>24}: {v}")


if __name__ == "__main__":
    main()
