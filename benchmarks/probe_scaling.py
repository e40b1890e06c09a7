"""How the probe's round trip grows with the kernel's state (`probe_bench.py --scaling`).

One kernel; each case sets up its state, is measured, and is deleted. A case's target cell names a frame and two
of its columns (one numeric with NaNs, one of strings), as the static analysis would ask. Per repeat, interleaved:
an empty private request (the transport alone), a silent execution (`pass`: any execution invalidates what the
probe remembers), the probe ("cold": nothing reusable), the same probe again ("warm": nothing ran, nothing to
scan). Reported: medians, and ratios to the empty request (target for the warm probe: <= 3x).

Frames come in two memory layouts: "columns" (built from one array per column, as `read_csv` builds them: each
column contiguous) and "2-D" (built from one 2-D array: each column strided across the rows, the costly case).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time

from crane.kernel.manager import start_kernel
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest

FRAME = """
import numpy as np, pandas as pd
_rng = np.random.default_rng(0)
_n = {rows}
if {two_d}:
    df = pd.DataFrame(_rng.random((_n, 30)), columns=[f"c{{i}}" for i in range(30)])
else:
    df = pd.DataFrame({{f"c{{i}}": _rng.random(_n) for i in range(30)}})
df.loc[::997, "c3"] = np.nan
df["city"] = _rng.choice(np.array(["paris", "rome", "oslo", "n/a"], dtype=object), _n)
"""
WIDE = """
import numpy as np, pandas as pd
df = pd.DataFrame(np.random.default_rng(0).random((1000, 2000)), columns=[f"f{i}" for i in range(2000)])
df.iloc[::50, 7] = np.nan
"""
NAMESPACE = """
import numpy as np, pandas as pd
for _i in range(20000):
    globals()[f"v{_i}"] = _i if _i % 3 else [_i]
df = pd.DataFrame({"c3": np.arange(1000.0), "city": ["x"] * 1000})
"""
ARRAY = """
import numpy as np
big = np.ones(({rows}, 8192))
big[::997, ::13] = np.nan
"""
CLEAN = "for _k in [k for k in globals() if k in ('df', 'big') or (k[:1] == 'v' and k[1:].isdigit())]: del globals()[_k]"

FRAME_REQUEST = ProbeRequest(
    names=["df", "np"], attrs=["df.c3", "np.nan"], keys=[["df", "city", "columns"]], columns=["c3", "city", "mean"]
)


def cases(max_rows: int, gib: float) -> list[tuple[str, str, ProbeRequest]]:
    out = []
    for rows in (1_000, 10_000, 100_000, 1_000_000, 5_000_000):
        if rows <= max_rows:
            for two_d in (False, True):
                layout = "2-D" if two_d else "columns"
                out.append((f"{rows:.0e} rows x 31, {layout}", FRAME.format(rows=rows, two_d=two_d), FRAME_REQUEST))
    out.append(("1e3 rows x 2000 columns", WIDE, ProbeRequest(names=["df"], columns=["f7", "f1500"])))
    out.append(("3 names of 20,000 variables", NAMESPACE,
                ProbeRequest(names=["df", "v17", "v18"], attrs=["df.c3"], columns=["c3"])))
    rows = max(1, int(gib * (1 << 30) / (8192 * 8)))
    out.append((f"{gib:g} GiB array", ARRAY.format(rows=rows), ProbeRequest(names=["big", "np"], attrs=["big.shape"])))
    return out


def measure(conn, probe: ProbeClient, request: ProbeRequest, repeats: int) -> dict:
    empty, cold, warm, cold_in, warm_in = [], [], [], [], []
    last = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        conn.private({})
        empty.append((time.perf_counter() - t0) * 1000)
        conn.private({}, code="pass")  # an execution: nothing the probe remembers may be reused
        t0 = time.perf_counter()
        res = probe.run(request)
        cold.append((time.perf_counter() - t0) * 1000)
        cold_in.append(res.elapsed_ms)
        t0 = time.perf_counter()
        again = probe.run(request)
        warm.append((time.perf_counter() - t0) * 1000)
        warm_in.append(again.elapsed_ms)
        assert not res.errors and not again.errors, (res.errors, again.errors)
        last = (res, again)
    res, again = last
    e = statistics.median(empty)
    frame = res.facts.get("df")
    c3 = next((c for c in (frame.columns or []) if c.name == "c3"), None) if frame else None
    return {
        "empty_ms": round(e, 2),
        "cold_ms": round(statistics.median(cold), 2),
        "warm_ms": round(statistics.median(warm), 2),
        "cold_ratio": round(statistics.median(cold) / e, 2),
        "warm_ratio": round(statistics.median(warm) / e, 2),
        "cold_in_kernel_ms": round(statistics.median(cold_in), 2),
        "warm_in_kernel_ms": round(statistics.median(warm_in), 3),
        "warm_reused": again.cached,
        "warm_scanned": again.scanned,
        "time_capped": res.time_capped,
        "payload_bytes": res.payload_bytes,
        # what the cold probe said about the mentioned column c3 (it holds NaNs: an exact count is > 0, a
        # sample says only whether it saw one) and about the frame's total
        "c3_nan": None if c3 is None else (f"{c3.n_nan} exact" if c3.n_nan or not c3.sampled else
                                            "seen in a sample" if c3.has_nan else "none seen in a sample"),
        "frame_nan_exact": (frame.n_nan is not None) if frame else None,
        "sampled_columns": sum(1 for c in (frame.columns or []) if c.sampled) if frame else None,
    }


def run_scaling(repeats: int, max_rows: int, gib: float, as_json: bool) -> int:
    results = {}
    with tempfile.TemporaryDirectory() as cwd:
        k = start_kernel(cwd)
        try:
            probe = ProbeClient(k.connection)
            probe.ensure_installed()
            for name, setup, request in cases(max_rows, gib):
                run = k.connection.run_cell(setup, timeout=900)
                if run.status != "ok":
                    print(f"{name}: setup failed: {run.ename}: {run.evalue}", file=sys.stderr)
                    return 2
                probe.run(request)  # warm-up (imports, first calls)
                results[name] = measure(k.connection, probe, request, repeats)
                k.connection.run_cell(CLEAN, timeout=120)
                if not as_json:
                    r = results[name]
                    print(f"{name:34} empty {r['empty_ms']:5.2f} ms | cold {r['cold_ms']:7.2f} ms "
                          f"(x{r['cold_ratio']:5.1f}, in kernel {r['cold_in_kernel_ms']:6.2f}) | warm "
                          f"{r['warm_ms']:5.2f} ms (x{r['warm_ratio']:4.2f}, reused {r['warm_reused']}, scanned "
                          f"{r['warm_scanned']}, in kernel {r['warm_in_kernel_ms']}) | c3 NaN {r['c3_nan']}, "
                          f"frame NaN exact "
                          f"{r['frame_nan_exact']}, sampled columns "
                          f"{r['sampled_columns']}{', TIME-CAPPED' if r['time_capped'] else ''}", flush=True)
        finally:
            k.shutdown()
    worst_warm = max(r["warm_ratio"] for r in results.values())
    summary = {"repeats": repeats, "cases": results, "worst_warm_ratio": worst_warm, "target_warm_ratio": 3.0,
               "worst_cold_ratio": max(r["cold_ratio"] for r in results.values())}
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"worst warm ratio x{worst_warm} (target <= 3); worst cold ratio x{summary['worst_cold_ratio']}")
    return 0 if worst_warm <= 3.0 else 1
