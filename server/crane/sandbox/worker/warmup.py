"""Transplant worker: a warm worker's heap frozen out of the garbage collector's passes before its run (issue 45).

Runs in the transplant worker (part of its `_crane_sandbox`): `warm_up()` is called by worker/main.py's
`worker_main` in a WARM worker only, after its imports and before it says it is ready — before any request came,
so nothing of the kernel's state exists in the process; a cold worker skips it (its run is waiting).

With TensorFlow, Keras and pandas imported a worker holds ~460,000 objects, and a full pass of the collector over
them costs ~0.2 s of CPU, in whichever step of the run it falls (the state's load, the cell). Here the garbage the
imports left is collected and every object the worker holds is moved out of the collector's passes (`gc.freeze`);
the run's own objects are collected as before (a forked head does the same before each fork: worker/head.py).

Not here: running the libraries' first calls ahead (a small Keras model made, copied and called before the run).
It halved the state's load but was withdrawn: TensorFlow's first op starts its runtime's thread pools (the process
has 4 threads after the import, 9 after one op), and both copy paths confine after the request came. On the OS path
a run is layered unless the blocking confinement is asked for: the worker (A) clones B into new namespaces, and B is a copy of A's memory without A's threads, so TF's
pools exist there in name only and the run's first op that hands work to them waits forever (reproduced
2026-12-05: test_transplant_keras_graph's fitted-model case after another case, B's `model.fit` a 120 s
`timeout`). On the portable path (and a blocking run) Landlock restricts the calling thread and what it starts (its TSYNC flag is ABI 8,
Linux 7.0), so threads started before it would be outside the wall. A warm-up can only come after the run's whole
confinement (B made, Landlock applied), i.e. with the run's folder and options known before the request: not done.
"""

from __future__ import annotations

import time


def freeze_heap(collect: bool) -> None:
    """Move every object this process holds out of reach of the garbage collector's passes (`gc.freeze`), after
    collecting what is garbage now where `collect`. The one function for a warm worker (`warm_up`, before its run)
    and a forked head (worker/head.py, before each fork: a child's first full pass would copy the head's whole heap,
    copy-on-write; off a verdict's path the head collects, on it only the objects made since the last freeze are
    frozen). The run's own objects are collected as before."""
    import gc
    if collect:
        gc.collect()
    gc.freeze()


def warm_up() -> dict:
    """Collect the garbage and freeze the heap: {"gc": ms spent}."""
    t0 = time.perf_counter()
    freeze_heap(collect=True)
    return {"gc": round((time.perf_counter() - t0) * 1000.0, 3)}
