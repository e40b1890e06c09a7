"""Transplant worker: the libraries' first calls paid while a warm worker waits, not in its run (issue 45).

Runs in the transplant worker (part of its `_crane_sandbox`): `warm_up()` is called by worker/main.py's
`worker_main` in a WARM worker only, after its imports and before it says it is ready — before any request came,
so nothing of the kernel's state exists in the process and nothing here reads it; a cold worker skips it (its run
is waiting). Only the libraries' own code runs, on constants.

Loading a Keras model that Keras's own pickling copied (shared/keras_graph.py: a layer or model of library classes)
costs a fresh process about twice what it costs the second time: TensorFlow's first op calls (variables, the
random initializers' kernels, assignment), Keras's saving code (its zip/h5 reader, the per-class attribute skip
sets it computes once), an optimizer's first build. Here a small model of library layers is made, compiled, copied
by the same pickling and called once. What it leaves that a run could see is put back: Keras's global state (the
layer-name counters, the name scopes, ...: all but the per-class skip sets, a cache of what a class's attributes
are), Keras's global settings, the `random` module's and numpy's global RNG states, TensorFlow's global seed and
its operation-seed generator. Any failure is ignored (the run then pays those first calls itself, as before).
Last, the garbage is collected and the heap frozen out of the collector's passes (`_freeze_heap`).
"""

from __future__ import annotations

import sys
import time
from typing import Any

_KERAS_CACHES = "saving_attr_skipset_"  # Keras's global-state keys that only cache what a class is


def warm_up() -> dict:
    """Warm the imported libraries that have a warm-up here, then freeze the heap: {library or "gc": ms spent}
    (a library only when its warm-up ran whole)."""
    done: dict = {}
    if "keras" in sys.modules:
        t0 = time.perf_counter()
        try:
            _warm_keras()
            done["keras"] = round((time.perf_counter() - t0) * 1000.0, 3)
        except Exception:  # noqa: BLE001 - a warm-up is never needed: the run does the same calls itself
            pass
    t0 = time.perf_counter()
    _freeze_heap()
    done["gc"] = round((time.perf_counter() - t0) * 1000.0, 3)
    return done


def _freeze_heap() -> None:
    """Collect what the imports and warm-ups left as garbage, then move every object the worker holds out of the
    garbage collector's passes (`gc.freeze`): a collection during the state's load or the cell no longer walks the
    libraries' heap (with TensorFlow, Keras and pandas imported: ~460,000 objects, ~0.2 s of CPU per full pass,
    in whichever step of the run it fell). The run's own objects are collected as before; the frozen ones are the libraries' (a forked
    head does the same before each fork: worker/head.py)."""
    import gc
    gc.collect()
    gc.freeze()


def _warm_keras() -> None:
    import importlib
    import pickle
    import warnings
    keras: Any = sys.modules["keras"]
    np: Any = importlib.import_module("numpy")
    glob: Any = importlib.import_module("keras.src.backend.common.global_state")
    held = _hold_state(glob, np)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, activation="relu"),
                                      keras.layers.Dense(1)])
            model.compile(optimizer="adam", loss="mse")
            copy = pickle.loads(pickle.dumps(model))
            copy(np.zeros((2, 4), dtype="float32"))
            del model, copy
    finally:
        _put_back(held, glob, np)


def _copied(v: Any) -> Any:
    """A container's shallow copy (its contents kept: the warm-up may change it in place), other values as they are."""
    return v.copy() if isinstance(v, dict | list | set) else v


def _hold_state(glob: Any, np: Any) -> dict:
    """What the Keras warm-up could change that a run may see (the module docstring)."""
    import random
    held: dict = {"random": random.getstate(), "numpy": np.random.get_state(),
                  "trackers": [(t, {k: (v, _copied(v)) for k, v in vars(t).items()})
                               for t in (glob.GLOBAL_STATE_TRACKER, glob.GLOBAL_SETTINGS_TRACKER)]}
    ctx = _tf_context()
    if ctx is not None:
        rng = getattr(ctx, "_rng", None)
        held["tf"] = (ctx, getattr(ctx, "_seed", None), rng, rng.getstate() if rng is not None else None)
    return held


def _put_back(held: dict, glob: Any, np: Any) -> None:
    import random
    random.setstate(held["random"])
    np.random.set_state(held["numpy"])
    for tracker, before in held["trackers"]:
        own = vars(tracker)
        caches = {k: v for k, v in own.items() if k.startswith(_KERAS_CACHES) and k not in before}
        own.clear()
        for k, (v, copy) in before.items():
            if copy is not v:  # the same container, its contents as they were
                v.clear()
                if isinstance(v, list):
                    v.extend(copy)
                else:
                    v.update(copy)
            own[k] = v
        own.update(caches)
    if "tf" in held:
        ctx, seed, rng, state = held["tf"]
        ctx._seed, ctx._rng = seed, rng
        if rng is not None:
            rng.setstate(state)


def _tf_context() -> Any:
    """TensorFlow's eager context when TensorFlow is imported, else None."""
    mod = sys.modules.get("tensorflow.python.eager.context")
    return getattr(mod, "context", lambda: None)() if mod is not None else None
