"""Opening a sandbox session on any kernel: a forked `SandboxSession` where the kernel can be forked, else a
`TransplantSession` (a confined worker holding a copy of the state; `CRANE_TRANSPLANT=0` turns that off)."""

from __future__ import annotations

from crane.kernel.client import KernelConnection
from crane.sandbox.fork_runner import DEFAULT_BUDGET_S, DEFAULT_MEMORY_MB
from crane.sandbox.fork_session import SandboxError, SandboxSession, Unforkable
from crane.sandbox.options import SandboxOptions, active
from crane.sandbox.portable import choose as choose_confinement
from crane.sandbox.transplant import enabled as transplant_enabled
from crane.sandbox.transplant_session import TransplantSession


def open_session(
    conn: KernelConnection,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    request_timeout: float = 5.0,
    total_cpu_s: float = 600.0,
    sandbox: SandboxOptions | None = None,
) -> SandboxSession:
    """A session on the kernel's live state. Raises SandboxError if no session can be had. Under the portable
    sandbox (`sandbox`'s confinement, default `active()`: crane.sandbox.portable) it is a transplant session whose
    worker is confined by the call guard and the audit hook; the kernel is not forked."""
    which, why_portable = choose_confinement((sandbox or active()).confinement)
    if which == "none":
        raise SandboxError(why_portable or "no sandbox can run here")
    if which in ("portable", "guard"):  # -- the portable sandbox (a session's worker always gets its OS layer)
        return TransplantSession.start(conn, budget_s=budget_s, memory_mb=memory_mb, request_timeout=request_timeout,
                                       total_cpu_s=total_cpu_s, reason=None, portable=why_portable)
    try:
        return SandboxSession.open(conn, budget_s=budget_s, memory_mb=memory_mb, request_timeout=request_timeout,
                                   total_cpu_s=total_cpu_s)
    except Unforkable as exc:
        if not transplant_enabled():
            raise SandboxError(str(exc)) from exc
        return TransplantSession.start(conn, budget_s=budget_s, memory_mb=memory_mb, request_timeout=request_timeout,
                                       total_cpu_s=total_cpu_s, reason=str(exc))
