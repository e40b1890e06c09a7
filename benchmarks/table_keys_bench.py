#!/usr/bin/env python3
"""Benchmark: the export's table-key proof (`kernel/lookups.py` `odd_key()`, issue 42) on a loaded interpreter.

Every transplant and portable export first proves that `sys.modules`, every plain module's namespace,
`copyreg.dispatch_table` and `copyreg._extension_registry` hold no key whose comparison could run code. Its cost
grows with what the kernel imported. This starts a kernel of `KERNEL_PYTHON`, imports the libraries named (those
installed; by default TensorFlow, JAX, Keras, polars and scikit-learn, as a deep-learning notebook would), installs
CRANE's export module with one transplant, then, in the kernel:
- times `odd_key()` itself `--rounds` times (min / median / max, ms), with the count of modules and namespace keys
  it proves;
- the export's own `export_ms` of `--exports` transplants of a trivial cell, for scale (the proof is part of it).
The timing cell runs in the kernel (a benchmark, not CRANE: it reads CRANE's private module by name).

Usage: .venv/bin/python benchmarks/table_keys_bench.py [KERNEL_PYTHON] [--libs tensorflow,jax,keras,polars,sklearn]
       [--rounds 20] [--exports 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from crane.kernel.manager import start_kernel
from crane.sandbox.transplant import transplant

TIMING = """
import time as _t, sys as _s, types as _ty
_ok = _s.modules['_crane_transplant'].__dict__['odd_key']
_ms = []
for _i in range({rounds}):
    _t0 = _t.perf_counter()
    _r = _ok()
    _ms.append((_t.perf_counter() - _t0) * 1000.0)
    assert _r is None, _r
_mods = [m for m in list(_s.modules.values()) if type(m) is _ty.ModuleType]
_BENCH = (_ms, len(_s.modules), len(_mods), sum(len(vars(m)) for m in _mods))
del _t, _s, _ty, _ok, _ms, _i, _t0, _r, _mods
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("python", nargs="?", default=sys.executable)
    ap.add_argument("--libs", default="tensorflow,jax,keras,polars,sklearn")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--exports", type=int, default=5)
    a = ap.parse_args()
    k = start_kernel(Path(tempfile.mkdtemp(prefix="crane-table-keys-")), python=a.python)
    c = k.connection
    try:
        libs = [n for n in a.libs.split(",") if n]
        setup = ("import os, sys, types, importlib, importlib.util\nos.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')\n"
                 f"LOADED = [n for n in {libs!r} if importlib.util.find_spec(n) is not None]\n"
                 "for _n in LOADED:\n    importlib.import_module(_n)\n"
                 "if 'jax' not in sys.modules:\n    sys.modules['jax'] = types.ModuleType('jax')  # transplant path\n"
                 "x = 1")
        run = c.run_cell(setup, timeout=600)
        assert run.status == "ok", run
        print(f"kernel {a.python}: libraries imported {c.evaluate('LOADED')}")
        exports = []
        for i in range(a.exports + 1):  # (the first installs CRANE's modules: not counted)
            v = transplant(c, "print(x)", 60.0)
            assert v.verdict == "no-crash", v
            if i and v.transplant is not None:
                exports.append(v.transplant.export_ms)
        run = c.run_cell(TIMING.format(rounds=a.rounds), timeout=600)
        assert run.status == "ok", run
        ms, n_modules, n_plain, n_keys = c.evaluate("_BENCH")
        print(f"odd_key() over {n_modules:,} modules ({n_plain:,} plain, {n_keys:,} namespace keys), {a.rounds} rounds: "
              f"min {min(ms):.1f} ms, median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms")
        if exports:
            print(f"the whole export of `print(x)` ({len(exports)} transplants): median export_ms "
                  f"{statistics.median(exports):.1f} (min {min(exports):.1f}, max {max(exports):.1f})")
    finally:
        k.shutdown()


if __name__ == "__main__":
    main()
