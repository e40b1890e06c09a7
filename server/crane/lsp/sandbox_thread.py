"""A worker thread for sandbox jobs on attached kernels, with a kernel connection of its own per attachment
(`background_run.ThreadConnections`: jupyter_client's blocking client drives a per-thread event loop, so a
connection is used from the thread that made it only; its session is ignored by every kernel watcher of this
daemon). Jobs run one at a time, in submission order. The quick-fix service has one, so a search never delays
a speculative run (which has a thread of its own).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from crane.lsp.background_run import ThreadConnections

if TYPE_CHECKING:
    from crane.lsp.host import Host
    from crane.lsp.kernel_attach import Attachment

T = TypeVar("T")


class SandboxThread:
    def __init__(self, name: str, host: Host):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._conns = ThreadConnections(host)  # used on the thread only

    async def with_connection(self, att: Attachment, fn: Callable[[Any], T]) -> T:
        """`fn(connection)` on the thread, with its connection to `att`'s kernel."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: fn(self._conns.get(att)))

    def close(self) -> None:
        self._executor.submit(self._conns.close_all)
        self._executor.shutdown(wait=False)
