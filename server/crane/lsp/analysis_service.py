"""The daemon's use of the check pipeline (`crane.pipeline.check_cell`), off the event loop (blocking).

Facts come from the attached kernel of a `NotebookSession` (through `session.facts_for`, which never waits
behind a running user cell) or, without one, the pipeline's static environment (modules looked up in the
server's environment, files relative to the notebook's folder). Cell analyses are cached by source text, so
a keystroke re-analyses one cell; per-cell scope definitions likewise. The engine's modules (and the IPython
transformer they use) are imported on first use, never at server start.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot
from crane.lsp.notebook_session import CellOutcome, NotebookSession

log = logging.getLogger(__name__)

ANALYSIS_CACHE_SIZE = 2048


@dataclass
class AnalysisService:
    _cache: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    _defs: OrderedDict[tuple, Any] = field(default_factory=OrderedDict)
    _modules: Any = None  # crane.pipeline.ModuleLookup, created on first use (shared by every notebook)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- engine entry points (imported lazily) ----------------------------------------------------
    def analyze(self, source: str) -> Any:
        with self._lock:
            hit = self._cache.get(source)
            if hit is not None:
                self._cache.move_to_end(source)
                return hit
        from crane.analysis.cell import analyze_cell

        analysis = analyze_cell(source)
        with self._lock:
            self._cache[source] = analysis
            while len(self._cache) > ANALYSIS_CACHE_SIZE:
                self._cache.popitem(last=False)
        return analysis

    def warm_up(self) -> None:
        """Import the engine (and IPython's transformer) ahead of the first keystroke."""
        t0 = time.perf_counter()
        try:
            self.analyze("import os\nx = 1\nprint(x)\n")
            import crane.predict  # noqa: F401
            from crane.analysis.scope import NotebookScope  # noqa: F401
        except Exception:
            log.exception("warming up the analysis engine failed")
        log.info("analysis engine ready in %.0f ms", (time.perf_counter() - t0) * 1000)

    def scope(self, snap: NotebookSnapshot) -> Any:
        """What the notebook's code cells bind (with the client's execution orders): for static-only checks
        (notebook order) and for `defined_in` / explanations (execution order). Per-cell definitions are
        cached, so an edit re-derives one cell."""
        from crane.analysis import scope as scope_mod

        defs = []
        for c in snap.code_cells:
            key = (c.number, c.execution_order, c.source)
            with self._lock:
                d = self._defs.get(key)
            if d is None:
                d = scope_mod.cell_defs(c.number, c.execution_order, c.source)
                with self._lock:
                    self._defs[key] = d
                    while len(self._defs) > ANALYSIS_CACHE_SIZE:
                        self._defs.popitem(last=False)
            defs.append(d)
        return scope_mod.NotebookScope.from_defs(defs)

    # -- checks -----------------------------------------------------------------------------------
    def check_cells(
        self,
        snap: NotebookSnapshot,
        cells: list[CellSnapshot],
        session: NotebookSession | None,
        probe_timeout: float,
        static: bool = False,
        complete: bool = False,
    ) -> list[CellOutcome]:
        """Check `cells` (facts from `session`'s kernel unless `static`; `complete`: facts whose exact passes the
        probe finished, asking as often as it takes, for commands that answer once)."""
        from crane.pipeline import FactsAnswer, ModuleLookup, StaticEnvironment, check_cell

        live = not static and session is not None and session.attachment is not None
        facts = None
        if live and session is not None:
            live_session = session

            def facts(request: Any) -> FactsAnswer:
                return FactsAnswer(*live_session.facts_for(request, probe_timeout, complete))

        with self._lock:
            if self._modules is None:
                self._modules = ModuleLookup()
        environment = StaticEnvironment(os.path.dirname(snap.path) if snap.path else None, self._modules)
        scope = self.scope(snap)
        out = []
        for cell in cells:
            t0 = time.perf_counter()
            try:
                check = check_cell(self.analyze(cell.source), facts, scope, cell.number, environment)
                out.append(CellOutcome(cell, list(check.findings), check.mode, check.probe, check.error, check.elapsed_ms))
            except Exception as exc:  # one bad cell never stops the others (nor the daemon)
                log.exception("checking cell %d failed", cell.number)
                out.append(CellOutcome(cell, [], "static", None, f"{type(exc).__name__}: {exc}", (time.perf_counter() - t0) * 1000))
        return out

    def names_written(self, source: str) -> set[str] | None:
        """Names a cell binds, deletes or may change in place when it runs (`df["c"] = 0`, `df.drop(...,
        inplace=True)`, `rng.shuffle(arr)`); None when it may bind anything (star import, exec...)."""
        from crane.analysis.extract import possibly_mutated

        a = self.analyze(source)
        if a.tree is None or a.dynamic:
            return None
        return set(a.stored_names) | set(a.deleted_names) | possibly_mutated(a.tree)

    def names_read(self, source: str) -> set[str] | None:
        """Names a cell loads from the namespace; None when it cannot be told (syntax error)."""
        a = self.analyze(source)
        if a.tree is None:
            return None
        return set(a.free_names)
