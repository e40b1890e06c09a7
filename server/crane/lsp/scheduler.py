"""`CellScheduler`: debounced, batched refresh of one notebook's cells.

A cell asked for again before its delay runs out is pushed back (debounce per cell); due cells are handed
together to `run_batch` (the daemon's `checks.refresh_cells`, which checks them in one worker-thread batch).
A failing batch is logged; the scheduler goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

log = logging.getLogger(__name__)


class CellScheduler:
    """Debounced, batched refresh of cells (keyed by cell URI) for one notebook."""

    def __init__(self, run_batch: Callable[[list[str]], Awaitable[None]]):
        self._run_batch = run_batch
        self._due: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def request(self, uris: Iterable[str], delay: float) -> None:
        now = asyncio.get_running_loop().time()
        for uri in uris:
            self._due[uri] = now + delay
        self._wake.set()

    def forget(self, uris: Iterable[str]) -> None:
        for uri in uris:
            self._due.pop(uri, None)

    def close(self) -> None:
        self._task.cancel()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            if not self._due:
                await self._wake.wait()
                continue
            now = loop.time()
            ready = [u for u, t in self._due.items() if t <= now]
            if not ready:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=min(self._due.values()) - now)
                except asyncio.TimeoutError:
                    pass
                continue
            for u in ready:
                del self._due[u]
            try:
                await self._run_batch(ready)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("refreshing %d cell(s) failed", len(ready))
