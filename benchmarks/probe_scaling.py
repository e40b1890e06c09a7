"""How the probe's round trip grows with the kernel's state (`probe_bench.py --scaling`).

One kernel; each case sets up its state, is measured, and is deleted. A case's target cell names a frame and two
of its columns (one numeric with NaNs, one of strings), as the static analysis would ask. Per repeat, interleaved:
an empty private request (the transport alone), a silent execution (`pass`: any execution invalidates what the
probe remembers), the probe ("cold": nothing reusable), its follow-ups while the answer is `resumable` (exact
passes over large columns go on where the last request stopped: "calls/ms to complete"), and the same probe
once more ("warm": nothing ran, nothing left to scan). Reported: medians, and ratios to the empty request
(target: every round trip <= 3x — cold, each follow-up, warm; exit status 1 when a median is over).

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
# Today's libraries (a kernel of envs/kernel-today.txt, `--python`): a compiled Keras model, 1e6-element TF and jax
# tensors, a polars frame of `rows` rows and a LazyFrame over it (its schema only).
TODAY = """
import numpy as np, polars as pl, tensorflow as tf, jax.numpy as jnp
from tensorflow import keras
_rng = np.random.default_rng(0)
model = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(128, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
tt = tf.constant(_rng.random((1000, 1000), dtype=np.float32))
ja = jnp.asarray(_rng.random((1000, 1000), dtype=np.float32))
pf = pl.DataFrame({{"c3": _rng.random({rows}), "city": _rng.choice(["paris", "rome", "oslo"], {rows})}})
lf = pf.lazy().with_columns(pl.col("c3") * 2)
"""
TODAY_REQUEST = ProbeRequest(names=["model", "tt", "ja", "pf", "lf"], columns=["c3", "city"])
CLEAN = "for _k in [k for k in globals() if k in ('df', 'big', 'model', 'tt', 'ja', 'pf', 'lf') or (k[:1] == 'v' and k[1:].isdigit())]: del globals()[_k]"

FRAME_REQUEST = ProbeRequest(
    names=["df", "np"], attrs=["df.c3", "np.nan"], keys=[["df", "city", "columns"]], columns=["c3", "city", "mean"]
)


def cases(max_rows: int, gib: float, today: bool = False) -> list[tuple[str, str, ProbeRequest]]:
    out = []
    if today:
        rows = 5_000_000  # the size, whatever --max-rows says of the pandas frames
        out.append((f"Keras model, 1e6 tf/jax tensors, {rows:.0e}-row polars frame + LazyFrame",
                    TODAY.format(rows=rows), TODAY_REQUEST))
    for rows in (1_000, 10_000, 100_000, 500_000, 1_000_000, 2_000_000, 5_000_000):
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


def _c3(res) -> tuple[object, object]:
    """What a probe answer said about the frame's column c3 (it holds NaNs: an exact count is > 0, a sample says
    only whether it saw one) and about the frame's NaN total."""
    frame = res.facts.get("df")
    c3 = next((c for c in (frame.columns or []) if c.name == "c3"), None) if frame else None
    said = None if c3 is None else (f"{c3.n_nan} exact" if c3.n_nan or not c3.sampled else
                                    "seen in a sample" if c3.has_nan else "none seen in a sample")
    return said, (frame.n_nan is not None) if frame else None


def measure(conn, probe: ProbeClient, request: ProbeRequest, repeats: int) -> dict:
    """Per repeat: an empty request, an execution, the cold probe, its follow-ups while the answer is
    `resumable` (each goes on with the exact passes the last left), and a warm probe once it is complete."""
    empty, cold, follow, warm, cold_in, warm_in, calls, settle = [], [], [], [], [], [], [], []
    last = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        conn.private({})
        empty.append((time.perf_counter() - t0) * 1000)
        conn.private({}, code="pass")  # an execution: nothing the probe remembers may be reused
        t0 = time.perf_counter()
        res = probe.run(request, complete=False)
        cold.append((time.perf_counter() - t0) * 1000)
        cold_in.append(res.elapsed_ms)
        done, n = res, 1
        while done.resumable and n < 200:
            t1 = time.perf_counter()
            done = probe.run(request, complete=False)
            follow.append((time.perf_counter() - t1) * 1000)
            n += 1
        settle.append((time.perf_counter() - t0) * 1000)
        calls.append(n)
        t0 = time.perf_counter()
        again = probe.run(request, complete=False)
        warm.append((time.perf_counter() - t0) * 1000)
        warm_in.append(again.elapsed_ms)
        assert not res.errors and not again.errors and not done.resumable, (res.errors, again.errors)
        last = (res, done, again)
    res, done, again = last
    e = statistics.median(empty)
    cold_said, cold_total = _c3(res)
    done_said, done_total = _c3(done)
    return {
        "empty_ms": round(e, 2),
        "cold_ms": round(statistics.median(cold), 2),
        "warm_ms": round(statistics.median(warm), 2),
        "cold_ratio": round(statistics.median(cold) / e, 2),
        "warm_ratio": round(statistics.median(warm) / e, 2),
        # follow-ups of a resumable answer: each is a probe round trip too (median and worst of them all)
        "followup_ratio": round(statistics.median(follow) / e, 2) if follow else None,
        "followup_max_ratio": round(max(follow) / e, 2) if follow else None,
        "calls_to_complete": statistics.median(calls),
        "ms_to_complete": round(statistics.median(settle), 2),
        "cold_in_kernel_ms": round(statistics.median(cold_in), 2),
        "warm_in_kernel_ms": round(statistics.median(warm_in), 3),
        "warm_reused": again.cached,
        "warm_scanned": again.scanned,
        "time_capped": res.time_capped,
        "payload_bytes": res.payload_bytes,
        "c3_nan": cold_said,  # said by the cold probe
        "frame_nan_exact": cold_total,
        "c3_nan_complete": done_said,  # said once the answer was complete
        "frame_nan_exact_complete": done_total,
        "sampled_columns": sum(1 for c in (done.facts["df"].columns or []) if c.sampled) if "df" in done.facts else None,
    }


def run_scaling(repeats: int, max_rows: int, gib: float, as_json: bool, python: str | None = None) -> int:
    """`python`: the kernel's interpreter (the today environment adds the Keras/TF/jax/polars case first)."""
    results = {}
    with tempfile.TemporaryDirectory() as cwd:
        k = start_kernel(cwd, python=python) if python else start_kernel(cwd)
        try:
            probe = ProbeClient(k.connection)
            probe.ensure_installed()
            for name, setup, request in cases(max_rows, gib, today=python is not None):
                run = k.connection.run_cell(setup, timeout=900)
                if run.status != "ok":
                    print(f"{name}: setup failed: {run.ename}: {run.evalue}", file=sys.stderr)
                    return 2
                probe.run(request)  # warm-up (imports, first calls; completes every pass)
                results[name] = measure(k.connection, probe, request, repeats)
                k.connection.run_cell(CLEAN, timeout=120)
                if not as_json:
                    r = results[name]
                    more = (f"{r['calls_to_complete']:g} calls, {r['ms_to_complete']:.1f} ms to complete (follow-ups "
                            f"x{r['followup_ratio']}, worst x{r['followup_max_ratio']})"
                            if r["calls_to_complete"] > 1 else "complete at once")
                    print(f"{name:34} empty {r['empty_ms']:5.2f} ms | cold {r['cold_ms']:6.2f} ms "
                          f"(x{r['cold_ratio']:4.1f}, in kernel {r['cold_in_kernel_ms']:5.2f}) | {more} | warm "
                          f"x{r['warm_ratio']:4.2f} (reused {r['warm_reused']}, scanned {r['warm_scanned']}) | c3 NaN: "
                          f"{r['c3_nan']} -> {r['c3_nan_complete']}; frame NaN exact {r['frame_nan_exact']} -> "
                          f"{r['frame_nan_exact_complete']}{', TIME-CAPPED' if r['time_capped'] else ''}", flush=True)
        finally:
            k.shutdown()
    worst_warm = max(r["warm_ratio"] for r in results.values())
    worst_cold = max(r["cold_ratio"] for r in results.values())
    worst_follow = max((r["followup_ratio"] or 0.0) for r in results.values())
    summary = {"repeats": repeats, "cases": results, "target_ratio": 3.0, "worst_cold_ratio": worst_cold,
               "worst_followup_ratio": worst_follow, "worst_warm_ratio": worst_warm}  # fmt: skip
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"medians: worst cold ratio x{worst_cold}, worst follow-up ratio x{worst_follow}, worst warm ratio "
              f"x{worst_warm} (target <= 3 each)")
    return 0 if max(worst_cold, worst_follow, worst_warm) <= 3.0 else 1
