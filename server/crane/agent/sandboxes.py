"""Where the agent's code runs: the `ExecutionSandbox` interface and its replay-kernel implementation.

Nothing the agent does runs in the user's kernel. Two implementations of one small interface:

- `ReplaySandbox` (here): a fresh kernel CRANE owns, in the notebook's folder, that replays the notebook's
  executed history (in execution order) and then runs the agent's cells. Resetting starts a new kernel and
  replays again. This is the designated fallback where the fork sandbox is unavailable, and it works
  without any live kernel (the CLI, the bench).
- a fork session (crane.sandbox.fork_session, when present): a copy-on-write fork of the live kernel, confined;
  resetting rolls back to a checkpoint. Adapted by `crane.agent.fork_sandbox`.

`reset_to_history()` brings the sandbox back to the state the user's kernel has now (before any agent action).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import msgspec

from crane import pyast
from crane.kernel.errors import KernelError
from crane.notebook.history import executed_history
from crane.notebook.model import Notebook
from crane.text import cell_line, clean_traceback

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)



ExecStatus = Literal["ok", "error", "timeout", "blocked", "unavailable"]
SandboxKind = Literal["replay", "fork", "transplant", "portable"]  # (agent/fork_sandbox.session_kind)


class ExecResult(msgspec.Struct, omit_defaults=True):
    """The outcome of running one cell's source in a sandbox."""

    status: ExecStatus
    ename: str | None = None
    evalue: str | None = None
    line: int | None = None  # 1-based line in the cell, when the traceback names it
    traceback: str = ""  # cleaned (no ANSI), bounded
    stdout: str = ""
    stderr: str = ""
    elapsed_s: float = 0.0
    # False: the outcome (a crash or a clean run) is only "likely" for the user's kernel: a run on a copy of its
    # state that may have missed what the outcome rests on, or a miniature clean run (`doubt` says why:
    # SandboxVerdict.doubt). A replay kernel's run is certain (issue 42, h5)
    certain: bool = True
    doubt: str = ""

    @property
    def clean(self) -> bool:
        return self.status == "ok"

    @property
    def likely(self) -> str:
        """The note ` (why it is only likely)` for an outcome that is not certain, else "" (the agent's
        observations say it)."""
        return "" if self.certain or self.status not in ("ok", "error") else f" ({self.doubt or 'only likely'})"

    def headline(self, evalue_chars: int = 500) -> str:
        """The outcome in one line: "ran clean", "raised E at line k: message", or the status and its message."""
        if self.status == "ok":
            return "ran clean" + self.likely
        where = f" at line {self.line}" if self.status == "error" and self.line else ""
        what = f"raised {self.ename}" if self.status == "error" else self.status
        return f"{what}{where}: {(self.evalue or '')[:evalue_chars]}{self.likely}"

    def summary(self, limit: int = 1500) -> str:
        text = self.headline()
        if self.status == "ok":
            out = (self.stdout or "").strip()
            if out:
                text += "; stdout:\n" + out[-limit:]
        elif self.status == "error" and self.traceback:
            text += "\ntraceback (end):\n" + self.traceback[-limit:]
        return text


@runtime_checkable
class ExecutionSandbox(Protocol):
    """A place to run the agent's cells that is never the user's kernel."""

    kind: SandboxKind

    def run_cell(self, source: str, timeout: float) -> ExecResult: ...

    @property
    def needs_reset(self) -> bool: ...

    def inspect(self, expression: str, timeout: float) -> str: ...

    def probe_client(self):  # -> crane.probe.collect.ProbeClient | None (runtime facts for the context)
        ...

    def reset_to_history(self) -> None: ...

    def close(self) -> None: ...


# Evaluated in the sandbox for the inspect tool: type, size and a bounded repr; never raises.
INSPECT_TEMPLATE = (
    "(lambda v: (lambda t, s: t + s + ' = ' + (lambda r: r if len(r) <= {limit} else r[:{limit}] + '...')"
    "(repr(v)))(type(v).__module__ + '.' + type(v).__qualname__ if type(v).__module__ != 'builtins' "
    "else type(v).__qualname__, (' shape=' + str(getattr(v, 'shape'))) if hasattr(v, 'shape') else "
    "(' len=' + str(len(v)) if hasattr(v, '__len__') and not isinstance(v, type) else '')))({expr})"
)


def inspect_expression(expression: str, limit: int = 1500) -> str:
    return INSPECT_TEMPLATE.format(limit=limit, expr=f"(\n{expression}\n)")


class ReplaySandbox:
    """A kernel CRANE owns, holding the notebook's replayed history; never the user's kernel."""

    kind = "replay"

    def __init__(self, nb: Notebook, python: str | None = None, cell_timeout: float = 600.0,
                 starter: Callable | None = None):
        from crane.kernel.manager import start_kernel

        self.nb = nb
        self.python = python
        self.cell_timeout = cell_timeout
        self._start = starter or start_kernel
        self.kernel: Any = None  # OwnedKernel | ServerKernel
        self.history_runs: list = []
        self.resets = 0
        self.cells_run = 0  # cells run by the agent (replays not counted)
        self.reset_to_history()

    def reset_to_history(self) -> None:
        from crane.kernel.replay import replay

        self.close()
        self.kernel = self._start(self.nb.directory, python=self.python)
        try:
            self.history_runs = replay(self.kernel.connection, executed_history(self.nb),
                                       cell_timeout=self.cell_timeout)
        except BaseException:
            self.close()
            raise
        self.resets += 1

    @property
    def needs_reset(self) -> bool:
        """True after a cell timed out (the kernel was stopped): the next use starts a fresh one."""
        return self.kernel is None

    @property
    def connection(self):
        if self.kernel is None:
            raise KernelError("the sandbox is closed")
        return self.kernel.connection

    def run_cell(self, source: str, timeout: float = 120.0) -> ExecResult:
        from crane.kernel.errors import KernelTimeout

        self.cells_run += 1
        try:
            run = self.connection.run_cell(source, timeout=timeout)
        except KernelTimeout as exc:
            # the kernel is stuck in the cell: this sandbox is unusable until reset
            self.close()
            return ExecResult(status="timeout", evalue=str(exc), elapsed_s=timeout)
        tb = clean_traceback(run.traceback) if run.traceback else ""
        status: ExecStatus = run.status if run.status in ("ok", "error") else "error"
        return ExecResult(status=status, ename=run.ename, evalue=run.evalue, line=cell_line(tb) if tb else None,
                          traceback=tb, stdout=run.stdout, stderr=run.stderr, elapsed_s=run.elapsed_s)

    def inspect(self, expression: str, timeout: float = 10.0) -> str:
        reply = self.connection.private({"v": inspect_expression(expression)}, timeout=timeout)
        v = reply.user_expressions.get("v", {})
        if v.get("status") != "ok":
            return f"{v.get('ename', reply.ename) or 'Error'}: {v.get('evalue', reply.evalue) or ''}"

        text = v.get("data", {}).get("text/plain", "")
        try:
            return str(pyast.literal_eval(text))
        except (ValueError, SyntaxError):
            return text

    def probe_client(self):
        from crane.probe.collect import ProbeClient

        return ProbeClient(self.connection) if self.kernel is not None else None

    def close(self) -> None:
        if self.kernel is not None:
            kernel, self.kernel = self.kernel, None
            kernel.shutdown()


def replay_sandbox_factory(python: str | None = None, cell_timeout: float = 600.0, launcher=None):
    """A `sandbox_factory` for `start_fix`: `factory(notebook) -> ReplaySandbox`. `launcher`
    (crane.kernel.launch): where its kernels start, e.g. on a Jupyter Server; default here."""

    def factory(nb: Notebook) -> ReplaySandbox:
        starter = None
        if launcher is not None:
            from crane.engine import notebook_file

            def starter(_cwd, python=None):
                return launcher.start(notebook_file(nb), python=python)

        return ReplaySandbox(nb, python=python, cell_timeout=cell_timeout, starter=starter)

    return factory
