#!/usr/bin/env python3
"""Benchmark: a warm verdict of the portable sandbox (crane.sandbox.portable) next to the OS sandbox's, in the
same run, on the same kernel.

Two kernels of --python (default: the today environment, build/kernel-today): a pandas/scikit-learn one (a
fitted model and a small frame: the OS sandbox forks it) and a TensorFlow/Keras one (a small model: the OS sandbox
runs a transplant worker confined by namespaces, Landlock and seccomp). On each, --runs verdicts of each cell
under each confinement (`--sandbox`: default `os` (the fork path on the pandas kernel), `portable` (Landlock under
the Python layers; a warm worker serves verdict after verdict as a head, each run in a fresh fork child of it:
worker/head.py), `portable-fresh` (the same without heads: a fresh worker per verdict, as before heads; on a second
kernel of the same state, so the heads of the first are not consumed) and `guard` (the Python layers alone)), round-robin (so all meet the same load); each run waits
first until the kernel's idle worker has done its imports (a second verdict some seconds after the first finds it
warm); the first verdict of each confinement (cold) is not counted. The cells: `verdict` (a small cell on the
kernel's state: the warm verdict's wall time), and on the pandas kernel the cell's own time (`elapsed_ms`, measured
inside the run) of `calls` (a loop of 1e6 Python calls), `groupby` (a pandas groupby of 200k rows) and `fit` (a
scikit-learn fit). Reports medians, each confinement's ratio to `os`, and a copy run's set-up steps (`steps_ms`:
the view of the folder, the OS layer, the guard, the state's load). Targets (issue 45): a warm portable verdict
<= 2x the fork path's; a cell's own time under `portable` <= 1.5x its time on the fork path.

Usage: .venv/bin/python benchmarks/portable_bench.py [--runs 5] [--python build/kernel-today/bin/python]
       [--sandbox os portable portable-fresh guard] [--only pandas/scikit-learn]
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
from crane.sandbox.portable import HEADS
from crane.sandbox.transplant import POOL

# the set-up steps reported (medians): the run folder's view, the OS layer, the guard's arming, the state's load
STEPS = ("view", "os_layer", "guard", "load")
FRESH = "portable-fresh"  # the portable run without heads: a fresh worker per verdict (before worker/head.py)

KERNELS = {
    "pandas/scikit-learn": (
        "import numpy as np, pandas as pd\nfrom sklearn.linear_model import LogisticRegression\n"
        "rng = np.random.default_rng(0)\ndf = pd.DataFrame(rng.random((500, 4)), columns=list('abcd'))\n"
        "y = (df.a > 0.5).astype(int)\nclf = LogisticRegression().fit(df, y)\n"
        "big = pd.DataFrame({'k': rng.integers(0, 1000, 200_000), 'v': rng.random(200_000)})\n"
        "X = rng.random((4000, 20))\nyy = (X[:, 0] + X[:, 1] > 1).astype(int)\n",
        {"verdict": "p = clf.predict_proba(df[['a', 'b', 'c', 'd']])[:, 1]\ns = df.assign(p=p).groupby(y).p.mean()\ns",
         "calls": "def _f(x):\n    return x + 1\nn = 0\nfor _i in range(1_000_000):\n    n = _f(n)\nn",
         "groupby": "g = big.groupby('k').v.agg(['mean', 'std', 'count'])\ng.shape",
         "fit": "m = LogisticRegression(max_iter=300).fit(X, yy)\nm.score(X, yy)"},
    ),
    "TensorFlow/Keras": (
        "import numpy as np, tensorflow as tf, keras\nX = np.random.rand(256, 8).astype('float32')\n"
        "model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu'), "
        "keras.layers.Dense(1)])\nmodel.compile(optimizer='adam', loss='mse')\n",
        {"verdict": "y = model(X[:4])\ny.shape"},
    ),
}


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 1) if xs else float("nan")


def _all_ready(executable: str, timeout: float) -> None:
    """Wait until every idle worker of `executable` (one per kernel) has done its imports (none: nothing to wait
    for — before the first copied run, and on the fork path's turns; a run's refill is in the pool when it returns)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with POOL.lock:
            ws = [w for k, w in POOL.idle.items() if k[0] == executable]
        if all(w.ready() for w in ws):
            return
        time.sleep(0.05)


def bench(python: str | None, setup: str, cells: dict[str, str], runs: int, confs: list[str]) -> dict:
    work = Path(tempfile.mkdtemp(prefix="crane-pbench-"))
    kernel = start_kernel(work, python=python)
    # `portable-fresh` runs on a second kernel of the same state (each kernel has its own idle worker: the heads of
    # the first are not consumed by the fresh runs of the second)
    other = start_kernel(work, python=python) if FRESH in confs else None
    try:
        for k in [kernel] + ([other] if other is not None else []):
            r = k.connection.run_cell(setup, timeout=300)
            assert r.status == "ok", r
        exe = kernel.connection.evaluate("__import__('sys').executable")
        out: dict = {}
        for i in range(runs + 1):
            for cname, cell in cells.items():
                for conf in confs:
                    _all_ready(exe, 120.0)
                    HEADS["on"] = conf != FRESH
                    k = other if conf == FRESH and other is not None else kernel
                    t0 = time.monotonic()
                    v = speculate(k.connection, cell, 120.0, sandbox=SandboxOptions(
                        confinement="portable" if conf == FRESH else conf))  # type: ignore[arg-type]
                    wall = (time.monotonic() - t0) * 1000.0
                    HEADS["on"] = True
                    rec = out.setdefault(conf, {}).setdefault(cname, {
                        "mode": v.mode, "layers": list(v.transplant.layers) if v.transplant else [], "verdicts": [],
                        "wall": [], "cell": [], "overhead": [], "export": [], "warm": [], "setup": [], "steps": {}})
                    rec["verdicts"].append(v.verdict)
                    if i > 0:
                        rec["wall"].append(wall)
                        rec["cell"].append(v.elapsed_ms)
                        rec["overhead"].append(v.overhead_ms)
                        rec["setup"].append(v.setup_ms)
                        for step in STEPS:  # the worker's set-up, step by step (its setup line)
                            if step in v.setup_steps:
                                rec["steps"].setdefault(step, []).append(v.setup_steps[step])
                        if v.transplant is not None:  # the copy path: the export's share, and a warm worker?
                            rec["export"].append(v.transplant.export_ms)
                            rec["warm"].append(bool(v.transplant.warm))
        report: dict = {}
        for conf, by_cell in out.items():
            for cname, rec in by_cell.items():
                row = {"mode": rec["mode"], "layers": rec["layers"], "verdicts": rec["verdicts"],
                       "wall_ms": _median(rec["wall"]), "cell_ms": _median(rec["cell"]),
                       "overhead_ms": _median(rec["overhead"]), "setup_ms": _median(rec["setup"])}
                if rec["steps"]:
                    row["steps_ms"] = {k: _median(xs) for k, xs in rec["steps"].items()}
                if rec["export"]:
                    row.update(export_ms=_median(rec["export"]), warm_workers=sum(rec["warm"]))
                base = out.get("os", {}).get(cname)
                if base is not None and conf != "os":
                    key = "wall_ms" if cname == "verdict" else "cell_ms"
                    b = _median(base["wall"] if cname == "verdict" else base["cell"])
                    row["x_os"] = round(row[key] / b, 2) if b else float("nan")
                report.setdefault(conf, {})[cname] = row
        return report
    finally:
        kernel.shutdown()
        if other is not None:
            other.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="warm verdicts per confinement and kernel")
    ap.add_argument("--python", default=str(Path(__file__).resolve().parent.parent / "build/kernel-today/bin/python"))
    ap.add_argument("--only", choices=list(KERNELS), help="one kernel only")
    ap.add_argument("--sandbox", nargs="+", default=["os", "portable", "guard"],
                    choices=["os", "portable", FRESH, "guard"], help="the confinements measured side by side")
    ap.add_argument("--cells", nargs="+", help="only these cells (verdict, calls, groupby, fit)")
    args = ap.parse_args()
    report = {}
    for name, (setup, cells) in KERNELS.items():
        if args.only and name != args.only:
            continue
        chosen = {k: v for k, v in cells.items() if not args.cells or k in args.cells}
        report[name] = bench(args.python, setup, chosen, args.runs, args.sandbox)
        print(json.dumps({name: report[name]}), flush=True)
    POOL.shutdown()


if __name__ == "__main__":
    main()
