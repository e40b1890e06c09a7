"""Work-done progress for slow commands (server-initiated, cancellable), when the client supports it.

    async with WorkProgress(ls, "CRANE: checking notebook") as progress:
        progress.report("cell 3 of 50", 6)
        if progress.cancelled: ...

Without the client capability every call is a no-op, so commands do not branch on it.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)


class WorkProgress:
    def __init__(self, ls: LanguageServer, title: str, cancellable: bool = True):
        self.ls = ls
        self.title = title
        self.cancellable = cancellable
        self.token: str | None = None

    def _supported(self) -> bool:
        caps = self.ls.client_capabilities
        return bool(caps and caps.window and caps.window.work_done_progress)

    async def __aenter__(self) -> WorkProgress:
        if self._supported():
            token = f"crane-{uuid.uuid4().hex[:12]}"
            try:
                await self.ls.work_done_progress.create_async(token)
                self.token = token
                self.ls.work_done_progress.begin(
                    token, types.WorkDoneProgressBegin(title=self.title, cancellable=self.cancellable, percentage=0)
                )
            except Exception as exc:  # the client refused the token: go on without progress
                log.info("work done progress unavailable: %s", exc)
                self.token = None
        return self

    def report(self, message: str, percentage: int | None = None) -> None:
        if self.token is not None:
            self.ls.work_done_progress.report(
                self.token, types.WorkDoneProgressReport(message=message, percentage=percentage, cancellable=self.cancellable)
            )

    @property
    def cancelled(self) -> bool:
        if self.token is None:
            return False
        fut = self.ls.work_done_progress.tokens.get(self.token)
        return bool(fut is not None and fut.cancelled())

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if self.token is not None:
            message = "cancelled" if self.cancelled else ("failed" if exc_type else "done")
            self.ls.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=message))
