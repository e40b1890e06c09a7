"""Issue 42: the first install of `_crane_transplant` + `_crane_cloudpickle` in a kernel, before/after by PYTHONPATH.

Usage: PYTHONPATH=<tree>/server python benchmarks/install_bench.py <kernel python> <rounds> (each round pops CRANE's
private modules first; median milliseconds of each install request, round trip included)."""
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import crane
from crane.kernel.manager import start_kernel
from crane.kernel.private_module import ModuleClient
from crane.sandbox.transplant import CLOUDPICKLE_MODULE, TRANSPLANT_MODULE

py, rounds = sys.argv[1], int(sys.argv[2])
k = start_kernel(Path(tempfile.mkdtemp()), python=py)
try:
    c = k.connection
    assert c.run_cell("import numpy as np, pandas as pd, sys, types\nsys.modules.setdefault('jax', types.ModuleType('jax'))", timeout=120).status == "ok"
    out = []
    for i in range(rounds + 1):
        c.run_cell("import sys\nfor _n in ('_crane_transplant', '_crane_cloudpickle'): sys.modules.pop(_n, None)", timeout=30)
        t = time.perf_counter()
        ModuleClient(c, TRANSPLANT_MODULE).ensure_installed(timeout=30)
        t1 = time.perf_counter()
        ModuleClient(c, CLOUDPICKLE_MODULE).ensure_installed(timeout=30)
        t2 = time.perf_counter()
        if i:
            out.append(((t1 - t) * 1000, (t2 - t1) * 1000))
    print(json.dumps({"tree": crane.__file__, "transplant_ms": statistics.median(a for a, _ in out),
                      "cloudpickle_ms": statistics.median(b for _, b in out)}))
finally:
    k.shutdown()
