"""Keeping each open notebook attached to its kernel, and telling the client (`crane/kernelStatus`).

Attach order: (a) the kernel the client named (`crane/attachKernel`: a connection file, or a kernel id on a
Jupyter Server; by the user, or learned through the Jupyter extension's kernels API), (b) discovery by
`__vsc_ipynb_file__`, (c) the `crane.kernel.connectionFile` setting, (d) none: static-only diagnostics. A named
connection file that does not exist here but is named after a jupyter_server kernel id (`kernel-<id>.json`, a
remote kernel's) attaches through `crane.jupyterServer.url` when it is set. Naming the live kernel already
attached changes nothing but how it is said to be found (no new connection, no re-check). A maintainer task per
notebook looks again every `discoveryIntervalMs` while nothing is attached, and reattaches after the kernel
dies or restarts (same kernel first, then discovery); a local connection file that vanished (its owner
restarted the kernel with a new file, or stopped it) lets the kernel go at once. Watcher events arrive on the
watcher's thread and are marshalled onto the event loop. A request of another client is a user run only when
the kernel's execution count advanced past it (the Jupyter extension's own requests on the user's session do
not advance it): then the cells that read the names it wrote (plus the cells that have diagnostics) are
re-checked; a new kernel re-checks every cell. Cells checked with stale facts (the kernel was busy, or the
probe timed out) are checked again when the kernel goes idle, or, when no idle event is coming (it passed while
their check ran; the kernel was held by a request the watcher does not follow), after a delay that doubles from
STALE_RETRY_FIRST_S to STALE_RETRY_MAX_S while they stay stale: stale facts never outlive a free kernel.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from crane.kernel.target import KernelTarget, as_target
from crane.lsp.discovery import Discovery
from crane.lsp.kernel_attach import Attachment, attach
from crane.lsp.kernel_watch import WatchEvent
from crane.lsp.messages import AttachResult, KernelSource, KernelStatus, to_wire
from crane.lsp.notebook_map import same_path, snapshot
from crane.lsp.notebook_session import NotebookSession
from crane.lsp.prewarm import Prewarmer

if TYPE_CHECKING:
    from crane.lsp.analysis_service import AnalysisService
    from crane.lsp.host import Host

log = logging.getLogger(__name__)

KERNEL_STATUS = "crane/kernelStatus"
RUN_SECONDS_KEPT = 512  # cell texts whose last run time is remembered
BUSY_AFTER_S = 0.15  # a user request must run this long before the status says "busy"
STALE_RETRY_FIRST_S = 0.5  # stale diagnostics with no idle event to come: checked again after this
STALE_RETRY_MAX_S = 30.0  # doubling up to this while they stay stale (a kernel held by another client's request)
GONE = "the kernel stopped or restarted (its connection file is gone): static-only diagnostics until it is found"


class KernelSupervisor:
    def __init__(self, host: Host, analysis: AnalysisService):
        self.host = host
        self.analysis = analysis
        self.discovery = Discovery()
        self._tasks: dict[str, asyncio.Task] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._attach_lock: dict[str, asyncio.Lock] = {}
        self._stale_delay: dict[str, float] = {}  # notebook URI -> the next stale re-check's delay
        self._stale_due: dict[str, Attachment] = {}  # notebook URI -> the attachment its pending re-check is for
        self.prewarm = Prewarmer(host)  # the kernel's copy-path worker, ready before its first run

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
        self._stale_delay.pop(session.uri, None)
        self._stale_due.pop(session.uri, None)
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
            sandbox=session.sandbox_mode[0] if session.sandbox_mode else None,
            sandbox_reason=session.sandbox_mode[1] if session.sandbox_mode else None,
        )
        self.host.notify(KERNEL_STATUS, to_wire(status))

    def _set_state(self, session: NotebookSession, state, message: str) -> None:
        if session.closed:
            return
        if (state, message) != (session.state, session.status_message):
            session.state, session.status_message = state, message
            self.notify_status(session)

    # -- attaching ----------------------------------------------------------------------------------
    async def attach_requested(self, session: NotebookSession, connection_file: str | None = None, *,
                               server_url: str | None = None, kernel_id: str | None = None,
                               source: KernelSource = "request") -> AttachResult:
        """(a): the client names the kernel (`source`: how it learned it). Replaces any other attachment."""
        target, problem = self._requested_target(connection_file, server_url, kernel_id)
        if target is None:
            return AttachResult(attached=False, message=problem)
        session.requested = (target, source)
        ok, message = await self._try_attach(session, target, source)
        self.wake(session)
        return AttachResult(attached=ok, message=message, kernel=session.attachment.info if ok and session.attachment else None)

    def _requested_target(self, connection_file: str | None, server_url: str | None,
                          kernel_id: str | None) -> tuple[KernelTarget | None, str]:
        from crane.kernel.target import ServerSpec, ServerSpecError, kernel_id_from_connection_file

        configured = self.host.settings.jupyter_server.url
        if connection_file is not None:
            path = os.path.abspath(os.path.expanduser(connection_file))
            if os.path.isfile(path):
                return KernelTarget.local(path), ""
            kernel_id = kernel_id_from_connection_file(path)
            if kernel_id is None or not configured:
                hint = " (a remote kernel's? set crane.jupyterServer.url)" if kernel_id else ""
                return None, f"connection file not found: {path}{hint}"
        url = server_url or configured
        if not url:
            return None, "no Jupyter server to reach the kernel through: set crane.jupyterServer.url"
        try:
            return KernelTarget.remote(ServerSpec.parse(url), kernel_id or ""), ""
        except (ServerSpecError, ValueError) as exc:
            return None, f"cannot attach to kernel {kernel_id!r} on {url.split('?', 1)[0]}: {exc}"

    async def _try_attach(self, session: NotebookSession, where: KernelTarget | str,
                          source: KernelSource) -> tuple[bool, str]:
        lock = self._attach_lock.get(session.uri)
        if lock is None:
            return False, "the notebook is closed"
        async with lock:
            target = as_target(where)
            current = session.attachment
            if current is not None and current.alive and _same_kernel(current.target, target):
                return self._already_attached(session, current, source)
            timeout = self.host.tuning.attach_timeout_ms / 1000
            holder: dict[str, Attachment] = {}

            def on_event(event: WatchEvent) -> None:
                att = holder.get("att")
                if att is not None:
                    self.host.call_soon_threadsafe(self._on_event, session, att, event)

            what = target.describe()
            try:
                att = await asyncio.to_thread(attach, target, source, on_event, timeout)
            except Exception as exc:
                log.info("attach %s failed: %s", target.short(), exc)
                return False, f"could not attach to {what}: {exc}"
            holder["att"] = att
            if session.closed:
                await asyncio.to_thread(att.close)
                return False, "the notebook was closed"
            old, session.attachment = session.attachment, att
            session.facts.clear()
            session.kernel_changed()
            warn = self._path_warning(session, att)
            self._set_state(session, "busy" if att.busy else "attached", self._attached_message(att, warn))
            self.recheck_all(session)
            self.prewarm.kernel_changed(session, att)
            if old is not None:  # after the new state is said (see _let_go)
                await asyncio.to_thread(old.close)
            return True, f"attached to {what}{warn}"

    def _already_attached(self, session: NotebookSession, att: Attachment, source: KernelSource) -> tuple[bool, str]:
        """The live file already attached is named again: nothing to connect or re-check; only a client that
        learned it (request, jupyter-extension) may change how the kernel is said to be found."""
        if source in ("request", "jupyter-extension") and att.info.source != source:
            att.info.source = source
            self._set_state(session, "busy" if att.busy else "attached", self._attached_message(att, self._path_warning(session, att)))
            self.notify_status(session)  # the kernel info changed even if the state and message did not
        return True, f"already attached to {att.target.describe()}"

    @staticmethod
    def _attached_message(att: Attachment, warn: str) -> str:
        how = {
            "request": "named by the client",
            "jupyter-extension": "through the Jupyter extension",
            "discovery": "found by __vsc_ipynb_file__",
            "setting": "from crane.kernel.connectionFile",
        }[att.info.source]
        label = att.target.describe() if att.target.is_remote else os.path.basename(att.target.describe())
        return f"attached to {label}, {how}{warn}"

    @staticmethod
    def _path_warning(session: NotebookSession, att: Attachment) -> str:
        if att.info.notebook_path and session.path and not same_path(att.info.notebook_path, session.path):
            return f" (note: this kernel says it runs {att.info.notebook_path})"
        return ""

    async def _resolve(self, session: NotebookSession) -> bool:
        settings = self.host.settings
        if session.requested is not None and _available(session.requested[0]):  # (a), also after a restart
            ok, _ = await self._try_attach(session, *session.requested)
            if ok:
                return True
        last = session.last_kernel
        if last is not None and last != session.requested and _available(last[0]):  # the kernel that died
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
                        session.last_kernel = (att.target, att.info.source)
                        await asyncio.to_thread(att.close)
                    if session.attachment is None:  # the client may have named a kernel while the old one closed
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
            self.host.call_later(BUSY_AFTER_S, self._still_busy, session, att)
        elif event.kind == "finished":
            self.host.spawn(self._confirm_run(session, att, event))
        elif event.kind == "idle":
            if session.state == "busy":
                self._set_state(session, "idle", "the kernel is idle")
            self._stale_delay.pop(session.uri, None)  # a fresh start for the re-checks after this one
            if session.stale_cells and session.scheduler is not None:  # they were checked against old facts
                session.scheduler.request(list(session.stale_cells), 0.0)
        elif event.kind == "dead":
            self._kernel_failed(session, None)
        elif event.kind == "resync":  # the watcher's connection was renewed: what happened meanwhile is unknown
            session.kernel_changed()
            self.recheck_all(session)
            self.host.spawn(self._verify_identity(session, att))
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
        gone = _file_gone(att)
        self._set_state(session, "dead", GONE if gone else "the kernel died: static-only diagnostics until it is back")
        self.recheck_all(session)
        self.wake(session)

    def _kernel_restarted(self, session: NotebookSession) -> None:
        if session.closed or session.attachment is None:
            return
        session.kernel_changed()
        self._set_state(session, "attached", "the kernel restarted (fresh namespace): re-checking every cell")
        self.recheck_all(session)
        self.prewarm.kernel_changed(session, session.attachment)

    async def _confirm_run(self, session: NotebookSession, att: Attachment, event: WatchEvent) -> None:
        """Another client's request finished. It was a user run only if the execution count advanced past the
        count its `execute_input` carried: the Jupyter extension's own requests on the user's session (startup
        code, the variables view, the client's question through its API) run with `store_history=False` and
        leave it where it was; they must not discard results nor re-check cells. When the count cannot be read
        now (the kernel is busy again: run all), the request counts as a run (re-checking is the safe side)."""
        count = event.execution_count
        ident = None
        if count is not None and not att.busy:
            try:
                ident = await asyncio.to_thread(att.identify, min(1.0, self.host.tuning.attach_timeout_ms / 1000))
            except Exception as exc:
                log.info("could not read the execution count after a request: %s", exc)
        if session.closed or session.attachment is not att:
            return
        if ident is not None:
            restarted = ident.pid is not None and att.info.pid is not None and ident.pid != att.info.pid
            if restarted or (ident.execution_count is not None and att.last_count is not None and ident.execution_count <= att.last_count):
                await self._let_go(session, att, "the kernel restarted: reattaching")  # new pid, or the count went back
                return
            if ident.execution_count is not None and count is not None and ident.execution_count <= count:
                log.info("a request (count %s) left the execution count at %s: not a user run", count, ident.execution_count)
                return
        log.info("a user run (count %s) finished: re-checking the cells it affects", count)
        # the least count the kernel can now show without a restart (less one): read when we could, else the
        # count the request ran under (an unconfirmed request may have left the count where it was)
        floor = ident.execution_count if ident is not None and ident.execution_count is not None else count
        if floor is not None and (att.last_count is None or floor - 1 > att.last_count):
            att.last_count = floor - 1
        if event.code and event.seconds is not None:  # how long the cell takes: the sandbox's scale for it
            session.run_seconds.pop(event.code, None)
            session.run_seconds[event.code] = event.seconds
            while len(session.run_seconds) > RUN_SECONDS_KEPT:
                session.run_seconds.pop(next(iter(session.run_seconds)))
        session.kernel_changed()  # a user cell changed the state: speculative results are discarded
        self._set_state(session, "idle", "the kernel is idle")
        self.recheck_after_run(session, event.code)
        self.prewarm.kernel_changed(session, att)  # it may have imported libraries

    async def _let_go(self, session: NotebookSession, att: Attachment, message: str) -> None:
        """The attached kernel is not there any more (restarted, stopped): static until it is found again."""
        if session.attachment is not att:
            return
        session.attachment = None
        session.kernel_changed()
        session.last_kernel = (att.target, att.info.source)
        self._set_state(session, "dead", message)
        self.recheck_all(session)
        self.wake(session)
        # last: closing can take seconds (a request in flight to the dead process), and the client may name the
        # new process meanwhile; nothing after this await may speak for the session any more
        await asyncio.to_thread(att.close)

    async def _verify_identity(self, session: NotebookSession, att: Attachment) -> None:
        # A vanished connection file: its owner disposed of the kernel. The Jupyter extension restarts a kernel
        # as a new process with a new connection file (which the client names), or the kernel was stopped.
        if _file_gone(att):
            await self._let_go(session, att, GONE)
            return
        try:
            same = await asyncio.to_thread(att.check_identity, self.host.tuning.attach_timeout_ms / 1000)
        except Exception as exc:  # not answering yet (restarting, busy): ask again until it does or dies
            if _file_gone(att):  # deleted just after the process was killed
                await self._let_go(session, att, GONE)
                return
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
            await self._let_go(session, att, "the kernel restarted: reattaching")
        elif session.state == "dead":
            self._set_state(session, "attached", "the kernel is back")
            self.recheck_all(session)

    # -- stale facts ------------------------------------------------------------------------------
    def stale_published(self, session: NotebookSession) -> None:
        """Checks of `session` were published (crane.lsp.checks). Cells whose diagnostics rely on stale facts
        must be checked again once the kernel can answer. While a user request runs, its `idle` event does it:
        the watcher clears `busy` before it queues that event, so a `busy` seen here means the event is still
        to be handled. Otherwise no event is coming — the `idle` was handled while their check ran, or the
        probe timed out behind a request the watcher does not follow (another client's completion or comm
        message, CRANE's own sandbox export) —: they are checked again after a delay that doubles while they
        stay stale (STALE_RETRY_FIRST_S up to STALE_RETRY_MAX_S: a kernel held long is asked rarely)."""
        uri = session.uri
        if not session.stale_cells:
            self._stale_delay.pop(uri, None)
            return
        att = session.attachment
        if session.closed or att is None or not att.alive or att.busy or self._stale_due.get(uri) is att:
            return  # (a re-check pending for an earlier attachment or notebook does not stand for this one)
        delay = self._stale_delay.get(uri, STALE_RETRY_FIRST_S)
        self._stale_delay[uri] = min(2 * delay, STALE_RETRY_MAX_S)
        self._stale_due[uri] = att
        self.host.call_later(delay, self._recheck_stale, session, att)

    def _recheck_stale(self, session: NotebookSession, att: Attachment) -> None:
        if self._stale_due.get(session.uri) is att:
            del self._stale_due[session.uri]
        if session.closed:
            return
        if session.attachment is not att:  # re-attached meanwhile: its own publish may have found this one pending
            self.stale_published(session)
            return
        if not att.alive or att.busy:
            return  # a dead kernel re-checks every cell when found again; a running request's idle event these
        stale = list(session.stale_cells)
        if stale and session.scheduler is not None:
            log.info("%d cell(s) checked with stale facts and no idle event to come: checking again", len(stale))
            session.scheduler.request(stale, 0.0)

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
        uris = [u for u, r in session.cells.items() if r.findings or r.rule_findings]  # also those the sandbox cleared
        for c in snap.code_cells:
            read = self.analysis.names_read(c.source)
            if read is None or read & written:
                uris.append(c.uri)
        session.scheduler.request(uris, 0.0)


def _available(target: KernelTarget) -> bool:
    """Worth trying again: a server kernel always (the server says), a local one while its file exists."""
    return target.is_remote or os.path.isfile(str(target.connection_file))


def _same_kernel(a: KernelTarget, b: KernelTarget) -> bool:
    """The same kernel: the same local connection file, or the same kernel id on the same server."""
    if a.is_remote or b.is_remote:
        return a.is_remote and b.is_remote and a.kernel_id == b.kernel_id and a.server == b.server
    return same_path(str(a.connection_file), str(b.connection_file))


def _file_gone(att: Attachment) -> bool:
    """A local kernel whose connection file vanished (its owner disposed of it); never true for a remote one."""
    return not att.target.is_remote and not os.path.isfile(str(att.target.connection_file))
