"""Fork sandbox, kernel side: the notebook's threads still running when the kernel forks.

A forked child has only the thread that forked: every other thread of the kernel is gone there (threading marks
them stopped, `join()` returns at once). A thread an earlier cell started and that still runs (a training loop
filling `results`, a producer feeding a queue, a `Timer`, a pool's workers) goes on in the kernel while the cell
runs, so what the child saw is not what the kernel would: a crash or a clean run there is only "likely" (red team
round 17h, F7: `worker.join(); results['score']` was a certain KeyError). `notebook_threads()` names them, read in
the kernel just before the fork (kernel/entry.py) and reported by the child's setup line (kernel/isolation.py);
the daemon makes the verdict "likely" (sandbox/assemble.py).

Which threads count: every live thread but the forking one, the main thread, threads not started by `threading`
(`_DummyThread`: a library's native thread that called into Python), the kernel's own machinery (a class or
target of ipykernel, IPython, jupyter_client, pyzmq, tornado, debugpy, CRANE) and a library's own thread class
whose `run` is the library's (tqdm's monitor, TensorBoard's writer), and a plain `Thread` whose target is a
library's and whose every frame now runs library code (a queue's feeder, a pool's idle worker: as
kernel/armed._library_thread; joblib's reusable executor is forgotten in the child anyway, kernel/isolation). Counted:
a `Timer`, a `Thread` running the notebook's code or a C callable, a class of the notebook's. Runs in the kernel: only exact types, C-level reads of classes and
of the thread's instance dict (its keys proven exact `str`), the functions' own C slots; nothing of the notebook's
or of a library's is called.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from typing import Any

from crane.kernel_common.ipython_shell import instance_dict  # kernel: strip
from crane.sandbox.kernel.atfork import is_library_file, is_library_handler  # kernel: strip

_FT_ACTIVE: Any = threading._active  # type: ignore[attr-defined]  # ident -> Thread (bound at install)
_FT_GET_IDENT = threading.get_ident
_FT_FRAMES = sys._current_frames
_FT_THREAD, _FT_TIMER = threading.Thread, threading.Timer
_FT_SKIP = (threading._MainThread, threading._DummyThread)  # type: ignore[attr-defined]
_FT_MODULE = type.__dict__["__module__"]
_FT_MRO = type.__dict__["__mro__"]
_FT_CLASS_DICT = type.__dict__["__dict__"]
_FT_FN_MODULE = types.FunctionType.__dict__["__module__"]
_FT_METHOD_FUNC = types.MethodType.__dict__["__func__"]
_FT_METHOD_SELF = types.MethodType.__dict__["__self__"]
_FT_PARTIAL = functools.partial
_FT_MACHINERY = frozenset(("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "debugpy", "pydevd",
                           "_pydevd_bundle", "_pydev_bundle", "comm", "traitlets", "matplotlib_inline", "crane"))
_FT_LIVE: dict = {"names": []}  # set in the kernel just before the fork: the child reports it


def _ft_machinery(module: Any) -> bool:
    if type(module) is not str:
        return False
    root = module.partition(".")[0]
    return root in _FT_MACHINERY or root.startswith("_crane")  # (CRANE's kernel modules: _crane_sandbox, ...)


def _ft_target_module(fn: Any) -> Any:
    """The module of the code a thread's target runs (a function's, a bound method's class's), through C slots."""
    for _ in range(8):
        kind = type(fn)
        if kind is types.FunctionType:
            return _FT_FN_MODULE.__get__(fn, kind)
        if kind is types.MethodType:
            owner = type(_FT_METHOD_SELF.__get__(fn, kind))
            mod = _FT_MODULE.__get__(owner, type)
            if _ft_machinery(mod):
                return mod
            fn = _FT_METHOD_FUNC.__get__(fn, kind)
            continue
        if kind is _FT_PARTIAL:
            fn = fn.func  # (a C member of the exact partial type)
            continue
        return None
    return None


def _ft_run(cls: type) -> Any:
    """The `run` the thread's class has (the first of its MRO's dicts that defines one)."""
    for k in _FT_MRO.__get__(cls, type):
        d = _FT_CLASS_DICT.__get__(k, type)
        if all(type(key) is str for key in d) and "run" in d:
            return d["run"]
    return None


def _ft_idle_library(ident: int) -> bool:
    """Every frame of the thread's stack now runs a library's code (by its code's file name under the library
    roots: kernel/atfork), read through `sys._current_frames` (exact frame and code objects)."""
    frame = dict.get(_FT_FRAMES(), ident)
    if frame is None:
        return False
    for _ in range(256):
        if frame is None:
            return True
        if not is_library_file(frame.f_code.co_filename):
            return False
        frame = frame.f_back
    return False


def notebook_threads() -> list[str]:
    """The names of the kernel's live threads that do the notebook's work (see the module), at most 8."""
    me = _FT_GET_IDENT()
    out: list[str] = []
    for ident, t in dict.items(dict.copy(_FT_ACTIVE)):
        cls = type(t)
        if ident == me or any(cls is k for k in _FT_SKIP):
            continue
        if _ft_machinery(_FT_MODULE.__get__(cls, type)):
            continue
        own = instance_dict(t)
        if type(own) is not dict or not all(type(key) is str for key in own):
            out.append("a thread")
            continue
        run = _ft_run(cls)
        if cls is not _FT_THREAD and cls is not _FT_TIMER and run is not _ft_run(_FT_THREAD) \
                and is_library_handler(run):
            continue  # a library's own thread class (its `run` is the library's)
        target = dict.get(own, "_target") if cls is not _FT_TIMER else dict.get(own, "function")
        if target is not None and _ft_machinery(_ft_target_module(target)):
            continue
        if run is _ft_run(_FT_THREAD) and target is not None and is_library_handler(target) \
                and _ft_idle_library(ident):  # (a Thread's own `run`: multiprocessing's ThreadPool workers too)
            continue  # a library's idle thread (a queue's feeder, a pool's idle worker): as armed._library_thread
        name = dict.get(own, "_name")
        out.append(name if type(name) is str else "a thread")
        if len(out) >= 8:
            break
    return out


def note_notebook_threads() -> None:
    """Called in the kernel just before the fork: the child's setup line reports these."""
    try:
        _FT_LIVE["names"] = notebook_threads()
    except Exception:  # (a thread ended while it was read: none is reported rather than a failed run)
        _FT_LIVE["names"] = []
