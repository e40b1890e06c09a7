"""Analyse → probe → predict for notebook cells, off the event loop (blocking; run in worker threads).

The same three steps as `crane.engine.predict_cell`, against the attached kernel of a `NotebookSession`
(facts through `session.facts_for`, which never waits behind a running user cell) or, without one,
static-only. Cell analyses are cached by source text, so a keystroke re-analyses one cell. The engine's
modules (and the IPython transformer they use) are imported on first use, never at server start.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import msgspec

from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot
from crane.lsp.session import FactsMode, NotebookSession

log = logging.getLogger(__name__)

ANALYSIS_CACHE_SIZE = 2048
MODULE_TTL_S = 30.0


@dataclass
class CellOutcome:
    cell: CellSnapshot
    findings: list[Any]  # crane.rules.finding.Finding
    mode: FactsMode
    probe: Any = None  # the ProbeResult used, if any
    error: str | None = None
    elapsed_ms: float = 0.0


@dataclass
class AnalysisService:
    _cache: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    _defs: OrderedDict[tuple, Any] = field(default_factory=OrderedDict)
    _modules: dict[str, tuple[bool | None, float]] = field(default_factory=dict)
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
    ) -> list[CellOutcome]:
        from crane.analysis.cell import plan_probe
        from crane.predict import predict

        live = not static and session is not None and session.attachment is not None
        scope = self.scope(snap)
        out = []
        for cell in cells:
            t0 = time.perf_counter()
            probe, mode, error = None, "static", None
            try:
                analysis = self.analyze(cell.source)
                if live and session is not None:
                    probe, mode, error = session.facts_for(plan_probe(analysis), probe_timeout)
                findings = predict(analysis, probe, scope, target_cell=cell.number)
                if mode == "static" and analysis.tree is not None:
                    findings = self._with_static_environment(analysis, scope, cell, snap, findings)
            except Exception as exc:  # one bad cell never stops the others (nor the daemon)
                log.exception("checking cell %d failed", cell.number)
                findings, error = [], f"{type(exc).__name__}: {exc}"
            out.append(CellOutcome(cell, list(findings), mode, probe, error, (time.perf_counter() - t0) * 1000))
        return out

    def _with_static_environment(self, analysis: Any, scope: Any, cell: CellSnapshot, snap: NotebookSnapshot, findings):
        """No kernel: add missing modules (looked up in the server's own environment) and missing files
        (relative to the notebook's folder, the kernel's usual working directory) to the static findings."""
        from crane.analysis.cell import plan_probe
        from crane.predict import merge, predict
        from crane.probe.facts import ProbeResult

        request = plan_probe(analysis)
        if not request.modules and not (request.paths and snap.path):
            return findings
        folder = os.path.dirname(snap.path) if snap.path else None
        env = ProbeResult(
            modules={m: found for m in request.modules if (found := self._module_found(m)) is not None},
            paths={p: os.path.exists(os.path.join(folder, p)) for p in request.paths} if folder else {},
            cwd=folder,
        )
        extra = []
        for f in predict(analysis, env, scope, target_cell=cell.number):
            if f.rule == "missing-module":
                name = f.message.split("'")[1] if "'" in f.message else "?"
                extra.append(
                    msgspec.structs.replace(
                        f,
                        message=f"No module named '{name}' (looked up in CRANE's environment: no kernel attached)",
                        confidence=min(f.confidence, 0.7),
                        evidence=[f"importlib.util.find_spec({name!r}) is None in the language server's environment"],
                    )
                )
            elif f.rule == "missing-file":
                extra.append(
                    msgspec.structs.replace(
                        f,
                        confidence=min(f.confidence, 0.8),
                        evidence=[e.replace("(probe)", "(relative to the notebook's folder; no kernel attached)") for e in f.evidence],
                    )
                )
        return merge(list(findings) + extra, analysis) if extra else findings

    def _module_found(self, name: str) -> bool | None:
        now = time.monotonic()
        with self._lock:
            hit = self._modules.get(name)
        if hit is not None and now - hit[1] < MODULE_TTL_S:
            return hit[0]
        try:
            found: bool | None = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = None
        with self._lock:
            self._modules[name] = (found, now)
        return found

    def names_written(self, source: str) -> set[str] | None:
        """Names a cell binds or deletes when it runs; None when it may bind anything (star import, exec...)."""
        a = self.analyze(source)
        if a.tree is None or a.dynamic:
            return None
        return set(a.stored_names) | set(a.deleted_names)

    def names_read(self, source: str) -> set[str] | None:
        """Names a cell loads from the namespace; None when it cannot be told (syntax error)."""
        a = self.analyze(source)
        if a.tree is None:
            return None
        return set(a.free_names)
