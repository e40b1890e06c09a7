"""Where candidates are verified: a sandbox holding the live state, reset between candidates, that can also read
runtime facts at the point where a cell crashed ("post-mortem facts").

Two implementations of one small interface, built on the repair agent's sandboxes (crane.agent):

- `ForkFixSandbox(conn)`: a `crane.sandbox.fork_session.SandboxSession` of a kernel (a confined copy-on-write fork;
  reset = rollback to the checkpoint taken at open). Facts come from the private probe module, which is made
  sure to be installed in the kernel before the fork, so the fork has it too (`_crane_probe.run` evaluated in
  the session). The kernel itself only sees the private requests that install the probe and start the session.
  Sessions block side effects (file writes, programs); a run they refuse is run again by `run_layered`: the
  cells as one, from the live state, in a speculative run with a private copy-on-write layer.
- `ReplayFixSandbox(nb)`: a fresh kernel CRANE owns replaying the notebook's executed history (reset = a new
  kernel); the fallback of the CLI and the bench where forking is impossible.

Nothing runs in the user's kernel. Not thread-safe: one search uses one sandbox from one thread.
"""

from __future__ import annotations

import ast
import logging
from typing import Any, Protocol

import msgspec

from crane.agent.sandboxes import ExecResult
from crane.kernel.private_module import Seal
from crane.probe.facts import ProbeRequest, ProbeResult, decode_probe_result

log = logging.getLogger(__name__)

FACTS_LIMIT = 1 << 17  # characters of the probe's JSON read back from a session


class FixSandbox(Protocol):
    kind: str  # "fork" | "transplant" | "portable" (agent/fork_sandbox.session_kind) | "replay"

    def reset(self) -> None:
        """Back to the live state (nothing of earlier runs left)."""
        ...

    def run(self, source: str) -> ExecResult:
        """Run one cell; its state persists until `reset`."""
        ...

    def facts(self, request: ProbeRequest) -> ProbeResult | None:
        """Runtime facts of the sandbox's current state (None when they cannot be read)."""
        ...

    def evaluate(self, expr: str) -> Any:
        """The Python literal `repr(expr)` reads back as, evaluated in the sandbox's current state (raises
        ValueError when it raises or is not a literal)."""
        ...

    def run_layered(self, sources: list[str]) -> ExecResult | None:
        """Run cells one after the other from the live state in a private copy-on-write layer, where file
        writes, programs and worker processes succeed without reaching anything real (what a session, confined
        by blocking them, refuses); None when there is no such run here."""
        ...

    def close(self) -> None: ...


class ForkFixSandbox:
    """A fork session of a kernel (raises crane.sandbox.fork_session.SandboxError when none can start)."""

    kind = "fork"

    def __init__(self, conn, budget_s: float = 10.0):
        from crane.agent.fork_sandbox import ForkSandbox
        from crane.probe.collect import ProbeClient

        self.budget_s = budget_s
        self.conn = conn
        # the seal of the probe module this process installed (None: not installed), which the fork inherits: the
        # session's facts call only that very module, binding what its install left (kernel/private_module.py)
        self.probe_seal: Seal | None = None
        try:  # the fork inherits the probe module only if the kernel has it: an empty request installs it
            probe = ProbeClient(conn)
            probe.run(ProbeRequest(), timeout=10.0)
            self.probe_seal = probe.seal
        except Exception as exc:  # no post-mortem facts then; candidates still come from the exception
            log.info("fixes: the probe is not available in the kernel (%s)", exc)
        self.inner = ForkSandbox(conn, budget_s=budget_s)
        self.dirty = False
        self.kind = self.inner.kind  # (agent/fork_sandbox.session_kind)

    def reset(self) -> None:
        if self.dirty or self.inner.needs_reset:
            self.inner.reset_to_history()
            self.dirty = False

    def run(self, source: str) -> ExecResult:
        self.dirty = True
        return self.inner.run_cell(source, timeout=self.budget_s)

    def facts(self, request: ProbeRequest) -> ProbeResult | None:
        from crane.probe.collect import PROBE_MODULE
        from crane.sandbox.fork_session import SandboxError

        session = self.inner.session
        if session is None or session.closed or self.probe_seal is None:
            return None
        payload = msgspec.json.encode(request).decode("utf-8")
        try:
            text = session.inspect(PROBE_MODULE.call_expression("run", payload, seal=self.probe_seal),
                                   limit=FACTS_LIMIT)
            value = ast.literal_eval(text)
            if not isinstance(value, str):
                return None
            return decode_probe_result(value)
        except (SandboxError, ValueError, SyntaxError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.debug("fixes: no facts from the sandbox: %s", exc)
            return None

    def run_layered(self, sources: list[str]) -> ExecResult | None:
        from crane.agent.fork_sandbox import _STATUS
        from crane.agent.sandboxes import clean_traceback
        from crane.sandbox import speculate

        if any(s.lstrip().startswith("%%") for s in sources):
            return None  # a cell magic must start its cell: the cells cannot run as one
        v = speculate(self.conn, "\n".join(s.rstrip("\n") for s in sources) + "\n", self.budget_s * len(sources),
                      layer="layered")
        if v.mode != "layered":
            return None
        status = _STATUS.get(v.verdict, "unavailable")
        offset = sum(len(s.rstrip("\n").split("\n")) for s in sources[:-1])
        line = v.line - offset if v.line is not None and v.line > offset else None
        doubt = v.doubt()  # a miniature clean run is only likely (issue 42, h5)
        return ExecResult(status=status, ename=v.ename, evalue=v.evalue if status == "error" else v.reason or v.evalue,
                          line=line, traceback=clean_traceback(v.traceback) if v.traceback else "", stdout=v.stdout,
                          stderr=v.stderr, elapsed_s=v.elapsed_ms / 1000, certain=doubt is None, doubt=doubt or "")

    def evaluate(self, expr: str) -> Any:
        from crane.sandbox.fork_session import SandboxError

        session = self.inner.session
        if session is None or session.closed:
            raise ValueError("the sandbox is closed")
        try:
            text = session.inspect(f"repr({expr})", limit=FACTS_LIMIT)
            return ast.literal_eval(ast.literal_eval(text))
        except (SandboxError, SyntaxError) as exc:
            raise ValueError(str(exc)) from None

    def close(self) -> None:
        self.inner.close()


class ReplayFixSandbox:
    """A kernel CRANE owns, replaying the notebook's executed history (raises KernelError when it cannot start)."""

    kind = "replay"

    def __init__(self, nb, python: str | None = None, budget_s: float = 60.0, launcher=None):
        from crane.agent.sandboxes import replay_sandbox_factory

        self.budget_s = budget_s
        self.inner = replay_sandbox_factory(python=python, cell_timeout=max(budget_s, 60.0), launcher=launcher)(nb)
        self.dirty = False

    def reset(self) -> None:
        if self.dirty or self.inner.needs_reset:
            self.inner.reset_to_history()
            self.dirty = False

    def run(self, source: str) -> ExecResult:
        self.dirty = True
        if self.inner.needs_reset:
            self.inner.reset_to_history()
        return self.inner.run_cell(source, timeout=self.budget_s)

    def facts(self, request: ProbeRequest) -> ProbeResult | None:
        from crane.probe.collect import ProbeClient

        if self.inner.kernel is None:
            return None
        try:
            return ProbeClient(self.inner.connection).run(request, timeout=10.0)
        except Exception as exc:
            log.debug("fixes: no facts from the replay kernel: %s", exc)
            return None

    def evaluate(self, expr: str) -> Any:
        from crane.kernel.errors import KernelError

        if self.inner.kernel is None:
            raise ValueError("the sandbox is closed")
        try:
            return self.inner.connection.evaluate(expr, timeout=10.0)
        except KernelError as exc:
            raise ValueError(str(exc)) from None

    def run_layered(self, sources: list[str]) -> ExecResult | None:
        return None  # a kernel CRANE owns runs cells unconfined

    def close(self) -> None:
        self.inner.close()


def open_sandbox(conn=None, nb=None, python: str | None = None, budget_s: float = 10.0, launcher=None) -> FixSandbox:
    """A fork session of `conn`'s kernel, else (with a notebook) a replay kernel. Raises CraneError (SandboxError,
    KernelError) when neither can start."""
    from crane.sandbox.fork_session import SandboxError

    if conn is not None:
        try:
            return ForkFixSandbox(conn, budget_s=budget_s)
        except SandboxError as exc:
            if nb is None:
                raise
            log.info("fixes: no fork sandbox (%s): verifying in a replay kernel", exc)
    if nb is None:
        raise SandboxError("no kernel to verify fixes against")
    return ReplayFixSandbox(nb, python=python, budget_s=max(budget_s, 60.0), launcher=launcher)
