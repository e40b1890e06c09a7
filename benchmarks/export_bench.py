#!/usr/bin/env python3
"""Benchmark: the transplant export never holds the user's kernel (issue 30).

In a kernel with a stand-in `jax` module (so the fork sandbox refuses it and the transplant runs), measures:
- a huge cell (8,000 lines and 150 `!` escapes) checked while the user runs `z = 1` 0.2 s later: how long the
  user's cell waits (the old export re-tokenised the cell in the kernel: 285 s);
- a big in-band export (millions of small Python objects the cell reads) and the user's `z = 1` 0.2 s after it
  starts: how long the user's cell waits (the export stops as soon as a request is queued on the kernel's shell
  channel, where kernel/waiting.py can watch it, else at its kernel-time cap `--export-seconds`), and what
  stopped it;
- with `--shrink-rows R`: a frame of R rows (4 columns) checked as a miniature run, so the export first shrinks
  it to row subsets in the kernel (seconds for millions of rows): its export alone, then the user's `z = 1`
  0.2 s after the check starts (while it shrinks): how long the user's cell waits, and what stopped the export;
- an ordinary export (an 8 MB array) and a 300k-deep nested list (refused, the kernel alive);
- for scale, the user's `z = 1` alone on an idle kernel (on a loaded machine a round trip alone takes a while).

Usage: .venv/bin/python benchmarks/export_bench.py [KERNEL_PYTHON] [--objects 3000000] [--export-seconds S]
       [--repeat N] [--shrink-rows R]   (S=60: the cap cannot be what stops the export; N: the big export's
       measure N times)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from crane.kernel.client import KernelConnection
from crane.kernel.manager import start_kernel
from crane.kernel.untouched import watch_target
from crane.sandbox import options
from crane.sandbox.transplant import transplant
from crane.sandbox.verdict import SandboxVerdict

MINI = {"fraction": 0.05, "floor_rows": 64, "min_rows": 2000, "relative": 0.05, "seed": 0}


def user_wait_during(c: KernelConnection, source: str, miniature: dict | None = None) -> tuple[float, SandboxVerdict]:
    """Start checking `source`; 0.2 s later the user runs `z = 1` on a client of their own: its wait, the verdict."""
    user = KernelConnection.attach(watch_target(c))
    box: dict[str, SandboxVerdict] = {}
    t = threading.Thread(target=lambda: box.setdefault("v", transplant(c, source, 30.0, request_timeout=30.0,
                                                                       miniature=miniature)))
    t.start()
    time.sleep(0.2)
    t1 = time.monotonic()
    r = user.run_cell("z = 1", timeout=600)
    waited = time.monotonic() - t1
    t.join()
    user.client.stop_channels()
    assert r.status == "ok", r
    return waited, box["v"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("python", nargs="?", default=sys.executable)
    ap.add_argument("--objects", type=int, default=3_000_000)
    ap.add_argument("--export-seconds", type=float, default=None,
                    help="the export's kernel-time cap (watched and not: both settings)")
    ap.add_argument("--repeat", type=int, default=1, help="measure the big export's wait this many times")
    ap.add_argument("--shrink-rows", type=int, default=0, help="also measure a frame of this many rows shrunk")
    a = ap.parse_args()
    if a.export_seconds is not None:
        options.configure(options.SandboxOptions(export_seconds=a.export_seconds,
                                                 watched_export_seconds=a.export_seconds))
    k = start_kernel(Path(tempfile.mkdtemp(prefix="crane-export-bench-")), python=a.python)
    c = k.connection
    try:
        setup = ("import sys, types, numpy as np\nsys.modules.setdefault('jax', types.ModuleType('jax'))\na = 1\n"
                 f"X = np.random.rand(2000, 500)\nbig = [(i, str(i)) for i in range({a.objects})]")
        assert c.run_cell(setup, timeout=600).status == "ok"
        user = KernelConnection.attach(watch_target(c))
        t1 = time.monotonic()
        assert user.run_cell("z = 1", timeout=600).status == "ok"
        print(f"the user's z = 1 alone (nothing else running): {time.monotonic() - t1:.2f} s")
        user.client.stop_channels()
        huge = "\n".join(f"v{i} = a + {i}" for i in range(8000)) + "\n" + "\n".join(
            f"!echo {{a}} {i}" for i in range(150))
        waited, v = user_wait_during(c, huge)
        print(f"huge cell ({len(huge)} bytes): the user's z = 1 waited {waited:.2f} s; verdict {v.verdict}")
        cap = options.active().watched_export_seconds
        for _ in range(a.repeat):
            waited, v = user_wait_during(c, "len(big)")
            t = v.transplant
            print(f"big in-band export ({a.objects:,} tuples, cap {cap:g} s of kernel time): the user's z = 1 waited "
                  f"{waited:.2f} s; verdict {v.verdict} ({v.reason}); export_ms {t.export_ms if t else None}")
        if a.shrink_rows:
            r = a.shrink_rows
            assert c.run_cell(f"import pandas as pd\nframe = pd.DataFrame({{'f': np.arange({r}, dtype=float), "
                              f"'i': np.arange({r}) % 7, 'c': np.array(['x', 'y', 'z'], dtype=object)"
                              f"[np.arange({r}) % 3], 'd': np.array(['p', 'q'], dtype=object)[np.arange({r}) % 2]}})",
                              timeout=600).status == "ok"
            cell = "frame.groupby('c')['f'].mean()"
            v = transplant(c, cell, 30.0, request_timeout=60.0, miniature=MINI)
            t = v.transplant
            print(f"frame of {r:,} rows shrunk alone: verdict {v.verdict} ({v.reason}); export_ms "
                  f"{t.export_ms if t else None}")
            for _ in range(a.repeat):
                waited, v = user_wait_during(c, cell, MINI)
                print(f"frame of {r:,} rows shrunk (cap {cap:g} s): the user's z = 1 waited {waited:.2f} s; verdict "
                      f"{v.verdict} ({v.reason})")
        v = transplant(c, "X.mean()", 30.0)
        print(f"8 MB array: verdict {v.verdict}, export_ms {v.transplant.export_ms if v.transplant else None}, "
              f"what would stop it for a queued request: {v.transplant.export_watch if v.transplant else None} "
              "(None: only its kernel-time cap)")
        c.run_cell("sys.setrecursionlimit(1_000_000)\ndeep = None\nfor _i in range(300_000):\n    deep = [deep]",
                   timeout=120)
        t0 = time.monotonic()
        v = transplant(c, "print(deep is not None)", 30.0)
        print(f"300k-deep list: {v.verdict} in {time.monotonic() - t0:.2f} s ({v.reason}); kernel alive: "
              f"{c.evaluate('1 + 1') == 2}")
    finally:
        k.shutdown()


if __name__ == "__main__":
    main()
