"""A worker thread for sandbox jobs on attached kernels, with a kernel connection of its own per attachment.

jupyter_client's blocking client drives a per-thread event loop, so a connection is used from the thread that
made it only. The connection's session is ignored by every kernel watcher of this daemon (its requests are
not the user's). Connections of attachments that were let go of are closed on the thread. Jobs run one at a
time, in submission order. The speculation service has one (speculative runs), the quick-fix service
another (searches), so a search never delays a cell's verdict.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from crane.lsp.kernel_attach import Attachment

T = TypeVar("T")


class SandboxThread:
    def __init__(self, name: str, attach_timeout_s: Callable[[], float]):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._conns: dict[int, tuple[Attachment, Any]] = {}  # id(attachment) -> (attachment, connection)
        self._attach_timeout_s = attach_timeout_s

    def connection(self, att: Attachment) -> Any:
        """This thread's connection to `att`'s kernel (call on the thread)."""
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

        conn = connect(att.target, self._attach_timeout_s())
        att.watch.ignore_sessions.add(session_id(conn))
        self._conns[id(att)] = (att, conn)
        return conn

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: fn(*args))

    async def with_connection(self, att: Attachment, fn: Callable[[Any], T]) -> T:
        """`fn(connection)` on the thread, with its connection to `att`'s kernel."""
        return await self.run(lambda: fn(self.connection(att)))

    def close(self) -> None:
        def close_all() -> None:
            for _att, conn in self._conns.values():
                try:
                    conn.close()
                except Exception:
                    pass
            self._conns.clear()

        self._executor.submit(close_all)
        self._executor.shutdown(wait=False)
