"""Daemon side of the fork sandbox: run one cell speculatively in the user's kernel, collect its verdict.

`speculate(conn, source, budget_s)`: a private request makes the kernel fork (channel.py); the child makes the
kernel's descriptors and shared mappings private, moves into its own namespaces with private copy-on-write
layers ("layered" mode) or stays in the "blocking" confinement (where namespaces are unavailable, on request,
or by the default "auto" choice for a cell without a sign of side effects, re-run layered when the blocking
run refused one: layer_choice.py), confines itself and runs the cell; we wait for its JSON lines without
blocking the kernel and end it (with its whole process tree) when the wall-clock budget runs out or `cancel`
is set. `miniature=` runs the cell on row subsets of the large objects it reads (kernel/miniature.py; see
`crane.sandbox.scale` for when). Nothing here raises to the caller: every failure becomes an "unavailable"
verdict with a reason.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time

from crane.kernel.client import KernelConnection
from crane.sandbox.assemble import _GRACE_S, ChildLines, assemble, parse_lines  # noqa: F401 (re-exported)
from crane.sandbox.channel import (
    OUTPUT_LIMIT,
    SANDBOX_MODULE,
    ChildHandle,
    LocalRun,
    PrivateDir,
    RemoteRun,
    launch,
    launch_reply,
    read_until_eof,
)
from crane.sandbox.cpu_clock import cpu_clock_doubt
from crane.sandbox.layer_choice import ASKED_FOR, AUTO_BLOCKING_REASON, layer_would_help, needs_layer
from crane.sandbox.options import SandboxOptions, active
from crane.sandbox.portable import NO_OS_LAYER, os_refused, portable_or_none
from crane.sandbox.portable import choose as choose_confinement
from crane.sandbox.transplant import _PROCESS_LOOKUP, transplant
from crane.sandbox.transplant import enabled as transplant_enabled
from crane.sandbox.verdict import (
    DisplayOutput,
    SandboxVerdict,
    unavailable,
)

MODULE_NAME = SANDBOX_MODULE.name
_PROC_PID = re.compile(r"'/proc/\d+/")  # a process's own entry in /proc, named in an exception's message
DEFAULT_BUDGET_S = 10.0
DEFAULT_MEMORY_MB = 2048


def layer_preference(explicit: str | None = None, sandbox: SandboxOptions | None = None) -> str:
    """"auto", "layered" or "blocking": the argument, else `sandbox`'s (or the configured) `layer`."""
    value = explicit or (sandbox or active()).layer
    return value if value in ("layered", "blocking") else "auto"


def speculate(
    conn: KernelConnection,
    source: str,
    budget_s: float = DEFAULT_BUDGET_S,
    *,
    memory_mb: int = DEFAULT_MEMORY_MB,
    request_timeout: float = 5.0,
    layer: str | None = None,
    places: list[str] | tuple[str, ...] = (),
    idle: bool = False,
    cancel: threading.Event | None = None,
    miniature: dict | None = None,
    max_processes: int = 1000,
    sandbox: SandboxOptions | None = None,
) -> SandboxVerdict:
    """Run `source` (a cell, IPython syntax) against a copy-on-write fork of the kernel's live state, confined
    and under `budget_s` seconds of wall clock. Blocking (use `speculate_async` from an event loop); never
    raises; never changes the user's kernel (namespace, execution count, history, outputs) or files.

    `layer`: "layered" (private copy-on-write layers where the machine allows, else blocking), "blocking", or
    "auto" (the default, unless the options say otherwise): blocking for a cell without a sign of side effects, layered
    for the others and again layered when the blocking run refused a write, a program or a process (see
    `crane.sandbox.layer_choice`).
    `places`: extra directories that get a private layer (the kernel's working directory, $HOME, /tmp, ... do).
    `idle`: the child runs at idle CPU priority (background runs). `max_processes`: layered mode's bound on
    live processes and threads (pid namespace; RLIMIT_NPROC, at most 256, for a user other than root).
    `cancel`: set it to stop the run at once
    (the verdict is then "unavailable", reason "stopped"). `miniature`: run on row subsets (see
    `crane.sandbox.scale.miniature_spec`). `sandbox`: the options resolved at the edge (default: `active()`);
    its `confinement` "portable" (or "auto" where the OS sandbox cannot run) runs the cell in the portable
    sandbox (crane.sandbox.portable): a worker on a copy of the state, never a fork of the kernel."""
    opts = sandbox or active()
    conf = opts.confinement
    layer = layer_preference(layer, opts)
    which, why_portable = choose_confinement(conf)
    if which == "none":  # no OS layer for the portable sandbox here: the rules decide (the reason says why)
        return unavailable(why_portable or NO_OS_LAYER)
    kw = dict(memory_mb=memory_mb, request_timeout=request_timeout, places=places, idle=idle, cancel=cancel,
              miniature=miniature, max_processes=max_processes)
    if which == "os":
        v = _speculate_os(conn, source, budget_s, layer=layer, **kw)  # type: ignore[arg-type]
        if v.verdict == "crash" and v.mode in ("layered", "blocking") and (
                v.ename in _PROCESS_LOOKUP or v.ename == "FileNotFoundError" and _PROC_PID.search(v.evalue or "")):
            v.certain, v.reason = False, "the crash is only likely: the fork's processes are not the kernel's"
            # the fork's pid namespace hides the kernel's processes: a pid the notebook recorded
            # (`psutil.Process(os.getpid())` in a cell before, `/proc/<pid>/status`) is not found there, but is in
            # the kernel (round 6, P6)
        why_portable = os_refused(v) if conf == "auto" else None
        if why_portable is None or (cancel is not None and cancel.is_set()):
            return v
        which, why_portable = portable_or_none(why_portable)
        if which == "none":
            return unavailable(why_portable or NO_OS_LAYER)
    # -- the portable sandbox (crane.sandbox.portable): no fork of the kernel on this path
    return transplant(conn, source, budget_s, reason=None, layer=layer, portable=why_portable,
                      confinement="guard" if which == "guard" else "portable", **kw)  # type: ignore[arg-type]


def _speculate_os(
    conn: KernelConnection,
    source: str,
    budget_s: float,
    *,
    memory_mb: int,
    request_timeout: float,
    layer: str | None,
    places: list[str] | tuple[str, ...],
    idle: bool,
    cancel: threading.Event | None,
    miniature: dict | None,
    max_processes: int,
) -> SandboxVerdict:
    """The OS sandbox's run (see `speculate`)."""
    pref = layer_preference(layer)
    first = pref
    if pref == "auto":
        first = "layered" if (miniature or idle or needs_layer(source)) else "blocking"
    kw = dict(memory_mb=memory_mb, request_timeout=request_timeout, places=places, idle=idle, cancel=cancel,
              miniature=miniature, max_processes=max_processes)
    v = _speculate_once(conn, source, budget_s, layer=first, **kw)  # type: ignore[arg-type]
    if v.unforkable and transplant_enabled():  # TF/JAX/CuPy loaded, CUDA initialised: a separate process
        return transplant(conn, source, budget_s, reason=v.reason, layer=pref, **kw)  # type: ignore[arg-type]
    if pref == "auto" and first == "blocking":
        if layer_would_help(v) and not (cancel is not None and cancel.is_set()):
            again = _speculate_once(conn, source, budget_s, layer="layered", **kw)  # type: ignore[arg-type]
            again.overhead_ms += v.overhead_ms + v.elapsed_ms  # the refused run was part of reaching it
            return again
        if v.mode == "blocking" and v.mode_reason == ASKED_FOR:
            v.mode_reason = AUTO_BLOCKING_REASON
    return v


def _speculate_once(
    conn: KernelConnection,
    source: str,
    budget_s: float,
    *,
    memory_mb: int,
    request_timeout: float,
    layer: str,
    places: list[str] | tuple[str, ...],
    idle: bool,
    cancel: threading.Event | None,
    miniature: dict | None,
    max_processes: int,
) -> SandboxVerdict:
    t0 = time.monotonic()
    try:
        pdir = PrivateDir()
    except OSError as exc:
        return unavailable(f"cannot create the sandbox's private directory: {exc}")
    run = None
    try:
        request = pdir.request(mode="run", source=source, budget_s=float(budget_s), memory_mb=int(memory_mb),
                               output_limit=OUTPUT_LIMIT, layer="blocking" if layer == "blocking" else "auto",
                               places=list(places), idle=bool(idle), max_processes=int(max_processes),
                               miniature=miniature or None)
        reply = launch_reply(conn, "start", request, request_timeout)
        if isinstance(reply, SandboxVerdict):
            return reply
        run = RemoteRun(conn, reply, request_timeout) if reply.channel == "remote" else LocalRun(pdir, reply)
        outcome = run.wait(time.monotonic() + float(budget_s) + _GRACE_S, cancel)
        v = assemble(outcome, float(budget_s), int(memory_mb), expect_seal=True)
        cpu_clock_doubt(v, source)
        v.pid, v.channel, v.fork_ms, v.fork_cpu_ms = reply.pid, reply.channel, reply.fork_ms, reply.fork_cpu_ms
        if miniature:
            v.scale = "miniature"
        total_ms = (time.monotonic() - t0) * 1000.0
        if outcome.how in ("deadline", "cancelled"):
            v.elapsed_ms, v.overhead_ms = total_ms, 0.0
        else:
            v.overhead_ms = max(0.0, total_ms - v.elapsed_ms)
        return v
    except Exception as exc:  # the daemon never dies from one sandbox run
        if run is not None:
            run.kill()
        return unavailable(f"sandbox error: {type(exc).__name__}: {exc}")
    finally:
        if run is not None:
            run.close()
        pdir.cleanup()


async def speculate_async(conn: KernelConnection, source: str, budget_s: float = DEFAULT_BUDGET_S, **kw) -> SandboxVerdict:
    """`speculate` for an asyncio daemon (the LSP server): runs in a worker thread, so the event loop keeps
    serving while the child runs. KernelConnection requests are thread-safe."""
    return await asyncio.to_thread(speculate, conn, source, budget_s, **kw)


__all__ = ["MODULE_NAME", "SANDBOX_MODULE", "DEFAULT_BUDGET_S", "DEFAULT_MEMORY_MB", "OUTPUT_LIMIT", "ChildHandle",
           "DisplayOutput", "PrivateDir", "SandboxVerdict", "launch", "layer_preference", "read_until_eof",
           "speculate", "speculate_async"]
