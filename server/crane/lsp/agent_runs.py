"""The repair agent's runs in the daemon: one handle per `crane.fixCell` run, keyed by run id.

`crane.stopAgent` and `shutdown` halt them; step mode's gate waits for `crane.continueAgent`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass
class AgentRunHandle:
    run_id: str
    cell_uri: str
    stop: threading.Event
    gate: Any = None  # crane.agent.loop.GoAhead in step mode

    def halt(self) -> None:
        self.stop.set()
        if self.gate is not None:
            self.gate.stop()


def stop_all(runs: dict[str, AgentRunHandle]) -> None:
    for h in list(runs.values()):
        h.halt()
