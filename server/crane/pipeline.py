"""Checking one cell: analyse → facts → rules. The one pipeline of the CLI, the benchmark and the daemon.

    check_cell(analysis, facts, scope, target, environment) -> CellCheck

- `analysis`: the cell's static `CellAnalysis` (callers may cache it by source text);
- `facts`: where runtime facts come from, a `FactsSource` (a `ProbeRequest` in, a `FactsAnswer` out): the CLI
  asks its replayed kernel (`probe_facts`), the daemon its attached kernel (live, or the last facts, "stale",
  while a user cell runs); None means no kernel;
- without kernel facts, an optional `StaticEnvironment` tells what can still be known: modules missing from
  this process's environment and files missing relative to the notebook's folder; the rules run once, and the
  two that can use it (`environment=True`) judge from it with lower confidence.

What then decides the cell's diagnostics (the sandbox's verdict, a model's answer) is `crane.policy.decide`.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

import msgspec

from crane.analysis.cell import CellAnalysis, plan_probe
from crane.analysis.scope import NotebookScope
from crane.finding import Finding
from crane.predict import predict
from crane.probe.facts import ProbeRequest, ProbeResult

if TYPE_CHECKING:
    from crane.probe.collect import ProbeClient

FactsMode = Literal["live", "stale", "static"]
MODULE_TTL_S = 30.0
# The CLI's and the bench's probe time budget: nobody waits on a keystroke there, so a loaded machine must not
# cut facts short (the editor keeps the probe's 50 ms default; scan budgets bound the work either way).
BATCH_PROBE_BUDGET_MS = 5000.0


class FactsAnswer(NamedTuple):
    probe: ProbeResult | None
    mode: FactsMode  # live: read now; stale: the last facts (the kernel is busy); static: none
    error: str | None = None  # why there are no live facts, when that is a failure


FactsSource = Callable[[ProbeRequest], FactsAnswer]


@dataclass
class CellCheck:
    """What the rules say about one cell, and the facts they used."""

    findings: list[Finding]
    probe: ProbeResult | None
    mode: FactsMode
    error: str | None = None
    elapsed_ms: float = 0.0


def check_cell(
    analysis: CellAnalysis,
    facts: FactsSource | None,
    scope: NotebookScope | None,
    target: int,
    environment: StaticEnvironment | None = None,
) -> CellCheck:
    """Analyse → facts → rules for one cell (the predicted first crash first)."""
    t0 = time.perf_counter()
    request = plan_probe(analysis)
    answer = facts(request) if facts is not None else FactsAnswer(None, "static")
    local = None
    if answer.mode == "static" and environment is not None and analysis.tree is not None:
        local = environment.facts(request)
    findings = predict(analysis, answer.probe, scope, target_cell=target, environment=local)
    return CellCheck(findings, answer.probe, answer.mode, answer.error, (time.perf_counter() - t0) * 1000)


def probe_facts(client: ProbeClient, timeout: float = 10.0) -> FactsSource:
    """Facts from a kernel CRANE owns (the CLI's replay): live, or none with the probe's error; complete whatever
    the machine's load (BATCH_PROBE_BUDGET_MS), so a batch result does not depend on it."""

    def source(request: ProbeRequest) -> FactsAnswer:
        if request.time_budget_ms is None:
            request = msgspec.structs.replace(request, time_budget_ms=BATCH_PROBE_BUDGET_MS)
        try:
            return FactsAnswer(client.run(request, timeout=timeout), "live")
        except Exception as exc:  # a failed probe degrades to static rules, and says so
            return FactsAnswer(None, "static", f"probe failed: {exc}")

    return source


class ModuleLookup:
    """Whether a module can be imported in this process's environment (`find_spec`), cached for a while.
    Thread-safe."""

    def __init__(self, ttl_s: float = MODULE_TTL_S):
        self.ttl_s = ttl_s
        self._found: dict[str, tuple[bool | None, float]] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> bool | None:
        now = time.monotonic()
        with self._lock:
            hit = self._found.get(name)
        if hit is not None and now - hit[1] < self.ttl_s:
            return hit[0]
        try:
            found: bool | None = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = None
        with self._lock:
            self._found[name] = (found, now)
        return found


@dataclass(frozen=True)
class StaticEnvironment:
    """No kernel: modules are looked up in this process's environment, files relative to `folder` (the
    kernel's usual working directory is the notebook's folder)."""

    folder: str | None
    modules: ModuleLookup

    def facts(self, request: ProbeRequest) -> ProbeResult | None:
        """What this environment tells about the modules and paths `request` asks for (None: nothing asked)."""
        if not request.modules and not (request.paths and self.folder):
            return None
        folder = self.folder
        return ProbeResult(
            modules={m: found for m in request.modules if (found := self.modules(m)) is not None},
            paths={p: os.path.exists(os.path.join(folder, p)) for p in request.paths} if folder else {},
            cwd=folder,
        )
