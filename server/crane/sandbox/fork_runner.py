"""Daemon side of the fork sandbox: run one cell speculatively in the user's kernel, collect its verdict.

`speculate(conn, source, budget_s)`: a private request makes the kernel fork (channel.py); the child makes the
kernel's descriptors and shared mappings private, moves into its own namespaces with private copy-on-write
layers ("layered" mode) or stays in the "blocking" confinement (where namespaces are unavailable, on request,
or by the default "auto" choice for a cell without a sign of side effects, re-run layered when the blocking
run refused one: layer_choice.py), confines itself and runs the cell; we wait for its JSON lines without
blocking the kernel and end it (with its whole process tree) when the wall-clock budget runs out or `cancel`
is set. `miniature=` runs the cell on row subsets of the large objects it reads (ks_miniature.py; see
`crane.sandbox.scale` for when). Nothing here raises to the caller: every failure becomes an "unavailable"
verdict with a reason.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import msgspec

from crane.kernel.client import KernelConnection
from crane.sandbox.channel import (
    OUTPUT_LIMIT,
    SANDBOX_MODULE,
    ChildHandle,
    LocalRun,
    PrivateDir,
    RemoteRun,
    RunOutcome,
    launch,
    launch_reply,
    read_until_eof,
)
from crane.sandbox.layer_choice import ASKED_FOR, AUTO_BLOCKING_REASON, layer_would_help, needs_layer
from crane.sandbox.transplant import enabled as transplant_enabled
from crane.sandbox.transplant import transplant
from crane.sandbox.verdict import (
    ChildRecord,
    DeniedLine,
    DisplayOutput,
    ExitLine,
    SandboxVerdict,
    SetupLine,
    unavailable,
)

MODULE_NAME = SANDBOX_MODULE.name
DEFAULT_BUDGET_S = 10.0
DEFAULT_MEMORY_MB = 2048
LAYER_ENV = "CRANE_SANDBOX_MODE"  # "auto" (default) | "layered" | "blocking" (see layer_choice.py)
_GRACE_S = 0.5  # setup time allowed on top of the cell's budget


def layer_preference(explicit: str | None = None) -> str:
    """"auto", "layered" or "blocking": the argument, else $CRANE_SANDBOX_MODE, else "auto"."""
    value = (explicit or os.environ.get(LAYER_ENV) or "auto").strip().lower()
    return value if value in ("layered", "blocking") else "auto"


class ChildLines(msgspec.Struct):
    setup: SetupLine | None = None
    record: ChildRecord | None = None
    exit: ExitLine | None = None
    denied: list[str] = []  # network attempts of any process of the sandbox (the supervisor's record)
    error: str | None = None


def parse_lines(data: bytes) -> ChildLines:
    """The child's JSON lines, each validated: setup, the final record, the supervisor's exit line."""
    out = ChildLines()
    for raw in data.split(b"\n"):
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = msgspec.json.decode(raw)
            event = obj.get("event") if isinstance(obj, dict) else None
            if event == "setup":
                out.setup = msgspec.convert(obj, SetupLine)
            elif event == "exit":
                out.exit = msgspec.convert(obj, ExitLine)
            elif event == "denied":
                out.denied.append(msgspec.convert(obj, DeniedLine).what)
            else:
                out.record = msgspec.convert(obj, ChildRecord)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            out.error = f"the sandbox child sent a malformed record: {exc}"
    return out


def _signal_verdict(sig: int | None, exitcode: int | None, memory_mb: int, setup: SetupLine | None) -> SandboxVerdict:
    if sig is None:
        if exitcode == 70:
            return unavailable("the sandbox child failed during setup")
        return unavailable(f"the sandbox child ended without a result (exit code {exitcode})")
    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
    if sig == signal.SIGXCPU:
        return SandboxVerdict(verdict="timeout", reason="the cell exceeded its CPU-time budget")
    if sig == signal.SIGALRM:
        return SandboxVerdict(verdict="timeout", reason="the cell exceeded its wall-clock budget")
    if sig == signal.SIGKILL:
        return SandboxVerdict(verdict="timeout", reason=f"the sandbox child was killed (memory budget {memory_mb} MiB "
                                                         "or CPU budget exhausted)")
    if sig == signal.SIGXFSZ:
        return SandboxVerdict(verdict="blocked", reason="the cell wrote more than the sandbox's file-size limit")
    if sig == signal.SIGSYS:
        return SandboxVerdict(verdict="blocked", reason="the cell made a system call the sandbox forbids")
    maps = setup.mappings if setup else {}
    withheld = int(maps.get("readonly", 0) or 0) + int(maps.get("unmapped", 0) or 0)
    if withheld and sig in (signal.SIGSEGV, signal.SIGBUS):
        return SandboxVerdict(verdict="blocked", reason=f"killed by {name}: probably an access to shared memory the "
                                                         f"sandbox withheld ({withheld} mapping(s) too large to copy)")
    pools = int(setup.pool_threads) if setup else 0
    if pools and sig in (signal.SIGSEGV, signal.SIGBUS):  # a pool's threads do not exist in a forked copy
        return SandboxVerdict(verdict="blocked", reason=f"killed by {name}, with {pools} native worker thread(s) "
                                                         "(OpenMP, BLAS, rayon) in the kernel that a forked copy "
                                                         "does not have: not a certain crash")
    if sig == signal.SIGABRT:  # libzmq, gRPC, OpenMP, CUDA... abort when a socket, thread or memory is refused
        return SandboxVerdict(verdict="blocked", reason="the process aborted (SIGABRT): libraries abort when the "
                                                         "sandbox refuses them a socket, a thread or memory")
    return SandboxVerdict(
        verdict="crash",
        ename="DeadKernelError",
        evalue=f"the process died with {name}: running this cell would kill the kernel",
        reason=f"killed by {name}",
    )


def assemble(outcome: RunOutcome, budget_s: float, memory_mb: int) -> SandboxVerdict:
    """The verdict from what the child wrote and how it ended."""
    lines = parse_lines(outcome.data)
    setup, rec = lines.setup, lines.record
    if rec is not None:
        v = SandboxVerdict(
            verdict=rec.verdict, ename=rec.ename, evalue=rec.evalue, line=rec.line, traceback=rec.traceback,
            displays=rec.displays, elapsed_ms=rec.elapsed_ms, reason=rec.reason, denied=rec.denied,
            landlock_abi=rec.confinement.get("landlock_abi") if isinstance(rec.confinement, dict) else None,
        )
    elif outcome.how == "cancelled":
        v = unavailable("stopped before the cell finished")
    elif outcome.how == "deadline" or (lines.exit is not None and lines.exit.deadline):
        v = SandboxVerdict(verdict="timeout", reason=f"the cell did not finish within {budget_s:g} s")
    elif lines.error:
        v = unavailable(lines.error)
    elif lines.exit is not None and (lines.exit.signal is not None or lines.exit.exitcode is not None):
        v = _signal_verdict(lines.exit.signal, lines.exit.exitcode, memory_mb, setup)
    elif outcome.status is not None:
        v = _signal_verdict(outcome.status.signal, outcome.status.exitcode, memory_mb, setup)
    else:
        v = unavailable("the sandbox child ended without a result")
    if lines.denied and v.verdict in ("crash", "no-crash"):
        # a program the cell started tried the network: what it did without it says nothing certain
        what = f" ({v.ename} followed)" if v.verdict == "crash" and v.ename else ""
        v.verdict, v.reason = "blocked", f"{lines.denied[0]}{what}"
    v.denied = list(v.denied) + lines.denied[:20]
    if setup is not None:
        v.mode, v.mode_reason, v.kept = setup.mode, setup.reason, setup.kept
        v.setup_ms = float(setup.steps.get("total", 0.0) or 0.0)
        v.setup_steps = {str(k): float(x) for k, x in setup.steps.items() if isinstance(x, (int, float))}
        if setup.kept:
            v.scale = "miniature"
    v.stdout, v.stderr = outcome.stdout, outcome.stderr
    return v


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
) -> SandboxVerdict:
    """Run `source` (a cell, IPython syntax) against a copy-on-write fork of the kernel's live state, confined
    and under `budget_s` seconds of wall clock. Blocking (use `speculate_async` from an event loop); never
    raises; never changes the user's kernel (namespace, execution count, history, outputs) or files.

    `layer`: "layered" (private copy-on-write layers where the machine allows, else blocking), "blocking", or
    "auto" (the default, also $CRANE_SANDBOX_MODE): blocking for a cell without a sign of side effects, layered
    for the others and again layered when the blocking run refused a write, a program or a process (see
    `crane.sandbox.layer_choice`).
    `places`: extra directories that get a private layer (the kernel's working directory, $HOME, /tmp, ... do).
    `idle`: the child runs at idle CPU priority (background runs). `max_processes`: layered mode's bound on
    live processes and threads (pid namespace; RLIMIT_NPROC, at most 256, for a user other than root).
    `cancel`: set it to stop the run at once
    (the verdict is then "unavailable", reason "stopped"). `miniature`: run on row subsets (see
    `crane.sandbox.scale.miniature_spec`)."""
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
        args = pdir.args(mode="run", source=source, budget_s=float(budget_s), memory_mb=int(memory_mb),
                         output_limit=OUTPUT_LIMIT, layer="blocking" if layer == "blocking" else "auto",
                         places=list(places),
                         idle=bool(idle), max_processes=int(max_processes))
        if miniature:
            args["miniature"] = miniature
        reply = launch_reply(conn, "start", args, request_timeout)
        if isinstance(reply, SandboxVerdict):
            return reply
        run = RemoteRun(conn, reply, request_timeout) if reply.channel == "remote" else LocalRun(pdir, reply)
        outcome = run.wait(time.monotonic() + float(budget_s) + _GRACE_S, cancel)
        v = assemble(outcome, float(budget_s), int(memory_mb))
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
