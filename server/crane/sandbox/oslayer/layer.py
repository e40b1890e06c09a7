"""The OS layer's types (daemon side): `OsLayer`, what a platform's layer confines and whether it ran; `Launch`, how
one worker is started; and where Jupyter keeps kernels' connection files (`jupyter_runtime_dirs`). Shared by the
per-platform modules of crane.sandbox.oslayer, which this module does not know.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class OsLayer:
    """What the OS confines under a portable worker: `name` (as verdicts list it), what it `confines`, whether it
    `ran`, and why not."""

    name: str
    platform: str
    confines: tuple[str, ...]
    ran: bool
    why_not: str | None = None

    def names(self) -> list[str]:
        """The layer names a verdict may claim: this one only when it ran."""
        return [self.name] if self.ran else []

    def failed(self, why: str) -> OsLayer:
        return replace(self, ran=False, why_not=why)


@dataclass
class Launch:
    """How one worker is started: its command line, what its environment gains, and its OS layer (`handles`: what
    the daemon must keep open for the worker's life, e.g. a Windows job object)."""

    argv: list[str]
    env: dict[str, str]
    layer: OsLayer
    handles: list[Any] = field(default_factory=list)


def jupyter_runtime_dirs(env: dict[str, str], own_env: dict[str, str] | None = None,
                         defaults: Callable[[dict[str, str]], list[str]] = lambda e: []) -> list[str]:
    """Where kernels' connection files (their keys) can live: `$JUPYTER_RUNTIME_DIR`, `$JUPYTER_DATA_DIR/runtime`
    and the platform's `defaults`, of the kernel's environment `env` and of the daemon's own; resolved (symbolic
    links followed as far as the path exists), absolute ones only, each once."""
    out: list[str] = []
    for e in (env, own_env if own_env is not None else dict(os.environ)):
        data = e.get("JUPYTER_DATA_DIR")
        for p in (e.get("JUPYTER_RUNTIME_DIR"), os.path.join(data, "runtime") if data else None, *defaults(e)):
            if p and os.path.isabs(p) and os.path.realpath(p) not in out:
                out.append(os.path.realpath(p))
    return out
