"""Portable sandbox, worker side: process pools inside the run, where the Linux layer holds the worker (issue 45).

Where Landlock (and seccomp) confine the worker, every process it forks inherits them, and a fork child is a copy
of the worker: the lean guard's replacements and the audit hook hold in it too (worker/guard.py `forks_a_child`,
worker/portable.py). There the run's pools are real processes, as in the kernel:
- `multiprocessing.Pool`, `concurrent.futures.ProcessPoolExecutor` and a `Process` of the fork start method start
  their processes (the guard lets `Pool`/`ProcessPoolExecutor` through where they fork: `CallGuard.pools`);
- **joblib** (scikit-learn's `n_jobs`, `Parallel`): its process backend, loky, starts a fresh interpreter (an
  `exec`, which Landlock refuses). `install_joblib` puts a fork pool in its place under its name
  (`BACKENDS["loky"]`, the default): a `multiprocessing` fork pool whose tasks travel with cloudpickle as loky's do
  (lambdas and the notebook's functions work as in the kernel), of at most `run_cpus()` processes (`n_jobs=-1`,
  and any larger count, capped to the CPUs the run may use: its affinity). `prefer="threads"`,
  `require="sharedmem"`, `backend="threading"` and `backend="multiprocessing"` keep joblib's own backends. A
  joblib imported later (by the cell) gets it right after `joblib.parallel` executes (a `sys.meta_path` finder).
Where no OS layer ran (`--sandbox guard`, other platforms) joblib runs its tasks in the worker's process
(`sequential_joblib`: its sequential backend, `JOBLIB_MULTIPROCESSING=0` for a later import) and pools stay refused.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from crane.sandbox.worker.after_import import AfterImport  # kernel: strip

_JOBLIB_DONE: dict[str, Any] = {}  # what install_joblib did in this process


def run_cpus() -> int:
    """The CPUs this run may use (its affinity where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def sequential_joblib() -> bool:
    """No processes: joblib, when loaded, runs its tasks in this process (its sequential backend: the tasks' own
    exceptions are the same), where the guard vets them; where the cell imports joblib itself, its process backends
    are off (`JOBLIB_MULTIPROCESSING=0`, kept through the kernel's environment: worker/main.py `_KEEP_ENV`): it runs
    them in this process or its threads, never loky's processes (a program: refused) nor a memmapping folder in
    /dev/shm. Returns whether joblib was loaded and set sequential."""
    os.environ["JOBLIB_MULTIPROCESSING"] = "0"
    jl = sys.modules.get("joblib")
    config = getattr(jl, "parallel_config", None) or getattr(jl, "parallel_backend", None)
    if config is None:
        return False
    try:
        config(backend="sequential").__enter__()  # for the rest of this (one-run) process
        return True
    except Exception:
        return False


def _fork_backend(pb: types.ModuleType, cpus: int, wrap: Any) -> type:
    """joblib's `MultiprocessingBackend` as the run's process backend: a fork pool of at most `cpus` processes,
    its tasks pickled with cloudpickle (`wrap`: loky's `CloudpickledObjectWrapper`)."""
    base = pb.MultiprocessingBackend

    class ForkPoolBackend(base):  # type: ignore[misc,valid-type]
        """The portable run's process backend (worker/pools.py): a fork pool of at most the run's CPUs."""

        def effective_n_jobs(self, n_jobs: Any) -> int:
            return max(1, min(int(base.effective_n_jobs(self, n_jobs)), cpus))

        def configure(self, n_jobs: Any = 1, parallel: Any = None, prefer: Any = None, require: Any = None,
                      **kwargs: Any) -> int:
            n = self.effective_n_jobs(n_jobs)
            if n == 1:
                raise pb.FallbackToBackend(pb.SequentialBackend(nesting_level=self.nesting_level))
            import multiprocessing
            self._pool = multiprocessing.get_context("fork").Pool(n)
            self.parallel = parallel
            return n

        def submit(self, func: Any, callback: Any = None) -> Any:
            return base.submit(self, wrap(func, keep_wrapper=False), callback)

    ForkPoolBackend.__module__ = base.__module__
    return ForkPoolBackend


def _put_backend(cpus: int) -> bool:
    """Put the fork pool in loky's place in the loaded joblib (False: joblib not loaded, or without processes)."""
    par = sys.modules.get("joblib.parallel")
    pb = sys.modules.get("joblib._parallel_backends")
    cw = sys.modules.get("joblib.externals.loky.cloudpickle_wrapper")
    wrap = getattr(cw, "CloudpickledObjectWrapper", None)
    backends = getattr(par, "BACKENDS", None)
    if pb is None or wrap is None or not isinstance(backends, dict) or "multiprocessing" not in backends \
            or getattr(pb, "mp", None) is None:
        return False  # (imported under JOBLIB_MULTIPROCESSING=0: sequential, as joblib itself decided)
    try:
        backends["loky"] = _fork_backend(pb, cpus, wrap)
    except (AttributeError, TypeError):
        return False
    setattr(par, "DEFAULT_BACKEND", "loky")  # noqa: B010
    setattr(par, "DEFAULT_PROCESS_BACKEND", "loky")  # noqa: B010
    _JOBLIB_DONE["backend"] = "fork pool"
    return True


class _JoblibAfterImport(AfterImport):
    """`joblib.parallel`, imported by the cell, gets the fork pool right after it runs."""

    def __init__(self, cpus: int) -> None:
        self.cpus = cpus

    def wants(self, name: str) -> bool:
        return name == "joblib.parallel" and not _JOBLIB_DONE.get("backend")

    def after(self, name: str, module: types.ModuleType) -> None:
        _put_backend(self.cpus)


def install_joblib(pools: bool) -> dict[str, Any]:
    """joblib's processes in this run: a fork pool of at most `run_cpus()` processes where `pools` (the Linux layer
    holds the worker), else its sequential backend. What was done, for the record's `confinement.joblib`."""
    if not pools:
        return {"backend": "sequential" if sequential_joblib() else "sequential when imported"}
    if os.environ.get("JOBLIB_MULTIPROCESSING") == "0":
        del os.environ["JOBLIB_MULTIPROCESSING"]  # (a head's environment from an earlier run's)
    cpus = run_cpus()
    if not _put_backend(cpus) and "joblib.parallel" not in sys.modules:
        if not any(isinstance(f, _JoblibAfterImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _JoblibAfterImport(cpus))
        return {"backend": "fork pool when imported", "cpus": cpus}
    return {"backend": _JOBLIB_DONE.get("backend") or "sequential (imported without processes)", "cpus": cpus}
