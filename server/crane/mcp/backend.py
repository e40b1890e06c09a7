"""What the MCP tools do, against one kernel: read its facts privately, predict, run code in the sandbox, search
verified fixes. Synchronous (the server calls it from a worker thread, one call at a time).

Nothing here runs in the kernel's namespace: facts come from the private probe (silent requests, no history),
code runs only in a confined copy-on-write fork of the kernel (`crane.sandbox`), fixes are searched in a fork
session. A kernel that died, or cannot be reached, gives a `ToolFailure` saying so. While another client's cell
runs in the kernel (`Attached.busy`), nothing is asked of it: a check answers at once from static facts, a run is
`unavailable`, facts and fixes are a `ToolFailure` — a private request would only queue behind the cell.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from crane.errors import CraneError
from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelError
from crane.mcp.schemas import (
    CheckCellArgs,
    CheckCodeArgs,
    FactsArgs,
    FixEdit,
    Fixes,
    FixesArgs,
    KernelFacts,
    Prediction,
    SandboxRun,
    TryCodeArgs,
    bounded,
)

log = logging.getLogger(__name__)

MAX_NAMES = 200
FACTS_BUDGET_MS = 2000.0
BUSY = "the kernel is running a cell: CRANE asks it nothing until the cell ends"

T = TypeVar("T")


class ToolFailure(CraneError):
    """A tool could not do its work (dead kernel, unreadable notebook, no sandbox): the message says why."""


@dataclass
class Attached:
    """The kernel the server serves, how it was reached, and what to do when the server stops.

    `conn` is one fixed connection (the editor's attachment); `follow(cancel)` instead finds the kernel again on
    every call (`crane mcp`: `crane.mcp.follow.KernelFollower`, `crane.mcp.replay.BackgroundReplay`) and raises
    `KernelUnavailable` saying why there is none; `progress()` says what a call waiting for it waits on."""

    conn: KernelConnection | None
    describe: str
    notebook: str | None = None  # --notebook: the replayed notebook (the default for the cell tools)
    open_notebook: Any = None  # the editor's synced notebook (crane.notebook.model.Notebook), read for `notebook`
    close: Callable[[], None] = lambda: None
    follow: Callable[[threading.Event | None], KernelConnection] | None = None
    progress: Callable[[], str] | None = None
    # another client's cell runs in the kernel now (`crane.mcp.follow.KernelFollower.busy`); None: not watched
    busy: Callable[[], bool] | None = None
    # the folders whose notebooks a `notebook` argument may name (the server's working folder when it started,
    # --notebook's folder); the kernel's working folder is served too (`KernelTools._served`)
    served: list[str] = field(default_factory=lambda: [os.getcwd()])


class _Locks:
    """Tools that only read (facts, static checks) never wait behind a sandbox run or a fix search."""

    def __init__(self) -> None:
        self.read = threading.Lock()  # one facts probe at a time
        self.run = threading.Lock()  # one sandbox run / fix search at a time


class KernelTools:
    """The tools' work for one server. `for_call(cancel)` gives the view one call uses: its connection is
    resolved once, and setting `cancel` ends its sandbox run (and the run's process tree) at once."""

    def __init__(self, attached: Attached, cancel: threading.Event | None = None, locks: _Locks | None = None):
        self.attached = attached
        self.cancel = cancel
        self._locks = locks or _Locks()
        self._conn: KernelConnection | None = None

    def for_call(self, cancel: threading.Event | None) -> KernelTools:
        return KernelTools(self.attached, cancel, self._locks)

    @property
    def conn(self) -> KernelConnection:
        if self._conn is None:
            if self.attached.follow is not None:
                self._conn = self.attached.follow(self.cancel)
            else:
                assert self.attached.conn is not None
                self._conn = self.attached.conn
        return self._conn

    def _busy(self) -> bool:
        return self.attached.busy is not None and self.attached.busy()

    def _not_busy(self) -> None:
        if self._busy():
            raise ToolFailure(f"{BUSY} ({self.attached.describe}); call again when it has ended")

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def _acquire(self, lock: threading.Lock) -> None:
        while not lock.acquire(timeout=0.2):
            if self._cancelled():
                raise ToolFailure("cancelled before it started")

    def _guard(self, work: Callable[[], T], lock: threading.Lock | None = None) -> T:
        from crane.mcp.follow import KernelUnavailable
        from crane.mcp.replay import ReplayPending

        lock = lock if lock is not None else self._locks.run
        self._acquire(lock)
        try:
            try:
                conn = self.conn
            except ReplayPending:
                raise
            except KernelUnavailable as exc:
                raise ToolFailure(str(exc)) from None
            if not conn.is_alive():
                raise ToolFailure(f"the kernel is not running ({self.attached.describe}): restart it; CRANE looks "
                                  "for it again on the next call")
            try:
                return work()
            except KernelError as exc:
                raise ToolFailure(f"kernel error ({self.attached.describe}): {exc}") from None
        finally:
            lock.release()

    # -- crane_kernel_facts ------------------------------------------------------------------------------
    def facts(self, args: FactsArgs) -> KernelFacts:
        return self._guard(lambda: self._facts(args), self._locks.read)

    def _facts(self, args: FactsArgs) -> KernelFacts:
        from crane.probe.collect import ProbeClient
        from crane.probe.facts import ProbeRequest

        self._not_busy()
        names = args.names
        probe = ProbeClient(self.conn)
        if names is None:  # the user's variables, listed by the probe (its request guarded, no name of theirs run)
            names = probe.run(ProbeRequest(user_names=MAX_NAMES, time_budget_ms=50), timeout=10.0).user_names
        request = ProbeRequest(names=list(names), time_budget_ms=FACTS_BUDGET_MS, max_total_bytes=256 * 1024)
        r = probe.run(request, timeout=30.0)
        return KernelFacts(facts=r.facts, undefined=r.undefined, cwd=r.cwd, libraries=r.libraries,
                           truncated=r.truncated, errors=r.errors, elapsed_ms=round(r.elapsed_ms, 3))

    # -- crane_try_code ----------------------------------------------------------------------------------
    def try_code(self, args: TryCodeArgs) -> SandboxRun:
        return self._guard(lambda: self._sandbox_run(args.code, args.budget_s))

    def _sandbox_run(self, code: str, budget_s: float) -> SandboxRun:
        v = self._speculate(code, budget_s)
        if v.verdict == "unavailable" and not self.conn.is_alive():
            raise ToolFailure(f"the kernel died ({self.attached.describe})")
        return SandboxRun.of(v)

    # -- crane_check_code / crane_check_cell -------------------------------------------------------------
    def check_code(self, args: CheckCodeArgs) -> Prediction:
        return self._pending_unknown(lambda: self._guard(
            lambda: self._predict(args.code, None, 1, args.mode, args.budget_s), self._lock_for(args.mode)))

    def _lock_for(self, mode: str) -> threading.Lock:
        return self._locks.run if mode == "auto" else self._locks.read

    def _pending_unknown(self, work: Callable[[], Prediction]) -> Prediction:
        """A check asked while `--notebook`'s replay goes on: `unknown`, with the replay's progress."""
        from crane.mcp.replay import ReplayPending

        try:
            return work()
        except ReplayPending as exc:
            return Prediction(prediction="unknown", decided_by="none", facts_mode="static", facts_error=str(exc),
                              how=f"unknown: {exc}")

    def check_cell(self, args: CheckCellArgs) -> Prediction:
        def work() -> Prediction:
            from crane.analysis.scope import NotebookScope
            from crane.notebook.history import check_target

            nb, path = self._notebook(args.notebook)
            try:
                source = check_target(nb, args.cell).source
            except (CraneError, ValueError) as exc:
                raise ToolFailure(str(exc)) from None
            p = self._predict(source, NotebookScope.from_notebook(nb), args.cell, args.mode, args.budget_s)
            p.cell, p.notebook = args.cell, path
            return p

        return self._pending_unknown(lambda: self._guard(work, self._lock_for(args.mode)))

    def _predict(self, code: str, scope: Any, target: int, mode: str, budget_s: float) -> Prediction:
        from crane.analysis.cell import analyze_cell
        from crane.pipeline import check_cell
        from crane.policy import decide, outcome

        check = check_cell(analyze_cell(code), self._facts_source(), scope, target)
        run: SandboxRun | None = None
        verdict = None
        if mode == "auto":
            verdict = self._speculate(code, budget_s)
            run = SandboxRun.of(verdict)
        d = decide("auto" if mode == "auto" else "static", check.findings, verdict)
        prediction, decided_by = outcome(d, sandbox_ran=run is not None, facts_read=check.mode == "live"), d.decided_by
        how = {
            "sandbox": f"the code {verdict.how() if verdict else ''}: {d.prediction}",
            "rules": "CRANE's rules on the kernel's live facts"
                     + (f" (the sandbox run was inconclusive: {run.outcome})" if run else ""),
            "none": "no rule found a crash" + (f"; the sandbox run was inconclusive: {run.outcome}" if run else ""),
        }.get(d.decided_by, d.decided_by)
        if check.mode != "live":
            how += f" (facts: {check.mode}{': ' + check.error if check.error else ''})"
        if prediction == "unknown":
            how = "unknown: neither the kernel's facts nor a sandbox run decided: " + how
        return Prediction(
            prediction=prediction, decided_by=decided_by,
            findings=list(d.findings), cleared=list(d.cleared), sandbox=run, facts_mode=check.mode,
            facts_error=check.error, how=how,
        )

    def _facts_source(self) -> Any:
        """The kernel's live facts, or none at once while the kernel runs a cell (`crane.pipeline.FactsSource`)."""
        from crane.pipeline import FactsAnswer, probe_facts
        from crane.probe.collect import ProbeClient

        live = probe_facts(ProbeClient(self.conn))

        def source(request: Any) -> FactsAnswer:
            return FactsAnswer(None, "static", BUSY) if self._busy() else live(request)

        return source

    def _speculate(self, code: str, budget_s: float) -> Any:
        """`crane.sandbox.fork_runner.speculate`, or `unavailable` at once while the kernel runs a cell (the
        fork request would wait behind it)."""
        from crane.sandbox.fork_runner import speculate
        from crane.sandbox.verdict import unavailable

        if self._busy():
            return unavailable(BUSY)
        return speculate(self.conn, code, budget_s, cancel=self.cancel)

    # -- crane_fixes -------------------------------------------------------------------------------------
    def fixes(self, args: FixesArgs) -> Fixes:
        def work() -> Fixes:
            from crane.analysis.cell import analyze_cell
            from crane.analysis.scope import NotebookScope
            from crane.fixes.apply import unified_diff
            from crane.fixes.sandbox import ForkFixSandbox
            from crane.fixes.search import SearchBudget, search_fixes
            from crane.notebook.history import check_target
            from crane.pipeline import check_cell, probe_facts
            from crane.probe.collect import ProbeClient
            from crane.sandbox.fork_session import SandboxError

            nb, path = self._notebook(args.notebook)
            try:
                source = check_target(nb, args.cell).source
            except (CraneError, ValueError) as exc:
                raise ToolFailure(str(exc)) from None
            self._not_busy()
            scope = NotebookScope.from_notebook(nb)
            check = check_cell(analyze_cell(source), probe_facts(ProbeClient(self.conn)), scope, args.cell)
            try:
                sandbox = ForkFixSandbox(self.conn)
            except SandboxError as exc:
                raise ToolFailure(f"no sandbox to verify fixes in: {exc}") from None
            stop = _close_on_cancel(self.cancel, sandbox)
            try:
                report = search_fixes(nb, args.cell, sandbox, pre=check.probe, findings=list(check.findings),
                                      scope=scope, budget=SearchBudget(max_seconds=args.budget_s))
            finally:
                stop.set()
                sandbox.close()
            if self._cancelled():
                raise ToolFailure("cancelled")
            name = os.path.basename(path)
            edits = [
                FixEdit(title=f.title, cell=f.target, old_source=f.old, new_source=f.new, run_first=list(f.run_first),
                        other_cells={str(c.cell): c.new for c in f.cell_edits}, diff=unified_diff(f, name),
                        verified_in=f.sandbox, stdout=bounded(f.stdout)[0], verification=f.verification,
                        run_certain=f.run_certain, run_doubt=f.run_doubt)
                for f in report.fixes
            ]
            return Fixes(status=report.status, cell=args.cell, notebook=path,
                         crash=report.crash.text if report.crash else None, crash_certain=report.crash_certain,
                         crash_doubt=report.crash_doubt, fixes=edits, tried=report.tried,
                         reason=report.reason, elapsed_s=round(report.elapsed_s, 3))

        return self._guard(work)

    # -- notebooks ---------------------------------------------------------------------------------------
    def _notebook(self, given: str | None) -> tuple[Any, str]:
        from crane.notebook.model import NotebookError, load_notebook

        opened = self.attached.open_notebook
        if opened is not None and (given is None or (
                opened.path and os.path.abspath(os.path.expanduser(given)) == os.path.abspath(opened.path))):
            return opened, opened.path or "untitled.ipynb"  # the editor's cells, unsaved edits included
        path = given or self.attached.notebook
        if not path:
            raise ToolFailure("no notebook given (pass `notebook`, or start `crane mcp --notebook NB`)")
        path = os.path.abspath(os.path.expanduser(path))
        if given is not None and not self._served(path):
            raise ToolFailure(f"the notebook {path} is outside the folders this server serves "
                              f"({', '.join(self._roots())}): refused")
        try:
            return load_notebook(path), path
        except (NotebookError, OSError) as exc:
            raise ToolFailure(f"cannot read the notebook {path}: {exc}") from None

    def _roots(self) -> list[str]:
        return [os.path.realpath(r) for r in [*self.attached.served,
                                               *([os.path.dirname(self.attached.notebook)]
                                                 if self.attached.notebook else [])]]

    def _served(self, path: str) -> bool:
        """`path` (its links resolved) lies in a served folder: the server's own (`Attached.served`, --notebook's),
        else the kernel's working folder (asked only then)."""
        real = os.path.realpath(path)

        def inside(root: str) -> bool:
            return real == root or real.startswith(root.rstrip(os.sep) + os.sep)

        if any(inside(r) for r in self._roots()):
            return True
        try:
            from crane.probe.collect import ProbeClient
            from crane.probe.facts import ProbeRequest
            cwd = ProbeClient(self.conn).run(ProbeRequest(names=[], time_budget_ms=50), timeout=10.0).cwd
        except Exception:  # noqa: BLE001 - no kernel to ask: only the server's own folders are served
            return False
        return bool(cwd) and inside(os.path.realpath(str(cwd)))

    def notebook_cells(self, path: str | None = None) -> list[dict[str, Any]]:
        """The notebook's cells (number, kind, source, execution count, error) for the resource."""
        nb, _ = self._notebook(path)
        return [msgspec.to_builtins(c) for c in nb.cells]


def _close_on_cancel(cancel: threading.Event | None, sandbox: Any) -> threading.Event:
    """Close `sandbox` (ending its fork session and the processes in it) as soon as `cancel` is set, until the
    returned event is set."""
    stop = threading.Event()
    if cancel is None:
        return stop

    def watch() -> None:
        while not stop.wait(0.1):
            if cancel.is_set():
                try:
                    sandbox.close()
                except Exception:  # the search thread sees the closed session and ends
                    log.debug("closing the fix sandbox on cancel failed", exc_info=True)
                return

    threading.Thread(target=watch, name="crane-mcp-cancel", daemon=True).start()
    return stop
