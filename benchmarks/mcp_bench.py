"""Latency of `crane mcp` round trips, as the user's agent sees them (the SDK's own stdio client, a real
`crane mcp` subprocess attached to a real kernel holding a small data-science state).

Reports medians (ms) of: an empty MCP call (`ping`), `tools/list`, `crane_kernel_facts` (one name, and every
variable), `crane_check_code` in static mode (rules on the kernel's facts) and in auto mode (plus a sandbox
run), and `crane_try_code`; each as a ratio to the empty call. The first call of each tool is a warm-up (it
installs the probe / starts the sandbox module in the kernel) and is reported apart.

    .venv/bin/python benchmarks/mcp_bench.py [--rounds 30] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from crane.kernel.manager import start_kernel

STATE = """
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
df = pd.DataFrame({"price": rng.normal(size=10_000), "city": rng.choice(list("abcde"), 10_000)})
df.loc[::7, "price"] = np.nan
X = df[["price"]].fillna(0).to_numpy()
n_rows = len(df)
"""
CODE = "means = df.groupby('city')['Price'].mean()\n"


async def _timed(call: Callable[[], Awaitable[Any]], rounds: int) -> tuple[float, list[float]]:
    t0 = time.perf_counter()
    first = await call()
    warm = (time.perf_counter() - t0) * 1000
    if getattr(first, "is_error", False):
        raise RuntimeError(f"tool error: {first.content}")
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t0) * 1000)
    return warm, out


async def bench(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="crane-mcp-bench-") as tmp:
        kernel = start_kernel(tmp)
        try:
            run = kernel.connection.run_cell(STATE, timeout=120)
            assert run.status == "ok", run
            params = StdioServerParameters(command=sys.executable,
                                           args=["-m", "crane", "mcp", "--connection-file",
                                                 str(kernel.manager.connection_file)])
            # legacy handshake: `ping`, the empty call, is a method there (not in the 2026-07-28 era)
            async with Client(params, read_timeout_seconds=300, cache=None, mode="legacy") as c:
                calls: dict[str, Callable[[], Awaitable[Any]]] = {
                    "ping (empty call)": c.send_ping,
                    "tools/list": c.list_tools,
                    "crane_kernel_facts(names=[df])": lambda: c.call_tool("crane_kernel_facts", {"names": ["df"]}),
                    "crane_kernel_facts()": lambda: c.call_tool("crane_kernel_facts", {}),
                    "crane_check_code static": lambda: c.call_tool("crane_check_code",
                                                                   {"code": CODE, "mode": "static"}),
                    "crane_check_code auto": lambda: c.call_tool("crane_check_code", {"code": CODE}),
                    "crane_try_code": lambda: c.call_tool("crane_try_code", {"code": CODE}),
                }
                results: dict[str, dict[str, Any]] = {}
                for name, call in calls.items():
                    n = rounds if "auto" not in name and "try" not in name else max(5, rounds // 3)
                    warm, times = await _timed(call, n)
                    results[name] = {"median_ms": round(statistics.median(times), 3), "first_ms": round(warm, 1),
                                     "rounds": n}
        finally:
            kernel.shutdown()
    base = results["ping (empty call)"]["median_ms"]
    for r in results.values():
        r["ratio_to_empty"] = round(r["median_ms"] / base, 2) if base else None
    return {"rounds": rounds, "results": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message="ping is removed")  # the empty call: legacy-era on purpose
    report = asyncio.run(bench(max(3, args.rounds)))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'call':34} {'median ms':>10} {'x empty':>8} {'first ms':>9} {'n':>4}")
    for name, r in report["results"].items():
        print(f"{name:34} {r['median_ms']:10.2f} {r['ratio_to_empty']:8.1f} {r['first_ms']:9.1f} {r['rounds']:4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
