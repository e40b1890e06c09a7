"""Fork sandbox and sessions, in the process that runs the cell: the pools an earlier cell made, working again.

A forked process has only the thread that forked. A pool or executor an earlier cell made runs on threads (and
worker processes) of the kernel: in the fork, `ThreadPoolExecutor.submit` finds the kernel's idle worker counted
and starts none, `multiprocessing`'s `Pool`/`ThreadPool` have no handler threads left to hand a task to the workers
(whose processes, for a `Pool`, are the kernel's children, not the fork's), a `ProcessPoolExecutor` no manager
thread: the cell's `pool.map(...)` waits for ever (a certain false "timeout") or its `result(timeout=5)` raises a
certain false `TimeoutError`, where the kernel answers at once.

So before the cell's statements (kernel/run._cell_begins, every path that runs a cell in a forked process: the
one-shot fork run, a fork session's commands, a transplant or portable session's commands forked from their
head), each pool or executor the cell names that is running (not shut down) and had started its workers is given
a twin made here with the same settings (workers, initializer and its arguments, tasks per child, context,
thread-name prefix), and the named object takes the twin's instance dict (`obj.__dict__ = twin.__dict__`: one
dict for both, so the twin's threads, which hold the twin, and the cell's calls on the object see the same state).
The twin is kept alive for the process's life (its finalizer would end its workers). Exact library types only (a
subclass of the notebook's is left as it is). A `multiprocessing.Pool` is revived only in layered mode (its
twin starts processes, which the blocking confinement of one-shot runs and fork sessions refuses; a `ThreadPool`'s
twin needs a semaphore that confinement refuses too): where a named pool needs a twin and gets none, the cell
does not run and the run is "blocked", saying why, instead of waiting for ever or raising a `TimeoutError` the
kernel would not. Work the kernel's pool had queued and not finished stays the kernel's.
What is not followed: a pool held inside another value (an attribute, a list), or used by a notebook function
the cell calls without naming it.
"""

from __future__ import annotations

import sys
from typing import Any

_FP_KEEP: list = []  # the twins, for the process's life


def _fp_class(module: str, name: str) -> Any:
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls if type(cls) is type else None


def _fp_kinds() -> tuple:
    """The pool and executor classes, where their modules are loaded (None for the others)."""
    return (_fp_class("concurrent.futures.thread", "ThreadPoolExecutor"),
            _fp_class("concurrent.futures.process", "ProcessPoolExecutor"),
            _fp_class("multiprocessing.pool", "ThreadPool"), _fp_class("multiprocessing.pool", "Pool"))


def _fp_twin(v: Any, kinds: tuple, processes: bool) -> Any:
    """A new pool or executor with `v`'s settings, when `v` is a running one of an exact library type (`kinds`:
    `_fp_kinds()`) whose workers were started (else None). `processes`: a `multiprocessing.Pool`, which starts its
    worker processes as it is made, only where this process may start processes (layered mode: elsewhere the
    confinement would refuse them in CRANE's name, before the cell)."""
    t = type(v)
    if not any(t is k for k in kinds if k is not None):
        return None  # (before any attribute is read: nothing of the notebook's runs here)
    d = v.__dict__
    if t is kinds[0]:
        if d.get("_shutdown") or d.get("_broken") or not d.get("_threads"):
            return None
        return t(max_workers=d["_max_workers"], thread_name_prefix=d.get("_thread_name_prefix", ""),
                 initializer=d.get("_initializer"), initargs=d.get("_initargs", ()))
    if t is kinds[1]:
        if d.get("_shutdown_thread") or d.get("_broken") or not d.get("_processes"):
            return None
        extra = {"max_tasks_per_child": d["_max_tasks_per_child"]} if d.get("_max_tasks_per_child") else {}
        return t(max_workers=d["_max_workers"], mp_context=d.get("_mp_context"), initializer=d.get("_initializer"),
                 initargs=d.get("_initargs", ()), **extra)
    # multiprocessing's ThreadPool (kinds[2]) or Pool (kinds[3])
    pool_mod = sys.modules.get("multiprocessing.pool")
    if d.get("_state") != getattr(pool_mod, "RUN", None) or not d.get("_pool"):
        return None
    settings = {"processes": d["_processes"], "initializer": d.get("_initializer"), "initargs": d.get("_initargs", ())}
    if t is kinds[2]:
        return t(**settings)
    if not processes:
        raise _FpCannot("its worker processes cannot be started under the blocking confinement")
    return t(**settings, maxtasksperchild=d.get("_maxtasksperchild"), context=d.get("_ctx"))


class _FpCannot(Exception):
    pass


def revive_pools(ns: Any, names: list, processes: bool) -> tuple[list[str], list[str]]:
    """In the process about to run the cell: the running pools and executors of `ns` the cell names (`names`: the
    names its code reads, kernel/miniature.cell_names: not its comments or strings) get working twins (see the
    module; `processes`: see `_fp_twin`). Returns the names revived, and why each one that needed a twin got none
    (the run then cannot be the kernel's: the caller ends it "blocked" before the cell runs, never a timeout or a
    certain crash or clean run)."""
    revived: list[str] = []
    failed: list[str] = []
    kinds = _fp_kinds()  # (once per cell: every name is checked against them)
    if type(ns) is not dict or type(names) is not list or not any(kinds):
        return revived, failed
    for name in names:
        v = dict.get(ns, name) if type(name) is str else None
        if v is None:
            continue
        try:
            twin = _fp_twin(v, kinds, processes)
        except Exception as exc:  # (refused by the confinement, a setting the constructor no longer takes)
            what = str(exc) if type(exc) is _FpCannot else f"{type(exc).__name__}: {exc}"
            failed.append(f"crane sandbox: the pool `{name}` an earlier cell made runs on the kernel's threads and "
                          f"processes, which are not in the sandbox, and could not be made again there ({what})")
            continue
        if twin is None:
            continue
        _FP_KEEP.append(twin)
        v.__dict__ = twin.__dict__
        revived.append(name)
    return revived, failed
