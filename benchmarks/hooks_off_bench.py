"""Issue 42 (h7): the cost of kernel/hooks_off.py (a quiet module's request run inside a trace call of its own) on a
probe and a transplant export, before/after in one process, alternating.

Usage: python benchmarks/hooks_off_bench.py [kernel python] [rounds]. A kernel of that interpreter (default: this
one) holds a 1,000-row DataFrame and a list; each round runs one probe (`ProbeClient.run`: `df`, `x`, `df.a`) and one
export (`transplant._export` of `y = len(df) + len(x)`, one request) with the first step off ("before":
`private_module.guarded` replaced by the identity) and on ("after"), in alternating order, after one warm-up of each
(the installs). Prints the median, min and max of each, in ms, and the load average."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import crane.kernel.private_module as pm
from crane.kernel.manager import start_kernel
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest
from crane.sandbox import transplant
from crane.sandbox.channel import PrivateDir

python = sys.argv[1] if len(sys.argv) > 1 else sys.executable
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
guarded = pm.guarded


def first_step(on: bool) -> None:
    pm.guarded = guarded if on else (lambda expr, *_: expr)  # type: ignore[assignment]


def export(conn) -> float:
    pdir = PrivateDir()
    try:
        t = time.perf_counter()
        transplant._export(conn, pdir, "y = len(df) + len(x)", timeout=30, one_request=True)
        return time.perf_counter() - t
    finally:
        pdir.cleanup()


with start_kernel(Path(tempfile.mkdtemp(prefix="hooks-off-bench-")), python=python) as k:
    conn = k.connection
    assert conn.run_cell("import pandas as pd, numpy as np\ndf = pd.DataFrame({'a': np.arange(1000), "
                         "'b': np.arange(1000.0)})\nx = list(range(100))", timeout=120).status == "ok"
    probe = ProbeClient(conn)
    request = ProbeRequest(names=["df", "x"], attrs=["df.a"])
    times: dict[tuple[str, bool], list[float]] = {(w, on): [] for w in ("probe", "export") for on in (False, True)}
    for on in (True, False):
        first_step(on)
        probe.run(request, timeout=30)
        export(conn)
    for i in range(rounds):
        for on in ((True, False) if i % 2 else (False, True)):
            first_step(on)
            t = time.perf_counter()
            probe.run(request, timeout=30)
            times[("probe", on)].append(time.perf_counter() - t)
            times[("export", on)].append(export(conn))
    for (what, on), ts in times.items():
        print(f"{what:6s} {'after' if on else 'before':6s} median {statistics.median(ts) * 1e3:7.1f} ms "
              f"(n={len(ts)}, min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f})")
print("load average", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
