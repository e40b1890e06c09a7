"""Transplant worker: a warm worker's heap frozen out of the garbage collector's passes before its run (issue 45).

Runs in the transplant worker (part of its `_crane_sandbox`): `warm_up()` is called by worker/main.py's
`worker_main` in a WARM worker only, after its imports and before it says it is ready — before any request came,
so nothing of the kernel's state exists in the process; a cold worker skips it (its run is waiting).

With TensorFlow, Keras and pandas imported a worker holds ~460,000 objects, and a full pass of the collector over
them costs ~0.2 s of CPU, in whichever step of the run it falls (the state's load, the cell). Here the garbage the
imports left is collected and every object the worker holds is moved out of the collector's passes (`gc.freeze`);
the run's own objects are collected as before (a forked head does the same before each fork: worker/head.py).

Not here: running the libraries' first calls ahead (a small Keras model made, copied and called before the run).
It halved the state's load, but TensorFlow then starts its runtime threads before the run's confinement, and a
`model.fit` in the run hung until its deadline (test_transplant_keras_graph): withdrawn.
"""

from __future__ import annotations

import time


def warm_up() -> dict:
    """Collect the garbage and freeze the heap: {"gc": ms spent}."""
    import gc
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    return {"gc": round((time.perf_counter() - t0) * 1000.0, 3)}
