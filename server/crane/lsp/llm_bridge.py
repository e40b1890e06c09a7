"""The LLM layer in the daemon: richer `crane.diagnoseCell` answers, and llm-mode diagnostics.

- `diagnose_with_llm` (called by `crane.diagnoseCell` after the rules' diagnosis): with `crane.llm.model` set it
  calls `crane.llm.predictor.diagnose` in a worker thread (history: the synced notebook's executed cells in
  execution order; the live probe's facts; the rules' findings; for a cell whose last run failed, a note
  saying so — the traceback itself is not synced). The usage and the session's totals go into the result.
  An `LLMError` gives the rules' diagnosis with a note saying why the model did not answer.
- `LLMService` (mode "llm", a model configured): a never-executed cell that the rules and the sandbox leave
  undecided (no rule finding; the sandbox inconclusive or not available) is asked about once its text has
  been stable for `CRANE_LSP_LLM_DELAY_MS` (2 s); answers are kept by the session per (cell text, kernel
  state) and per prompt on disk by the LLM layer; a crash answer is a diagnostic with code "llm" (Warning when
  the model's confidence is ≥ 0.7, Information below).

litellm is imported by the LLM layer on the first request, never at server start.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from crane.lsp.diagnostics import republish
from crane.lsp.explain import DiagnosisContext
from crane.lsp.messages import DiagnosisResult, SessionTotals, Usage
from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot, snapshot
from crane.policy import ModelAnswer, model_wanted

if TYPE_CHECKING:
    from crane.lsp.host import Host
    from crane.lsp.notebook_session import NotebookSession

log = logging.getLogger(__name__)

FAILED_NOTE = "The cell raised an exception when it last ran (the traceback is not available to CRANE)."


# -- notebook model from the synced snapshot ----------------------------------------------------------------------
def notebook_cells(snap: NotebookSnapshot) -> list[Any]:
    """Every cell of the synced notebook as crane.notebook.model.Cell (1-based numbers, execution counts)."""
    from crane.notebook.model import Cell

    return [
        Cell(
            number=c.number,
            cell_type="code" if c.is_code else "markdown",
            source=c.source,
            execution_count=c.execution_order if c.is_code else None,
        )
        for c in snap.cells
    ]


def executed_history(cells: list[Any], target: int) -> list[Any]:
    """The executed code cells other than the target, in execution order."""
    ran = [c for c in cells if c.is_code and c.execution_count is not None and c.number != target]
    return sorted(ran, key=lambda c: c.execution_count)


def _usage(u: Any) -> Usage | None:
    if u is None:
        return None
    return Usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens,
                 cached_tokens=u.cached_tokens, cost_usd=u.cost_usd, model=u.model)


def _session_totals(t: Any) -> SessionTotals:
    return SessionTotals(requests=t.requests, cache_hits=t.cache_hits, prompt_tokens=t.prompt_tokens,
                         completion_tokens=t.completion_tokens, cached_tokens=t.cached_tokens,
                         cost_usd=t.cost_usd, unpriced_requests=t.unpriced_requests)


def _session_line(t: SessionTotals) -> str:
    text = (f"session: {t.requests} request(s), {t.prompt_tokens:,} prompt + {t.completion_tokens:,} completion "
            f"tokens, ${t.cost_usd:.5f}")
    if t.unpriced_requests:
        text += f" (+{t.unpriced_requests} unpriced)"
    if t.cache_hits:
        text += f", {t.cache_hits} cache hit(s)"
    return text


# -- crane.diagnoseCell with a model --------------------------------------------------------------------------------
def _diagnose_blocking(ctx: DiagnosisContext, settings: Any) -> Any:
    from crane.llm.predictor import diagnose

    cells = notebook_cells(ctx.snapshot)
    target = cells[ctx.cell.number - 1]
    traceback = FAILED_NOTE if ctx.cell.success is False else None
    return diagnose(executed_history(cells, target.number), target, ctx.probe, ctx.findings, settings, traceback)


async def diagnose_with_llm(ctx: DiagnosisContext) -> DiagnosisResult | None:
    """The model's diagnosis of a cell: None without a model (the rules' diagnosis stands)."""
    from crane.llm.settings import SettingsError, resolve_settings

    try:
        settings = resolve_settings(lsp=ctx.llm_settings)
    except SettingsError as exc:
        return _with_note(ctx.rules_result, f"the LLM settings are invalid ({exc})")
    if not settings.enabled:
        return None
    from crane.llm.client import LLMError

    try:
        d = await asyncio.to_thread(_diagnose_blocking, ctx, settings)
    except LLMError as exc:
        log.warning("LLM diagnosis of cell %d failed: %s", ctx.cell.number, exc)
        return _with_note(ctx.rules_result, f"{settings.model} did not answer: {exc}")
    totals = _session_totals(d.session) if d.session is not None else None
    markdown = d.markdown
    if totals is not None:
        markdown += f"\n\n<sub>{_session_line(totals)}</sub>"
    return DiagnosisResult(
        notebook_uri=ctx.rules_result.notebook_uri,
        cell_uri=ctx.rules_result.cell_uri,
        cell=ctx.cell.number,
        verdict=d.verdict,
        markdown=markdown,
        findings=ctx.findings,
        mode=ctx.mode,
        source="llm",
        usage=_usage(d.usage),
        session=totals,
        cached=d.cached,
    )


def _with_note(result: DiagnosisResult, why: str) -> DiagnosisResult:
    import msgspec

    note = f"> **No LLM diagnosis**: {why}. This is the rules' diagnosis."
    return msgspec.structs.replace(result, markdown=f"{note}\n\n{result.markdown}", note=why)


# -- llm mode diagnostics -------------------------------------------------------------------------------------------
class LLMService:
    def __init__(self, host: Host):
        self.host = host
        self._pending: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._lock = asyncio.Lock()
        self.requests = 0  # questions sent to the LLM layer (cache hits included), for tests and logs

    def _settings(self) -> Any:
        try:
            s = self.host.settings.llm_settings()
        except Exception as exc:
            log.debug("LLM settings unusable: %s", exc)
            return None
        return s if s.enabled else None

    def undecided(self, session: NotebookSession, cell: CellSnapshot) -> bool:
        """A never-executed cell neither the rules nor the sandbox decided (`crane.policy.model_wanted`)."""
        if not cell.is_code or not cell.source.strip() or cell.execution_order is not None:
            return False
        rules = session.known(cell.uri).rule_findings or []
        if rules:
            return False
        settings = self.host.settings
        att = session.attachment
        if settings.speculative_on and att is not None and att.alive and not session.closed:
            v = session.sandbox_verdicts.get(cell.source, session.kernel_gen)
            return v is not None and model_wanted("auto", rules, v)
        return True  # no sandbox here: the rules alone left it open

    def consider(self, session: NotebookSession, cell: CellSnapshot) -> None:
        if self.host.settings.mode != "llm" or not self.undecided(session, cell):
            return
        if session.model_answers.has(cell.source, session.kernel_gen) or self._settings() is None:
            return
        loop = asyncio.get_running_loop()
        last = session.known(cell.uri).last_edit
        delay = max(0.0, last + self.host.tuning.llm_delay_ms / 1000 - loop.time())
        pk = (session.uri, cell.uri)
        old = self._pending.pop(pk, None)
        if old is not None:
            old.cancel()
        self._pending[pk] = loop.call_later(delay, lambda: self.host.spawn(self._ask(session, cell.uri, pk)))

    async def _ask(self, session: NotebookSession, cell_uri: str, pk: tuple[str, str]) -> None:
        self._pending.pop(pk, None)
        async with self._lock:  # one question at a time
            snap = snapshot(self.host.workspace, session.uri)
            cell = snap.cell(cell_uri) if snap is not None else None
            settings = self._settings()
            if snap is None or cell is None or session.closed or settings is None or not self.undecided(session, cell):
                return
            gen = session.kernel_gen
            if session.model_answers.has(cell.source, gen):
                return
            out = session.known(cell_uri).outcome
            probe = out.probe if out is not None else None
            self.requests += 1
            from crane.llm.client import LLMError

            answer: ModelAnswer | None
            try:
                answer = await asyncio.to_thread(self._predict_blocking, snap, cell, probe, settings)
            except LLMError as exc:
                log.warning("LLM prediction for cell %d failed: %s", cell.number, exc)
                answer = None
            except Exception:
                log.exception("LLM prediction for cell %d failed", cell.number)
                answer = None
            if session.kernel_gen != gen:
                return  # the kernel changed meanwhile: the next check asks again
            session.model_answers.put(cell.source, gen, answer)  # None: asked, no answer (not asked again)
        republish(self.host, session, cell_uri, cell.source)

    @staticmethod
    def _predict_blocking(snap: NotebookSnapshot, cell: CellSnapshot, probe: Any, settings: Any) -> ModelAnswer:
        from crane.llm.claims import model_answer
        from crane.llm.predictor import predict_with_llm
        from crane.llm.prompt import build_prompt

        cells = notebook_cells(snap)
        target = cells[cell.number - 1]
        prompt = build_prompt(executed_history(cells, target.number), target, probe, [])
        verdict = predict_with_llm(prompt, settings)
        return model_answer(verdict, target, probe)

    def close(self) -> None:
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()
