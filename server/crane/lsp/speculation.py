"""auto mode: speculative runs of cells in a confined copy-on-write fork of the attached kernel.

After the rules' diagnostics of a cell are published, the cell is queued for a sandboxed run
(`crane.sandbox.scale.speculate_scaled`: full size, or a miniature when the cell's last run, as the kernel
watcher measured it, or a first attempt outlasts the budget) when it has rule findings or has never been
executed. A cell judged only in miniature, or not at all, is then offered to `background_run` for a full-size
run at idle priority while the kernel is idle. Runs happen one at a time,
on a thread of their own with a kernel connection of their own, only while the kernel is attached and idle,
once the cell's text has been stable for `CRANE_LSP_SPECULATE_DELAY_MS`. Verdicts are kept by the session
per (cell text, kernel state generation): typing back the same text, or re-checking a cell, does not fork
again; a passing `unavailable` (`SandboxVerdict.transient`) is tried again a few times first
(crane.lsp.transient_stops). A verdict whose cell text or kernel state changed while it ran is discarded. What a verdict does to
the diagnostics is `crane.policy.decide` (see `diagnostics.final_findings`). `crane.runSpeculatively` runs a
cell on demand (`run_now`). After a verdict is published, `after_verdict` (the quick-fix search,
crane.lsp.quick_fixes) is told.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from crane.lsp.background_run import BackgroundRuns, ThreadConnections
from crane.lsp.diagnostics import republish
from crane.lsp.notebook_map import CellSnapshot, snapshot
from crane.lsp.transient_stops import RETRY_DELAY_S, TransientStops

if TYPE_CHECKING:
    from crane.lsp.host import Host
    from crane.lsp.kernel_attach import Attachment
    from crane.lsp.llm_bridge import LLMService
    from crane.lsp.notebook_session import NotebookSession
    from crane.sandbox.verdict import SandboxVerdict

log = logging.getLogger(__name__)

BUSY_POLL_S = 0.2
CANCEL_POLL_S = 0.05  # how often a running speculation looks whether the user started a cell


class SpeculationService:
    def __init__(self, host: Host, llm: LLMService):
        self.host = host
        self.llm = llm
        self._due: dict[tuple[str, str], float] = {}  # (notebook key, cell URI) -> loop time
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crane-sandbox")
        self._conns = ThreadConnections(host)  # used on the sandbox thread only
        self.background = BackgroundRuns(host)
        # called when the sandbox mode in force changed (the kernel status says it)
        self.on_mode: Callable[[NotebookSession], None] | None = None
        self.runs = 0  # sandbox runs started (for tests and logs)
        self.cancelled = 0  # runs stopped because the user ran a cell meanwhile
        self.transient = TransientStops()  # passing `unavailable` verdicts: tried again, not kept at once
        # called (on the loop) after a verdict was cached and published: the quick-fix search's trigger
        self.after_verdict: Callable[[NotebookSession, CellSnapshot], None] | None = None

    # -- cache (kept by the session) -------------------------------------------------------------------------
    def cached(self, session: NotebookSession, cell: CellSnapshot) -> SandboxVerdict | None:
        if not self.host.settings.speculative_on:
            return None
        return session.sandbox_verdicts.get(cell.source, session.kernel_gen)

    # -- what to run ----------------------------------------------------------------------------------------
    def applicable(self, session: NotebookSession) -> bool:
        att = session.attachment
        return self.host.settings.speculative_on and att is not None and att.alive and not session.closed

    def wants(self, session: NotebookSession, cell: CellSnapshot) -> bool:
        """Cells worth a speculative run: those with rule findings and those never executed."""
        if not cell.is_code or not cell.source.strip():
            return False
        return bool(session.known(cell.uri).rule_findings) or cell.execution_order is None

    def consider(self, session: NotebookSession, cell: CellSnapshot) -> None:
        """Called after a cell's rules were published: queue a run, or hand an undecided cell to the LLM."""
        if self.applicable(session) and self.wants(session, cell):
            if self.cached(session, cell) is None:
                self.request(session, cell.uri)
                return
        self.llm.consider(session, cell)

    def request(self, session: NotebookSession, cell_uri: str, after_s: float = 0.0) -> None:
        loop = asyncio.get_running_loop()
        last = session.known(cell_uri).last_edit
        due = max(loop.time() + after_s, last + self.host.tuning.speculate_delay_ms / 1000)
        self._due[(self.host.key(session.uri), cell_uri)] = due
        self._ensure_task()
        assert self._wake is not None
        self._wake.set()

    def _ensure_task(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    # -- the worker -----------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            if not self._due:
                await self._wake.wait()
                continue
            now = loop.time()
            ready = sorted((t, k) for k, t in self._due.items() if t <= now)
            if not ready:
                await self._sleep(min(self._due.values()) - now)
                continue
            ran_any = False
            for _t, key in ready:
                session = self.host.sessions.get(key[0])
                if session is None or not self.applicable(session):
                    self._due.pop(key, None)
                    self.transient.forget(key)  # its notebook closed or stopped speculating: no retry pending
                    continue
                if session.attachment.busy:  # type: ignore[union-attr]
                    continue  # a user cell is running: wait until the kernel is idle
                self._due.pop(key, None)
                try:
                    await self._run_queued(session, key[1])
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("speculative run failed")
                ran_any = True
                break  # one at a time: re-read the queue (edits may have moved things)
            if not ran_any:
                await self._sleep(BUSY_POLL_S)

    async def _sleep(self, seconds: float) -> None:
        assert self._wake is not None
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=max(seconds, 0.0))
        except asyncio.TimeoutError:
            pass

    async def _run_queued(self, session: NotebookSession, cell_uri: str) -> None:
        snap = snapshot(self.host.workspace, session.uri)
        cell = snap.cell(cell_uri) if snap is not None else None
        if cell is None or not self.wants(session, cell) or self.cached(session, cell) is not None:
            return
        gen = session.kernel_gen
        v = await self._speculate(session, cell.source)
        if v is None:
            if not session.closed and self.applicable(session):
                self.request(session, cell_uri)  # stopped for a user's cell: again once the kernel is idle
            return
        if session.closed:
            return
        if session.kernel_gen != gen:  # the kernel's state changed meanwhile: discard, try again later
            log.debug("speculative run of %s discarded: the kernel state changed", cell_uri)
            if self.applicable(session):
                self.request(session, cell_uri)
            return
        stops = self.transient.settle((self.host.key(session.uri), cell_uri), cell.source, gen, v)
        if stops:  # a passing cause (the export yielded to a waiting request, or its time cap): not kept
            log.info("speculative run of %s stopped (%s): again (%d)", cell_uri, v.reason, stops)
            if self.applicable(session):
                self.request(session, cell_uri, RETRY_DELAY_S * stops)
            return
        session.sandbox_verdicts.put(cell.source, gen, v)
        self._note_mode(session, v)
        self.background.offer(session, cell_uri, cell.source, gen, v)
        if republish(self.host, session, cell_uri, cell.source):  # False: the text changed (a newer check runs)
            now = snapshot(self.host.workspace, session.uri)
            current = now.cell(cell_uri) if now is not None else None
            if current is not None:
                self.llm.consider(session, current)
                self._after_verdict(session, current)

    def _after_verdict(self, session: NotebookSession, cell: CellSnapshot) -> None:
        if self.after_verdict is not None:
            try:
                self.after_verdict(session, cell)
            except Exception:
                log.exception("after a sandbox verdict")

    async def _speculate(self, session: NotebookSession, source: str) -> SandboxVerdict | None:
        att = session.attachment
        if att is None or not att.alive:
            return None
        budget = self.host.settings.speculative.budget_seconds
        recorded = session.run_seconds.get(source)
        places = [os.path.dirname(os.path.abspath(session.path))] if session.path else []
        self.runs += 1
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        gen = session.kernel_gen
        fut = loop.run_in_executor(self._executor, self._speculate_blocking, att, source, budget, recorded,
                                   places, cancel)
        # The run ends the moment the user runs a cell: while it lasts, every page the user's cell changes in the
        # kernel is copied (the sandbox keeps the old one), which could push the kernel out of memory; and its
        # verdict would be about a state that is gone. Such a run gives no verdict (None): it is queued again.
        while not fut.done():
            await asyncio.wait([fut], timeout=CANCEL_POLL_S)
            if not cancel.is_set() and (att.busy or session.kernel_gen != gen or not att.alive or session.closed):
                cancel.set()
        v = fut.result()
        if cancel.is_set():
            self.cancelled += 1
            log.info("speculative run stopped: the kernel started running a cell")
            return None
        return v

    # -- on the sandbox thread ------------------------------------------------------------------------------
    def _speculate_blocking(self, att: Attachment, source: str, budget: float, recorded: float | None,
                            places: list[str], cancel: threading.Event | None = None) -> SandboxVerdict:
        from crane.sandbox.scale import speculate_scaled
        from crane.sandbox.verdict import unavailable

        try:
            conn = self._conns.get(att)
        except Exception as exc:
            return unavailable(f"could not connect to the kernel for a sandboxed run: {exc}")
        return speculate_scaled(conn, source, budget, recorded_s=recorded, places=places, cancel=cancel,
                                sandbox=self.host.settings.sandbox_options())

    # -- on demand ------------------------------------------------------------------------------------------
    async def run_now(self, session: NotebookSession, cell: CellSnapshot) -> SandboxVerdict:
        """Run a cell speculatively now (crane.runSpeculatively); the verdict is cached and published."""
        gen = session.kernel_gen
        v = await self._speculate(session, cell.source)
        if v is None:
            from crane.sandbox.verdict import unavailable

            att = session.attachment
            if att is None or not att.alive:
                return unavailable("no kernel is attached")
            return unavailable("stopped: the kernel started running a cell")
        if v.transient:
            return v  # a passing cause: said, not kept (the next trigger tries again)
        if session.kernel_gen == gen and not session.closed:
            session.sandbox_verdicts.put(cell.source, gen, v)
            self._note_mode(session, v)
            if self.host.settings.speculative_on:
                self.background.offer(session, cell.uri, cell.source, gen, v)
                republish(self.host, session, cell.uri, cell.source)
                self._after_verdict(session, cell)
        return v

    def _note_mode(self, session: NotebookSession, v: SandboxVerdict) -> None:
        from crane.sandbox.layer_choice import AUTO_BLOCKING_REASON

        if v.mode_reason == AUTO_BLOCKING_REASON:
            return  # the cheaper confinement by choice: says nothing about what the machine allows
        if v.mode is not None and (v.mode, v.mode_reason) != session.sandbox_mode:
            session.sandbox_mode = (v.mode, v.mode_reason)
            if self.on_mode is not None:
                self.on_mode(session)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

        self.background.close()
        self._executor.submit(self._conns.close_all)
        self._executor.shutdown(wait=False)
