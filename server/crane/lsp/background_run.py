"""Background full-size runs: a cell the sandbox judged only in miniature, or not at all (a timeout), runs again
at full size while the kernel is idle, at idle CPU priority, up to `crane.speculative.backgroundSeconds`.

One run at a time, on a thread and a kernel connection of its own. The editor shows it as work-done progress
("test-running cell 7: 40 s, no crash yet"), which the user may cancel. It stops at once (the sandbox kills its
whole process tree) when the user edits that cell, runs any cell (the kernel gets busy or its state changes),
the kernel dies, the notebook closes or the mode changes: it never competes with the user's own run. A
conclusive result (crash / no-crash) becomes the cell's verdict for that text and kernel state, and its
diagnostics are republished (the squiggle appears when the full run crashes).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from crane.lsp.diagnostics import republish
from crane.lsp.notebook_map import snapshot
from crane.lsp.progress import WorkProgress

if TYPE_CHECKING:
    from crane.lsp.host import Host
    from crane.lsp.kernel_attach import Attachment
    from crane.lsp.notebook_session import NotebookSession
    from crane.sandbox.verdict import SandboxVerdict

log = logging.getLogger(__name__)

WATCH_S = 0.1  # how often a running background run checks whether it must stop
REPORT_S = 5.0  # progress reports


class ThreadConnections:
    """Kernel connections owned by one worker thread, one per attachment (their requests are not the user's:
    the kernel watcher ignores them). Connections of attachments that were let go of are closed here."""

    def __init__(self, host: Host):
        self.host = host
        self._conns: dict[int, tuple[Attachment, Any]] = {}

    def get(self, att: Attachment) -> Any:
        for k, (other, conn) in list(self._conns.items()):
            if other.closed:
                del self._conns[k]
                try:
                    conn.close()
                except Exception:
                    pass
        hit = self._conns.get(id(att))
        if hit is not None and hit[0] is att:
            return hit[1]
        from crane.lsp.kernel_attach import connect, session_id

        conn = connect(att.target, self.host.tuning.attach_timeout_ms / 1000)
        att.watch.ignore_sessions.add(session_id(conn))
        self._conns[id(att)] = (att, conn)
        return conn

    def close_all(self) -> None:
        for _att, conn in self._conns.values():
            try:
                conn.close()
            except Exception:
                pass
        self._conns.clear()


class BackgroundRuns:
    def __init__(self, host: Host):
        self.host = host
        self._pending: dict[tuple[str, str], tuple[str, int]] = {}  # (notebook key, cell URI) -> (text, gen)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crane-background")
        self._conns = ThreadConnections(host)
        self.runs = 0  # started (for tests and logs)
        self.stopped: list[str] = []  # why each stopped run stopped
        self.running: str | None = None  # the cell URI of the run in progress

    def offer(self, session: NotebookSession, cell_uri: str, source: str, gen: int, verdict: SandboxVerdict) -> None:
        """After a speculative verdict: queue a full-size run when only a miniature or nothing decided."""
        spec = self.host.settings.speculative
        if not self.host.settings.speculative_on or spec.background_seconds <= spec.budget_seconds:
            return
        if verdict.verdict == "unavailable" or (verdict.scale != "miniature" and verdict.verdict != "timeout"):
            return
        if verdict.verdict == "timeout" and "memory" in (verdict.reason or ""):
            return  # a larger budget of time would not help
        self._pending[(self.host.key(session.uri), cell_uri)] = (source, gen)
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        self._wake.set()

    # -- when to stop ---------------------------------------------------------------------------------------
    def _stop_reason(self, session: NotebookSession, cell_uri: str, source: str, gen: int) -> str | None:
        att = session.attachment
        if session.closed:
            return "the notebook was closed"
        if not self.host.settings.speculative_on:
            return "speculative runs were turned off"
        if att is None or not att.alive:
            return "the kernel is gone"
        if att.busy or session.kernel_gen != gen:
            return "the kernel is running a cell"
        snap = snapshot(self.host.workspace, session.uri)
        cell = snap.cell(cell_uri) if snap is not None else None
        if cell is None or cell.source != source:
            return "the cell was edited"
        return None

    # -- the worker -----------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            if not self._pending:
                await self._wake.wait()
                continue
            started = False
            for key, (source, gen) in list(self._pending.items()):
                session = self.host.sessions.get(key[0])
                if session is None or session.kernel_gen != gen or self._stop_reason(session, key[1], source, gen):
                    if session is None or session.kernel_gen != gen or session.closed:
                        self._pending.pop(key, None)  # stale: a new verdict will offer it again
                    continue
                self._pending.pop(key, None)
                try:
                    await self._run(session, key[1], source, gen)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("background run failed")
                started = True
                break
            if not started:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=0.5)
                except asyncio.TimeoutError:
                    pass

    async def _run(self, session: NotebookSession, cell_uri: str, source: str, gen: int) -> None:
        att = session.attachment
        snap = snapshot(self.host.workspace, session.uri)
        cell = snap.cell(cell_uri) if snap is not None else None
        if att is None or cell is None:
            return
        budget = self.host.settings.speculative.background_seconds
        cancel = threading.Event()
        places = [os.path.dirname(os.path.abspath(session.path))] if session.path else []
        loop = asyncio.get_running_loop()
        self.runs += 1
        self.running = cell_uri
        why = None
        try:
            fut = loop.run_in_executor(self._executor, self._blocking, att, source, budget, cancel, places)
            async with WorkProgress(self.host, f"CRANE: test-running cell {cell.number}") as progress:  # type: ignore[arg-type]
                t0 = last = loop.time()
                while not fut.done():
                    await asyncio.wait([fut], timeout=WATCH_S)
                    if why is None:
                        why = self._stop_reason(session, cell_uri, source, gen) or (
                            "cancelled in the editor" if progress.cancelled else None)
                        if why is not None:
                            cancel.set()
                    if loop.time() - last >= REPORT_S and why is None:
                        last = loop.time()
                        progress.report(f"cell {cell.number}: {last - t0:.0f} s, no crash yet",
                                        min(99, int(100 * (last - t0) / budget)))
                v = fut.result()
        finally:
            self.running = None
        if why is not None:
            self.stopped.append(why)
            log.info("background run of cell %s stopped: %s", cell.number, why)
            return
        log.info("background run of cell %s: %s", cell.number, v.verdict)
        if v.verdict in ("crash", "no-crash") and session.kernel_gen == gen and not session.closed:
            session.sandbox_verdicts.put(source, gen, v)
            republish(self.host, session, cell_uri, source)

    def _blocking(self, att: Attachment, source: str, budget: float, cancel: threading.Event,
                  places: list[str]) -> SandboxVerdict:
        from crane.sandbox import speculate
        from crane.sandbox.verdict import unavailable

        try:
            conn = self._conns.get(att)
        except Exception as exc:
            return unavailable(f"could not connect to the kernel for a background run: {exc}")
        return speculate(conn, source, budget, idle=bool(self.host.tuning.background_idle), cancel=cancel,
                         places=places, sandbox=self.host.settings.sandbox_options())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._executor.submit(self._conns.close_all)
        self._executor.shutdown(wait=False)
