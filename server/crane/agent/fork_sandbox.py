"""The agent's sandbox on a live kernel: a crane.sandbox.fork_session.SandboxSession (a confined copy-on-write fork
of the user's kernel) behind the `ExecutionSandbox` interface.

The session is forked from the live state, a checkpoint is taken at once, and `reset_to_history()` rolls
back to it (then checkpoints again), so a reset costs a fork, not a replay. The user's kernel only sees the
private requests that start the session; runtime facts for the context are read from it with the private
probe. When the session cannot start (no fork, no seccomp, a remote kernel), `fork_or_replay_factory`
falls back to the replay sandbox.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from crane import pyast
from crane.agent.sandboxes import ExecResult, ExecStatus, ReplaySandbox, SandboxKind, inspect_expression
from crane.kernel.client import KernelConnection
from crane.notebook.model import Notebook
from crane.text import cell_line, clean_traceback

if TYPE_CHECKING:
    from crane.sandbox.fork_session import SandboxSession

log = logging.getLogger(__name__)

_STATUS: dict[str, ExecStatus] = {"crash": "error", "no-crash": "ok", "timeout": "timeout", "blocked": "blocked",
           "unavailable": "unavailable"}


def session_kind(session: object) -> SandboxKind:
    """Where a session's runs really happen, as reports name it (`Evidence.sandbox`, `VerifiedFix.sandbox`,
    `SearchReport.sandbox`): "fork" (a copy-on-write fork of the kernel), or, where the kernel cannot be forked or
    the portable sandbox is chosen, "transplant" / "portable" (a worker on a copy of its state: a crash there may be
    only "likely", issue 42, h5)."""
    from crane.sandbox.transplant_session import TransplantSession

    if isinstance(session, TransplantSession):
        return "portable" if session.portable else "transplant"
    return "fork"


class ForkSandbox:
    """`kind`: where the runs happen (`session_kind`; the agent's evidence names it)."""

    def __init__(self, conn: KernelConnection, budget_s: float = 60.0):
        from crane.sandbox.session import open_session

        self.conn = conn
        self.budget_s = budget_s
        self._open = lambda: open_session(conn, budget_s=budget_s)
        self.session: SandboxSession | None = self._open()
        self.session.checkpoint()
        self.kind: SandboxKind = session_kind(self.session)
        self.resets = 0

    @property
    def needs_reset(self) -> bool:
        return self.session is None or self.session.closed

    def reset_to_history(self) -> None:
        """Back to the live kernel's state as it was when the session opened."""
        from crane.sandbox.fork_session import SandboxError

        self.resets += 1
        if self.session is not None and not self.session.closed:  # not needs_reset
            try:
                self.session.rollback()
                self.session.checkpoint()
                return
            except SandboxError as exc:
                log.warning("agent: sandbox rollback failed (%s); opening a new session", exc)
                self.close()
        self.session = self._open()
        self.session.checkpoint()
        self.kind = session_kind(self.session)

    def run_cell(self, source: str, timeout: float = 120.0) -> ExecResult:
        from crane.sandbox.fork_session import SandboxError

        try:
            v = self._live().run(source, budget_s=min(timeout, self.budget_s))
        except SandboxError as exc:
            return ExecResult(status="unavailable", evalue=str(exc))
        status = _STATUS.get(v.verdict, "unavailable")
        tb = clean_traceback(v.traceback) if v.traceback else ""
        evalue = v.evalue if status == "error" else (v.reason or v.evalue)
        if status == "blocked" and v.denied:
            evalue = f"{v.reason or 'blocked'}: refused side effects: {', '.join(v.denied[:5])}"
        doubt = v.doubt()  # a copy's crash or clean run that is only likely (issue 42, h5)
        return ExecResult(status=status, ename=v.ename, evalue=evalue, line=v.line or (cell_line(tb) if tb else None),
                          traceback=tb, stdout=v.stdout, stderr=v.stderr, elapsed_s=v.elapsed_ms / 1000,
                          certain=doubt is None, doubt=doubt or "")

    def inspect(self, expression: str, timeout: float = 10.0) -> str:
        from crane.sandbox.fork_session import SandboxError

        try:
            text = self._live().inspect(inspect_expression(expression), timeout=timeout)
        except SandboxError as exc:
            return str(exc)

        try:
            value = pyast.literal_eval(text)
            return value if isinstance(value, str) else text
        except (ValueError, SyntaxError):
            return text

    def _live(self) -> SandboxSession:
        from crane.sandbox.fork_session import SandboxError

        if self.session is None:
            raise SandboxError("the sandbox session is closed")
        return self.session

    def probe_client(self):
        from crane.probe.collect import ProbeClient

        return ProbeClient(self.conn)

    def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            try:
                session.close()
            except Exception as exc:
                log.warning("agent: closing the sandbox session: %s", exc)


def fork_or_replay_factory(conn: KernelConnection | None, python: str | None = None):
    """A `sandbox_factory` for the daemon: a fork session of the live kernel, else a replay kernel."""

    def factory(nb: Notebook):
        if conn is not None:
            try:
                return ForkSandbox(conn)
            except Exception as exc:
                log.warning("agent: fork sandbox unavailable (%s); using a replay kernel", exc)
        return ReplaySandbox(nb, python=python)

    return factory
