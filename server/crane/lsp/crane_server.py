"""`CraneServer`: the `LanguageServer` subclass holding the daemon's state and services (the `Host` they use).

Handlers are registered flat in `server.py`. Never print: stdout is the LSP channel. Logs go to stderr
(configured by `crane serve`) and, from the `crane` loggers at the configured level, to `window/logMessage`.
Everything that blocks (kernel requests, analysis) runs in worker threads; everything that writes to the
client runs on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from crane import __version__
from crane.lsp.agent_runs import AgentRunHandle
from crane.lsp.analysis_service import AnalysisService
from crane.lsp.kernels import KernelSupervisor
from crane.lsp.llm_bridge import LLMService
from crane.lsp.notebook_map import uri_key
from crane.lsp.notebook_session import NotebookSession
from crane.lsp.quick_fixes import QuickFixService
from crane.lsp.settings import Settings, Tuning, parse_settings
from crane.lsp.speculation import SpeculationService
from crane.sandbox.options import configure as configure_sandbox

log = logging.getLogger("crane.lsp")

T = TypeVar("T")

# Jupyter notebooks only: the interactive window's cells have all run (CRANE predicts cells not run yet) and
# its input box is not a notebook cell, so it is not synced.
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithNotebook(
            # markdown too: the cell numbers users see are positions in the full notebook
            notebook="jupyter-notebook",
            cells=[types.NotebookCellLanguage(language="python"), types.NotebookCellLanguage(language="markdown")],
        )
    ],
    save=True,
)

_LEVELS = {"error": logging.ERROR, "warn": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG}


class CraneProtocol(LanguageServerProtocol):
    """pygls drops a request whose params do not deserialise (the client would wait forever): answer it
    with an "invalid params" error instead."""

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException:
            if isinstance(data, dict) and "id" in data and "method" in data and "jsonrpc" in data:
                error = JsonRpcInvalidParams(f"invalid params for {data.get('method')!s}")
                try:
                    self._send_response(data["id"], error=error.to_response_error())
                except Exception:
                    log.exception("could not answer a malformed request")
            raise


class CraneServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "crane",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=NOTEBOOK_SYNC,
            protocol_cls=CraneProtocol,
            max_workers=4,
        )
        self.settings = Settings()
        self.tuning = Tuning.from_env()
        self.sessions: dict[str, NotebookSession] = {}  # unquoted notebook URI -> session
        self.agent_runs: dict[str, AgentRunHandle] = {}  # run id -> the repair agent's run
        self.analysis = AnalysisService()
        self.llm = LLMService(self)
        self.speculation = SpeculationService(self, self.llm)
        self.quick_fixes = QuickFixService(self, self.speculation)
        self.speculation.after_verdict = self.quick_fixes.consider
        self.kernels = KernelSupervisor(self, self.analysis)
        self.speculation.on_mode = self.kernels.notify_status  # the status says which sandbox mode is in force
        self._executor = ThreadPoolExecutor(max_workers=3, thread_name_prefix="crane-work")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self.shutdown_requested = False  # the client sent `shutdown`: the process's exit code is 0, else 1 (LSP)

    # -- loop and threads ---------------------------------------------------------------------------
    def bind_loop(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        self.bind_loop()
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_later(delay, fn, *args)

    def spawn(self, aw) -> asyncio.Task:
        task = asyncio.ensure_future(aw)
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task failed", exc_info=t.exception())

        task.add_done_callback(done)
        return task

    # -- lookups --------------------------------------------------------------------------------------
    @staticmethod
    def key(uri: str) -> str:
        return uri_key(uri)

    def session_of_notebook(self, notebook_uri: str) -> NotebookSession | None:
        return self.sessions.get(self.key(notebook_uri))

    def session_of_cell(self, cell_uri: str) -> NotebookSession | None:
        nb = self.workspace.get_notebook_document(cell_uri=cell_uri)
        return self.sessions.get(self.key(nb.uri)) if nb is not None else None

    def notify(self, method: str, params: Any) -> None:
        self.protocol.notify(method, params)

    # -- settings, messages -----------------------------------------------------------------------------
    def apply_settings(self, raw: Any, initial: bool = False) -> None:
        settings, problems = parse_settings(raw)
        self.settings = settings
        configure_sandbox(settings.sandbox_options())  # runs started from now on use them
        logging.getLogger("crane").setLevel(_LEVELS[settings.log_level])
        for problem in problems:
            log.warning("settings: %s", problem)
        if problems:  # one message for the whole change
            self.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Warning, message="CRANE settings: " + "; ".join(problems))
            )

    def report_server_error(self, error: Exception, source: Any) -> None:
        """A bad message or a failing notification handler: log it, never die, never pop up per keystroke.
        (A failing request already got its error reply.)"""
        from pygls.exceptions import FeatureRequestError

        level = logging.DEBUG if source is FeatureRequestError else logging.ERROR
        log.log(level, "error handling a message: %s: %s", type(error).__name__, error)


class LspLogHandler(logging.Handler):
    """Forwards `crane` log records to the client as `window/logMessage` (sent from the event loop).

    A record logged while one is being sent is about that send (pygls reports a failed send through
    `report_server_error`, which logs): it stays on stderr, never forwarded. Once the channel is closed (after
    `exit`, while a thread the server waits for still logs), forwarding it would fail and log again, without
    end: a traceback on stderr per turn of the event loop, until a client no longer reading stderr blocked it."""

    _TYPES = {
        logging.ERROR: types.MessageType.Error,
        logging.WARNING: types.MessageType.Warning,
        logging.INFO: types.MessageType.Info,
        logging.DEBUG: types.MessageType.Log,
    }

    def __init__(self, ls: CraneServer):
        super().__init__()
        self.ls = ls
        self._sending = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._sending, "active", False):
            return
        try:
            msg = self.format(record)
            kind = self._TYPES.get(record.levelno, types.MessageType.Error if record.levelno > logging.ERROR else types.MessageType.Log)
            self.ls.call_soon_threadsafe(self._send, kind, msg)
        except Exception:
            self.handleError(record)

    def _send(self, kind: types.MessageType, msg: str) -> None:
        self._sending.active = True
        try:
            self.ls.window_log_message(types.LogMessageParams(type=kind, message=msg))
        except Exception:
            pass
        finally:
            self._sending.active = False
