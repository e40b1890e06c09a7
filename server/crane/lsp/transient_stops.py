"""Passing `unavailable` verdicts (`SandboxVerdict.transient`: the transplant export stopped because a request
was waiting for the kernel, or by its kernel-time cap) are not kept for the cell's text and kernel state at once.

The request that stopped the export may leave the kernel's state as it was (a completion, CRANE's own probe
from another connection): kept, the `unavailable` would stick to the cell until the state changes. Instead the
language server tries the cell again (`crane.lsp.speculation`), up to `MAX_RETRIES` times for the same text and
state; after that the verdict is kept with its reason, like any other. The CLI and MCP are not concerned: they
run once and report the reason. Used from the event loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crane.sandbox.verdict import SandboxVerdict

MAX_RETRIES = 3  # tries after the first stop, for one cell text and kernel state
RETRY_DELAY_S = 0.5  # times the number of stops so far: the next try waits that long


class TransientStops:
    """How many times in a row each cell's run stopped for a passing cause, for its current text and state."""

    def __init__(self, limit: int = MAX_RETRIES):
        self.limit = limit
        self._stops: dict[tuple[str, str], tuple[str, int, int]] = {}  # (notebook, cell) -> (text, gen, stops)

    def settle(self, key: tuple[str, str], source: str, gen: int, v: SandboxVerdict) -> int:
        """0: keep `v` for (source, gen) (not a passing stop, or the retries are spent: its reason then says
        how many); else the number of stops so far (try again)."""
        if not v.transient:
            self._stops.pop(key, None)
            return 0
        text, g, stops = self._stops.get(key, (source, gen, 0))
        stops = stops + 1 if (text, g) == (source, gen) else 1
        if stops > self.limit:
            self._stops.pop(key, None)
            v.reason = f"{v.reason or 'stopped'} ({stops} tries, each stopped)"
            return 0
        self._stops[key] = (source, gen, stops)
        return stops

    def forget(self, key: tuple[str, str]) -> None:
        self._stops.pop(key, None)

    def __len__(self) -> int:
        return len(self._stops)
