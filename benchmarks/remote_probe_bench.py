"""Benchmark: the probe's round trip over a Jupyter Server's kernel websocket vs. over ZeroMQ, same machine.

Two kernels hold the same state (probe_bench.py's SETUP: DataFrames, arrays, estimators, a torch model, a big
array of `--gib` GiB): one started by CRANE and reached over ZeroMQ (IPC sockets, as `crane check` does), one
started on a jupyter_server this benchmark runs on 127.0.0.1 (token auth) and reached over the kernel channels
websocket (`v1.kernel.websocket.jupyter.org`, as `crane check --server` and the editor do for remote kernels).
For each target cell of probe_bench.py it times `ProbeClient.run` (silent request, user_expressions, decode),
interleaving the transports so machine load affects both alike, and prints medians and the websocket/ZeroMQ
ratio. Target: ratio <= 2 for every cell. Also reported: an empty private request (the transport alone).

    .venv/bin/python benchmarks/remote_probe_bench.py                 # 0.25 GiB array, 40 repeats
    .venv/bin/python benchmarks/remote_probe_bench.py --gib 1 --repeats 30 --json
    .venv/bin/python benchmarks/remote_probe_bench.py --protocol json  # the legacy JSON websocket protocol
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/jupyter_server_proc.py starts the server
sys.path.insert(0, str(REPO / "benchmarks"))

from probe_bench import CELLS, SETUP  # noqa: E402
from tests.jupyter_server_proc import JupyterServerProcess  # noqa: E402

from crane.kernel.manager import start_kernel  # noqa: E402
from crane.kernel.server_kernel import start_server_kernel  # noqa: E402
from crane.probe.collect import ProbeClient  # noqa: E402


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=0.25, help="size of the big array in GiB (default 0.25)")
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--protocol", choices=("v1", "json"), default="v1", help="the server's websocket protocol")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    rows = max(1, int(args.gib * (1 << 30) / (8192 * 8)))
    setup = SETUP.format(rows=rows)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "served"
        root.mkdir()
        server = JupyterServerProcess(root, legacy_protocol=args.protocol == "json")
        local = remote = None
        try:
            local = start_kernel(root)
            (root / "bench.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
            remote = start_server_kernel(server.spec(), root / "bench.ipynb", root=root)
            conns = {"zmq": local.connection, "ws": remote.connection}
            for name, conn in conns.items():
                run = conn.run_cell(setup, timeout=600)
                if run.status != "ok":
                    print(f"setup failed ({name}): {run.ename}: {run.evalue}", file=sys.stderr)
                    return 2
            probes = {name: ProbeClient(conn) for name, conn in conns.items()}
            for p in probes.values():
                p.ensure_installed()
                for req in CELLS.values():
                    p.run(req)  # warm-up
            rt = {t: {c: [] for c in CELLS} for t in conns}
            noop: dict[str, list[float]] = {t: [] for t in conns}
            for i in range(args.repeats):
                order = list(conns) if i % 2 == 0 else list(reversed(conns))
                for t in order:
                    t0 = time.perf_counter()
                    conns[t].private({})
                    noop[t].append((time.perf_counter() - t0) * 1000)
                for cell, req in CELLS.items():
                    for t in order:
                        t0 = time.perf_counter()
                        res = probes[t].run(req)
                        rt[t][cell].append((time.perf_counter() - t0) * 1000)
                        assert not res.errors, res.errors
            protocol = remote.connection.client.protocol or "json (legacy)"
        finally:
            for k in (local, remote):
                if k is not None:
                    k.shutdown()
            server.stop()
    cells = {
        c: {"zmq_ms_median": _median(rt["zmq"][c]), "ws_ms_median": _median(rt["ws"][c]),
            "ratio": round(statistics.median(rt["ws"][c]) / statistics.median(rt["zmq"][c]), 2)}
        for c in CELLS
    }
    summary = {
        "websocket_protocol": protocol,
        "big_array_gib": round(rows * 8192 * 8 / (1 << 30), 3),
        "repeats": args.repeats,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cells": cells,
        "noop": {"zmq_ms_median": _median(noop["zmq"]), "ws_ms_median": _median(noop["ws"]),
                 "ratio": round(statistics.median(noop["ws"]) / statistics.median(noop["zmq"]), 2)},
        "worst_ratio": max(c["ratio"] for c in cells.values()),
        "target_ratio": 2.0,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"probe round trip, websocket ({protocol}) vs ZeroMQ; {args.repeats} repeats, "
          f"{summary['big_array_gib']} GiB array; load average {summary['load_average']}")
    print(f"{'target cell':22} {'ZeroMQ ms':>10} {'websocket ms':>13} {'ratio':>6}")
    for c, r in cells.items():
        print(f"{c:22} {r['zmq_ms_median']:10.2f} {r['ws_ms_median']:13.2f} {r['ratio']:6.2f}")
    n = summary["noop"]
    print(f"{'(empty private request)':22} {n['zmq_ms_median']:10.2f} {n['ws_ms_median']:13.2f} {n['ratio']:6.2f}")
    print(f"worst ratio {summary['worst_ratio']} (target <= 2.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
