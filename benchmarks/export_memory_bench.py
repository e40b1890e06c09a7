#!/usr/bin/env python3
"""Benchmark: what a transplant export costs the user's kernel in memory (issue 42, h5: the pickler's memo).

In a kernel with a stand-in `cupy` module (so the fork sandbox refuses it and the transplant runs), the cell reads
`d`, a dict of N items (int keys, distinct str values: one memo entry each, the pickler's memo keeps every object
it wrote so that a second reference is written as a reference). The kernel's peak resident size is reset
(/proc/PID/clear_refs, 5) before the export and read (VmHWM) after it: the export's peak over the kernel's
resident size before it, its resident size after it (what the kernel keeps: freed memory an allocator holds),
the export's outcome and its time.

Usage: .venv/bin/python benchmarks/export_memory_bench.py [KERNEL_PYTHON] [--items 3000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from crane.kernel.manager import start_kernel
from crane.sandbox.transplant import transplant


def _status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) >> 10  # MiB
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("python", nargs="?", default=sys.executable)
    ap.add_argument("--items", type=int, default=3_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        k = start_kernel(Path(tmp), python=a.python)
        try:
            c = k.connection
            setup = ("import sys, types, os\nsys.modules['cupy'] = types.ModuleType('cupy')\n"
                     f"d = {{i: str(i) for i in range({a.items})}}\nprint(os.getpid())")
            r = c.run_cell(setup, timeout=600)
            assert r.status == "ok", r
            pid = int(r.stdout.strip())
            for i in range(a.repeat):
                before = _status(pid)["VmRSS"]
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")  # the peak resident size reset to the current one
                t0 = time.monotonic()
                v = transplant(c, "n = len(d)", 60.0, request_timeout=60.0)
                took = time.monotonic() - t0
                st = _status(pid)
                print(f"run {i + 1}: items={a.items} kernel rss before={before} MiB, export peak +{st['VmHWM'] - before} "
                      f"MiB, rss after +{st['VmRSS'] - before} MiB; verdict={v.verdict} ({(v.reason or '')[:120]}) "
                      f"copied={v.transplant.bytes >> 20 if v.transplant else '-'} MiB; {took:.1f} s", flush=True)
        finally:
            k.shutdown()


if __name__ == "__main__":
    main()
