#!/usr/bin/env python3
"""Benchmark: a copy session's per-command wall time (transplant and portable sessions: worker/main._session).

Starts a kernel of --python, opens a session on it (--sandbox transplant: the kernel made to refuse the fork
sandbox with a stand-in `cupy` module, as tests/sandbox/copy_sessions.py does; portable or guard: the portable
sandbox's session) and times --runs clean runs (`x = 1`) and --runs evals (`1 + 1`), alternating, after one
warm-up of each; reports their medians in ms. A crashing run is not timed: the session then starts a new worker
(the log replayed), which would dominate. It uses the public session interface only, so the code before a change
is measured with the same script: `PYTHONPATH=<old checkout>/server .venv/bin/python benchmarks/copy_session_bench.py`.

Usage: .venv/bin/python benchmarks/copy_session_bench.py [--sandbox transplant|portable|guard] [--runs 30]
       [--python PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from crane.kernel.manager import start_kernel
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandbox", choices=["transplant", "portable", "guard"], default="transplant")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    kernel = start_kernel(tempfile.mkdtemp(prefix="crane-copy-session-bench-"), python=args.python)
    conn = kernel.connection
    try:
        assert conn.run_cell("base = 1", timeout=120).status == "ok"
        sandbox = None
        if args.sandbox == "transplant":
            assert conn.run_cell("import sys, types\nsys.modules.setdefault('cupy', types.ModuleType('cupy'))",
                                 timeout=60).status == "ok"
        else:
            sandbox = SandboxOptions(confinement=args.sandbox)
        runs: list[float] = []
        evals: list[float] = []
        with open_session(conn, budget_s=30, sandbox=sandbox) as sb:
            assert sb.run("x = base").verdict == "no-crash"
            assert sb.inspect("1 + 1") == "2"
            for _ in range(args.runs):
                t0 = time.perf_counter()
                v = sb.run("x = 1")
                runs.append((time.perf_counter() - t0) * 1000.0)
                assert v.verdict == "no-crash", v
                t0 = time.perf_counter()
                got = sb.inspect("1 + 1")
                evals.append((time.perf_counter() - t0) * 1000.0)
                assert got == "2", got
        out = {"sandbox": args.sandbox, "runs": args.runs, "run_ms": round(statistics.median(runs), 2),
               "eval_ms": round(statistics.median(evals), 2)}
        print(json.dumps(out) if args.json else f"{args.sandbox}: clean run {out['run_ms']} ms, eval "
              f"{out['eval_ms']} ms (medians of {args.runs})")
    finally:
        kernel.shutdown()


if __name__ == "__main__":
    main()
