"""Keeping each open notebook attached to its kernel, and telling the client (`crane/kernelStatus`).

Attach order: (a) the kernel the client named (`crane/attachKernel`), (b) discovery by
`__vsc_ipynb_file__`, (c) the `crane.kernel.connectionFile` setting, (d) none: static-only diagnostics. A
maintainer task per notebook looks again every `discoveryIntervalMs` while nothing is attached, and reattaches
after the kernel dies or restarts (same connection file first, then discovery). Watcher events arrive on the
watcher's thread and are marshalled onto the event loop; a finished user cell re-checks the cells that read
the names it wrote (plus the cells that have diagnostics); a new kernel re-checks every cell.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from crane.lsp.discovery import Discovery
from crane.lsp.kernel_attach import Attachment, attach
from crane.lsp.kernel_watch import WatchEvent
from crane.lsp.messages import AttachResult, KernelSource, KernelStatus, to_wire
from crane.lsp.notebook_map import same_path, snapshot
from crane.lsp.notebook_session import NotebookSession

if TYPE_CHECKING:
    from crane.lsp.analysis_service import AnalysisService
    from crane.lsp.host import Host

log = logging.getLogger(__name__)

KERNEL_STATUS = "crane/kernelStatus"
BUSY_AFTER_S = 0.15  # a user request must run this long before the status says "busy"


class KernelSupervisor:
    def __init__(self, host: Host, analysis: AnalysisService):
        self.host = host
        self.analysis = analysis
        self.discovery = Discovery()
        self._tasks: dict[str, asyncio.Task] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._attach_lock: dict[str, asyncio.Lock] = {}

    # -- lifecycle ----------------------------------------------------------------------------------
    def open(self, session: NotebookSession) -> None:
        loop = asyncio.get_running_loop()
        session.on_kernel_failure = lambda exc: loop.call_soon_threadsafe(self._kernel_failed, session, exc)
        session.on_kernel_restart = lambda: loop.call_soon_threadsafe(self._kernel_restarted, session)
        self._wake[session.uri] = asyncio.Event()
        self._attach_lock[session.uri] = asyncio.Lock()
        self._tasks[session.uri] = loop.create_task(self._maintain(session))

    async def close(self, session: NotebookSession) -> None:
        task = self._tasks.pop(session.uri, None)
        if task is not None:
            task.cancel()
        self._wake.pop(session.uri, None)
        self._attach_lock.pop(session.uri, None)
        att, session.attachment = session.attachment, None
        if att is not None:
            await asyncio.to_thread(att.close)

    async def shutdown(self) -> None:
        for session in list(self.host.sessions.values()):
            await self.close(session)

    async def settings_changed(self) -> None:
        """The kernel settings changed: look again (a kernel found another way stays attached)."""
        for session in list(self.host.sessions.values()):
            self.wake(session)

    def wake(self, session: NotebookSession) -> None:
        ev = self._wake.get(session.uri)
        if ev is not None:
            ev.set()

    # -- status -------------------------------------------------------------------------------------
    def notify_status(self, session: NotebookSession) -> None:
        att = session.attachment
        status = KernelStatus(
            notebook_uri=session.uri,
            state=session.state,
            kernel=att.info if att is not None else None,
            message=session.status_message,
            stale=session.used_stale,
        )
        self.host.notify(KERNEL_STATUS, to_wire(status))

    def _set_state(self, session: NotebookSession, state, message: str) -> None:
        if session.closed:
            return
        if (state, message) != (session.state, session.status_message):
            session.state, session.status_message = state, message
            self.notify_status(session)

    # -- attaching ----------------------------------------------------------------------------------
    async def attach_requested(self, session: NotebookSession, connection_file: str) -> AttachResult:
        """(a): the client names the kernel. Replaces any current attachment."""
        path = os.path.abspath(os.path.expanduser(connection_file))
        if not os.path.isfile(path):
            return AttachResult(attached=False, message=f"connection file not found: {path}")
        session.requested = (path, "request")
        ok, message = await self._try_attach(session, path, "request")
        self.wake(session)
        return AttachResult(attached=ok, message=message, kernel=session.attachment.info if ok and session.attachment else None)

    async def _try_attach(self, session: NotebookSession, path: str, source: KernelSource) -> tuple[bool, str]:
        lock = self._attach_lock.get(session.uri)
        if lock is None:
            return False, "the notebook is closed"
        async with lock:
            timeout = self.host.tuning.attach_timeout_ms / 1000
            holder: dict[str, Attachment] = {}

            def on_event(event: WatchEvent) -> None:
                att = holder.get("att")
                if att is not None:
                    self.host.call_soon_threadsafe(self._on_event, session, att, event)

            try:
                att = await asyncio.to_thread(attach, path, source, on_event, timeout)
            except Exception as exc:
                log.info("attach %s failed: %s", path, exc)
                return False, f"could not attach to {path}: {exc}"
            holder["att"] = att
            if session.closed:
                await asyncio.to_thread(att.close)
                return False, "the notebook was closed"
            old, session.attachment = session.attachment, att
            if old is not None:
                await asyncio.to_thread(old.close)
            session.facts.clear()
            session.kernel_changed()
            how = {"request": "named by the client", "discovery": "found by __vsc_ipynb_file__", "setting": "from crane.kernel.connectionFile"}[source]
            warn = ""
            if att.info.notebook_path and session.path and not same_path(att.info.notebook_path, session.path):
                warn = f" (note: this kernel says it runs {att.info.notebook_path})"
            self._set_state(session, "busy" if att.busy else "attached", f"attached to {os.path.basename(path)}, {how}{warn}")
            self.recheck_all(session)
            return True, f"attached to {path}{warn}"

    async def _resolve(self, session: NotebookSession) -> bool:
        settings = self.host.settings
        if session.requested is not None and os.path.isfile(session.requested[0]):  # (a), also after a restart
            ok, _ = await self._try_attach(session, *session.requested)
            if ok:
                return True
        last = session.last_kernel
        if last is not None and last != session.requested and os.path.isfile(last[0]):  # the kernel that died
            ok, _ = await self._try_attach(session, *last)
            if ok:
                return True
        if session.path:  # (b)
            match = await asyncio.to_thread(self.discovery.find, session.path)
            if match is not None:
                ok, _ = await self._try_attach(session, match.connection_file, "discovery")
                if ok:
                    return True
        if settings.kernel.connection_file:  # (c)
            ok, msg = await self._try_attach(session, settings.kernel.connection_file, "setting")
            if ok:
                return True
            log.info("crane.kernel.connectionFile: %s", msg)
        if session.state != "dead":
            reason = "no kernel found for this notebook" if session.path else "the notebook has no file path"
            self._set_state(session, "static-only", f"{reason}: static-only diagnostics (syntax, names, modules, files)")
        return False

    async def _maintain(self, session: NotebookSession) -> None:
        wake = self._wake[session.uri]
        while not session.closed:
            try:
                att = session.attachment
                if att is None or not att.alive:
                    if att is not None:  # dead: let go of it, then look again (that file first)
                        session.attachment = None
                        session.last_kernel = (att.info.connection_file, att.info.source)
                        await asyncio.to_thread(att.close)
                    await self._resolve(session)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("kernel maintenance for %s failed", session.uri)
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), timeout=self.host.tuning.discovery_interval_ms / 1000)
            except asyncio.TimeoutError:
                pass

    # -- kernel events (on the loop) ----------------------------------------------------------------
    def _on_event(self, session: NotebookSession, att: Attachment, event: WatchEvent) -> None:
        if session.closed or session.attachment is not att:
            return
        if event.kind == "busy":  # said only when it lasts: short silent requests of other clients do not flicker
            session.kernel_changed()  # a user cell is changing the state: speculative results are discarded
            self.host.call_later(BUSY_AFTER_S, self._still_busy, session, att)
        elif event.kind == "finished":
            session.kernel_changed()
            count, last = event.execution_count, att.last_count
            if count is not None:
                att.last_count = count
                if last is not None and count <= last:  # the count went back: a restart we did not see
                    self.host.spawn(self._verify_identity(session, att))
            self._set_state(session, "idle", "the kernel is idle")
            self.recheck_after_run(session, event.code)
        elif event.kind == "idle":
            if session.state == "busy":
                self._set_state(session, "idle", "the kernel is idle")
            if session.stale_cells and session.scheduler is not None:  # they were checked against old facts
                session.scheduler.request(list(session.stale_cells), 0.0)
        elif event.kind == "dead":
            self._kernel_failed(session, None)
        elif event.kind in ("restarted", "alive"):
            self.host.spawn(self._verify_identity(session, att))

    def _still_busy(self, session: NotebookSession, att: Attachment) -> None:
        if not session.closed and session.attachment is att and att.busy:
            self._set_state(session, "busy", "the kernel is running a cell: diagnostics use the facts from before it")

    def _kernel_failed(self, session: NotebookSession, exc: Exception | None) -> None:
        att = session.attachment
        if session.closed or att is None:
            return
        from crane.kernel.errors import KernelDead

        if exc is not None and not isinstance(exc, KernelDead) and att.watch.alive:
            return  # a failed request on a live kernel: the facts fall back, the attachment stays
        att.watch.alive = False
        session.kernel_changed()
        self._set_state(session, "dead", "the kernel died: static-only diagnostics until it is back")
        self.recheck_all(session)
        self.wake(session)

    def _kernel_restarted(self, session: NotebookSession) -> None:
        if session.closed or session.attachment is None:
            return
        session.kernel_changed()
        self._set_state(session, "attached", "the kernel restarted (fresh namespace): re-checking every cell")
        self.recheck_all(session)

    async def _verify_identity(self, session: NotebookSession, att: Attachment) -> None:
        try:
            same = await asyncio.to_thread(att.check_identity, self.host.tuning.attach_timeout_ms / 1000)
        except Exception as exc:  # not answering yet (restarting, busy): ask again until it does or dies
            log.info("kernel identity check failed (%s): trying again", exc)
            if session.attachment is att and not session.closed and att.alive:
                self.host.call_later(
                    self.host.tuning.discovery_interval_ms / 1000,
                    lambda: self.host.spawn(self._verify_identity(session, att)),
                )
            return
        if session.attachment is not att:
            return
        if not same:  # restarted behind the same connection file: a fresh namespace
            session.attachment = None
            session.kernel_changed()
            session.last_kernel = (att.info.connection_file, att.info.source)
            await asyncio.to_thread(att.close)
            self._set_state(session, "dead", "the kernel restarted: reattaching")
            self.wake(session)
        elif session.state == "dead":
            self._set_state(session, "attached", "the kernel is back")
            self.recheck_all(session)

    # -- what to re-check -------------------------------------------------------------------------
    def recheck_all(self, session: NotebookSession) -> None:
        snap = snapshot(self.host.workspace, session.uri)
        if snap is not None and session.scheduler is not None:
            session.scheduler.request([c.uri for c in snap.cells], 0.0)

    def recheck_after_run(self, session: NotebookSession, code: str | None) -> None:
        """A cell ran: re-check the cells that read what it wrote, and the cells with diagnostics."""
        snap = snapshot(self.host.workspace, session.uri)
        if snap is None or session.scheduler is None:
            return
        written = self.analysis.names_written(code) if code is not None else None
        if written is None:
            session.scheduler.request([c.uri for c in snap.cells], 0.0)
            return
        uris = [u for u, f in session.findings.items() if f]
        uris += [u for u, f in session.rule_findings.items() if f]  # also those the sandbox cleared
        for c in snap.code_cells:
            read = self.analysis.names_read(c.source)
            if read is None or read & written:
                uris.append(c.uri)
        session.scheduler.request(uris, 0.0)
