"""Daemon side: a kernel's transplant worker started before its first copied run, so that the first verdict after
`import tensorflow` pays only the export and the cell, not the libraries' import (about 15 s for TensorFlow).

`prewarm_kernel(conn)` is called when the kernel's modules may have changed (the language server: on attach and
after each user run, crane.lsp.prewarm). It decides, in order:
1. no worker when copied runs or warm workers are off (`SandboxOptions.transplant`, `warm_workers`), for a kernel
   behind a Jupyter Server (its process is not this machine's), or when this platform has no sandbox to run one;
2. a private read of the kernel (`_crane_prewarm.imported`, kernel/imported.py: one silent request, no user code,
   `sys.modules` read as a dict): its interpreter, cwd, environment, the top-level library packages it imported
   and its process;
3. no worker when the runs will not need one: the OS sandbox forks the kernel unless TensorFlow, JAX or CuPy is
   loaded (kernel/entry.py's `_unforkable`); the portable sandbox always runs a worker;
4. no worker when the machine is short of memory: psutil's available memory below the worker's expected size
   (crane.sandbox.worker_size: its heavy libraries) plus `SandboxOptions.prewarm_free_mb`;
5. else `POOL.prewarm` (crane.sandbox.transplant): one idle worker per kernel, keyed exactly as the kernel's runs
   take it, started at background priority and bounded in memory (crane.sandbox.background), kept while it
   already imports the kernel's heavy libraries, replaced when a new one was imported, ended with its kernel.
The answer (`Prewarm`) says what was done and why (logs, tests, the benchmark).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from crane.kernel.client import KernelConnection
from crane.kernel.private_module import KernelModule, ModuleClient
from crane.sandbox.kernel_program import untrusted_interpreter
from crane.sandbox.options import SandboxOptions, active
from crane.sandbox.portable import choose
from crane.sandbox.process_watch import ProcessRef, process_ref
from crane.sandbox.transplant import POOL, KernelRef, kernel_ref
from crane.sandbox.worker_size import HEAVY_MB, no_room

_HERE = Path(__file__).resolve().parent
PREWARM_MODULE = KernelModule("_crane_prewarm", "CRANE's private read of the kernel's imported libraries",
                              [_HERE / "kernel/shield.py", _HERE / "kernel/library.py", _HERE / "kernel/imported.py"])

# libraries whose loading makes the OS sandbox copy the kernel instead of forking it (kernel/entry.py)
UNFORKABLE = frozenset({"tensorflow", "jax", "cupy"})


class KernelImports(msgspec.Struct):
    """The kernel's answer (kernel/imported.py), validated here at the edge."""

    executable: str
    cwd: str
    env: dict[str, str]
    modules: list[str]
    pid: int
    start: int = 0
    pidns: int | None = None


@dataclass(frozen=True)
class Prewarm:
    """What `prewarm_kernel` did: `started` a worker (its pid), or not and `why`."""

    started: bool
    why: str
    pid: int | None = None
    preload: tuple[str, ...] = ()
    kernel: KernelRef | ProcessRef | None = None  # the pool's key for the kernel's workers


def read_imports(conn: KernelConnection, timeout: float = 5.0) -> KernelImports:
    """The kernel's interpreter, cwd, environment, imported library packages and process (a private request;
    raises KernelError, msgspec.ValidationError)."""
    raw = ModuleClient(conn, PREWARM_MODULE).call("imported", timeout=timeout, what="reading the kernel's imports")
    return msgspec.convert(raw, KernelImports)


def _remote(conn: KernelConnection) -> bool:
    target = getattr(conn, "target", None)
    return bool(target is not None and target.is_remote)


def prewarm_kernel(conn: KernelConnection, sandbox: SandboxOptions | None = None, timeout: float = 5.0) -> Prewarm:
    """Start or refresh the kernel's worker ahead of its first copied run, when it will need one and the machine
    can hold it (see the module docstring). Blocking (a private request, a process start); raises KernelError
    when the kernel does not answer."""
    opts = sandbox or active()
    if not (opts.transplant and opts.warm_workers):
        return Prewarm(False, "copied runs or warm workers are off")
    if _remote(conn):
        return Prewarm(False, "the kernel runs behind a Jupyter Server: its workers cannot be this machine's")
    which, why_not = choose(opts.confinement)
    if which == "none":
        return Prewarm(False, why_not or "no sandbox here")
    asked_at = time.time()
    facts = read_imports(conn, timeout)
    portable = which in ("portable", "guard")
    if not portable and not UNFORKABLE.intersection(facts.modules):
        return Prewarm(False, "the OS sandbox forks this kernel: no worker is needed")
    heavy = [m for m in facts.modules if m in HEAVY_MB]
    short = no_room(facts.modules, opts.prewarm_free_mb)
    if short:
        return Prewarm(False, short)
    kernel: KernelRef | ProcessRef | None = (process_ref(facts.pid, facts.start, asked_at) if portable
                                             else kernel_ref(facts.pid, facts.start, facts.pidns))
    if kernel is None or not facts.executable:
        return Prewarm(False, "the kernel's process is not one this daemon can watch")
    why = untrusted_interpreter(facts.executable, kernel)  # (crane.sandbox.kernel_program)
    if why:
        return Prewarm(False, why)
    w = POOL.prewarm(facts.executable, dict(facts.env), facts.cwd, list(facts.modules), kernel, heavy)
    if w is None:
        return Prewarm(False, "its idle worker already imports the kernel's heavy libraries",
                       preload=tuple(facts.modules), kernel=kernel)
    return Prewarm(True, "started", pid=w.proc.pid, preload=tuple(facts.modules), kernel=kernel)
