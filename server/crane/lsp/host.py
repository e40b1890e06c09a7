"""`Host`: what the daemon's services need from the language server, and nothing of the services themselves.

The services (`diagnostics`, `speculation`, `llm_bridge`, `kernels`) are built by `crane_server.CraneServer`
and take a `Host` plus their collaborators explicitly, so the import graph runs one way:

    server.py (registration) ─► handlers (sync, hover, code_actions, commands, ...) ─► crane_server.py
        ─► services ─► host.py, notebook_session.py, settings.py, messages.py (leaves)

`CraneServer` is the one implementation; tests may pass anything with these members.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from lsprotocol import types
    from pygls.workspace import Workspace

    from crane.lsp.notebook_session import NotebookSession
    from crane.lsp.settings import Settings, Tuning

T = TypeVar("T")


class Host(Protocol):
    settings: Settings
    tuning: Tuning
    sessions: dict[str, NotebookSession]  # unquoted notebook URI -> session

    @property
    def workspace(self) -> Workspace: ...

    def key(self, uri: str) -> str:
        """The sessions' key of a URI (unquoted)."""
        ...

    def notify(self, method: str, params: Any) -> None:
        """Send a notification to the client (from the event loop)."""
        ...

    def text_document_publish_diagnostics(self, params: types.PublishDiagnosticsParams) -> None: ...

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking work (kernel I/O, analysis) in a worker thread."""
        ...

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None: ...

    def spawn(self, aw: Awaitable[Any]) -> asyncio.Task[Any]: ...
