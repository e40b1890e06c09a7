"""Benchmark of the runtime-facts probe: latency per target cell and payload size on a loaded kernel.

The kernel holds 200 variables: a 1 GiB float64 array (with NaNs), 100 DataFrames (1000 x 4, mixed dtypes with
NaNs), 90 arrays (100 x 50), a fitted and an unfitted scikit-learn estimator, a torch model, a DataLoader, tensors,
dicts and lists. For each target cell (a ProbeRequest such as the static analysis would send) it times the full
round trip through `ProbeClient.run` (silent request, user_expressions, JSON decode into msgspec Structs) and
prints medians. Targets: <= 10 ms per target cell, <= 32 KB payload.

`--scaling` measures instead how the round trip grows with the state (see benchmarks/probe_scaling.py): frames
of 1e3 to 5e6 rows, 2,000 columns, a 20,000-variable namespace, a 1 GiB array, as ratios to an empty private
request; "cold" right after an execution (nothing reusable), "warm" for a repeated request (target <= 3x).

    .venv/bin/python benchmarks/probe_bench.py            # 1 GiB array, 30 repeats
    .venv/bin/python benchmarks/probe_bench.py --gib 0.25 --repeats 10 --json
    .venv/bin/python benchmarks/probe_bench.py --scaling [--max-rows 1e6] [--repeats 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from crane.kernel.manager import start_kernel
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest

SETUP = """
import numpy as np, pandas as pd, torch
from sklearn.linear_model import LogisticRegression
from sklearn.ensemble import RandomForestClassifier
from torch.utils.data import DataLoader, TensorDataset
_rng = np.random.RandomState(0)
big = np.ones(({rows}, 8192))
big[::997, ::13] = np.nan
for _i in range(100):
    _df = pd.DataFrame(_rng.rand(1000, 4), columns=["price", "qty", "score", "rate"])
    _df.loc[_rng.rand(1000) < 0.05, "price"] = np.nan
    _df["city"] = _rng.choice(["paris", "rome", "oslo", "n/a"], 1000)
    globals()[f"df_{{_i}}"] = _df
for _i in range(90):
    globals()[f"arr_{{_i}}"] = _rng.rand(100, 50)
X_train, y_train = _rng.rand(500, 4), _rng.randint(0, 3, 500)
model = LogisticRegression(max_iter=200).fit(X_train, y_train)
forest = RandomForestClassifier()
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 32)
        self.fc2 = torch.nn.Linear(32, 3)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
net = Net()
loader = DataLoader(TensorDataset(torch.rand(500, 4), torch.randint(0, 3, (500,))), batch_size=32)
batch = torch.rand(32, 4)
config = {{"lr": 0.01, "epochs": 10, "layers": [32, 16]}}
labels = list(_rng.randint(0, 2, 200))
del _i, _df
"""

CELLS = {
    "pandas cleaning": ProbeRequest(
        names=["df_17", "pd", "np"],
        attrs=["df_17.price", "pd.to_numeric"],
        keys=[["df_17", "price", "columns"], ["df_17", "Price", "columns"]],
        modules=["pandas"],
        paths=["data/train.csv"],
    ),
    "1 GiB array": ProbeRequest(names=["big", "np"], attrs=["big.reshape", "np.float"], keys=[["big", 10, "index"]]),
    "sklearn fit/predict": ProbeRequest(
        names=["model", "forest", "X_train", "y_train", "df_3"],
        attrs=["model.coef_", "forest.feature_importances_", "model.predict"],
        modules=["sklearn", "xgboost"],
    ),
    "torch training": ProbeRequest(
        names=["net", "loader", "batch", "torch"], attrs=["net.fc1", "net.fc3"], modules=["torchvision"]
    ),
    "8 variables": ProbeRequest(
        names=["df_1", "df_2", "df_3", "df_4", "arr_1", "arr_2", "config", "labels", "undefined_name"],
        keys=[["config", "lr", "key"]],
    ),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="size of the big array in GiB (default 1)")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--scaling", action="store_true", help="cold/warm round trip against the state's size")
    ap.add_argument("--python", help="--scaling: the kernel's interpreter (e.g. build/kernel-today/bin/python: adds a "
                    "Keras model, 1e6-element tf/jax tensors and a polars frame/LazyFrame)")
    ap.add_argument("--max-rows", type=float, default=5e6, help="--scaling: largest frame (default 5e6 rows)")
    args = ap.parse_args(argv)
    if args.scaling:
        from probe_scaling import run_scaling

        return run_scaling(args.repeats if args.repeats != 30 else 15, int(args.max_rows), args.gib, args.json,
                           args.python)
    rows = max(1, int(args.gib * (1 << 30) / (8192 * 8)))
    with tempfile.TemporaryDirectory() as cwd:
        k = start_kernel(cwd)
        try:
            t0 = time.perf_counter()
            run = k.connection.run_cell(SETUP.format(rows=rows), timeout=600)
            if run.status != "ok":
                print(f"setup failed: {run.ename}: {run.evalue}", file=sys.stderr)
                return 2
            setup_s = time.perf_counter() - t0
            n_vars = k.connection.evaluate("len([k for k in get_ipython().user_ns if not k.startswith('_') "
                                           "and k not in ('In', 'Out', 'exit', 'quit', 'get_ipython', 'open')])")
            probe = ProbeClient(k.connection)
            t0 = time.perf_counter()
            probe.ensure_installed()
            install_ms = (time.perf_counter() - t0) * 1000
            for req in CELLS.values():
                probe.run(req)  # warm-up
            # Interleaved, so that load from other processes affects every cell and the no-op baseline alike.
            rt: dict[str, list[float]] = {name: [] for name in CELLS}
            inner: dict[str, list[float]] = {name: [] for name in CELLS}
            noop: list[float] = []
            last = {}
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                k.connection.private({})
                noop.append((time.perf_counter() - t0) * 1000)
                for name, req in CELLS.items():
                    t0 = time.perf_counter()
                    res = probe.run(req)
                    rt[name].append((time.perf_counter() - t0) * 1000)
                    inner[name].append(res.elapsed_ms)
                    assert not res.errors, res.errors
                    last[name] = res
            results = {
                name: {
                    "roundtrip_ms_median": round(statistics.median(rt[name]), 2),
                    "roundtrip_ms_p90": round(sorted(rt[name])[int(0.9 * (len(rt[name]) - 1))], 2),
                    "in_kernel_ms_median": round(statistics.median(inner[name]), 2),
                    "payload_bytes": last[name].payload_bytes,
                    "sampled": sorted(n for n, f in last[name].facts.items() if f.sampled),
                }
                for name in CELLS
            }
            noop_ms = statistics.median(noop)
            t0 = time.perf_counter()
            k.connection.evaluate("bool(np.isnan(big).any())", timeout=120)
            full_scan_ms = (time.perf_counter() - t0) * 1000
        finally:
            k.shutdown()
    worst = max(r["roundtrip_ms_median"] for r in results.values())
    summary = {
        "kernel_variables": n_vars,
        "big_array_gib": round(rows * 8192 * 8 / (1 << 30), 3),
        "setup_s": round(setup_s, 1),
        "install_ms": round(install_ms, 1),
        "cells": results,
        "worst_median_ms": worst,
        "target_ms": 10.0,
        "worst_median_over_target": round(worst / 10.0, 2),
        "noop_private_request_ms_median": round(noop_ms, 2),
        "worst_median_over_noop_ms": round(worst - noop_ms, 2),
        "max_payload_bytes": max(r["payload_bytes"] for r in results.values()),
        "full_nan_scan_of_big_array_ms": round(full_scan_ms, 1),
        "full_scan_over_probe_1gib_cell": round(full_scan_ms / results["1 GiB array"]["roundtrip_ms_median"], 1),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"kernel: {n_vars} variables incl. a {summary['big_array_gib']} GiB array (setup {summary['setup_s']} s); "
          f"probe install {summary['install_ms']} ms; {args.repeats} repeats per cell")
    print(f"{'target cell':22} {'median ms':>9} {'p90 ms':>8} {'in-kernel':>9} {'payload B':>9}  sampled")
    for name, r in results.items():
        print(f"{name:22} {r['roundtrip_ms_median']:9.2f} {r['roundtrip_ms_p90']:8.2f} {r['in_kernel_ms_median']:9.2f} "
              f"{r['payload_bytes']:9d}  {','.join(r['sampled']) or '-'}")
    print(f"worst median {worst:.2f} ms = {summary['worst_median_over_target']} x the 10 ms target; "
          f"max payload {summary['max_payload_bytes']} B (target 32768)")
    print(f"an empty private request (the transport alone) takes {summary['noop_private_request_ms_median']} ms "
          f"median here: the probe adds at most {summary['worst_median_over_noop_ms']} ms to it")
    print(f"for comparison, one full NaN scan of the big array: {summary['full_nan_scan_of_big_array_ms']} ms "
          f"({summary['full_scan_over_probe_1gib_cell']} x the probe's 1 GiB cell)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
