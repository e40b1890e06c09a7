"""What the CLI, the benchmark and the LSP daemon call: ask a model about a cell, turn its answer into a
Finding, and diagnose a cell (with a model when one is configured, from the offline rules otherwise).

    prompt = build_prompt(history, target, probe, findings, traceback)
    verdict = predict_with_llm(prompt, settings)          # or: await apredict_with_llm(...)
    finding = verdict_to_finding(verdict, target)         # None when the model predicts no crash
    diagnosis = diagnose(history, target, probe, findings, settings)   # everything, with markdown
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence

from crane.finding import Finding
from crane.llm.cache import ResponseCache, cache_key
from crane.llm.client import request_answer
from crane.llm.cost import SESSION, CostLedger
from crane.llm.diagnosis import Diagnosis
from crane.llm.prompt import Prompt, build_prompt, with_cache_markers
from crane.llm.render import render_markdown
from crane.llm.schema import LLMVerdict
from crane.llm.settings import LLMSettings
from crane.notebook.model import Cell
from crane.policy import with_model
from crane.probe.facts import ProbeResult

# The CRANE-LLM study's median runtime-augmented prompt input (222 JunoBench cases; notes §1.1).
STUDY_MEDIAN_PROMPT_CHARS = 5198


def needs_cache_markers(model: str | None) -> bool:
    """Anthropic models (direct, Bedrock, Vertex) cache a prompt prefix only when it is marked."""
    m = (model or "").lower()
    return m.startswith("anthropic/") or "claude" in m


def _cache_for(settings: LLMSettings) -> ResponseCache | None:
    return ResponseCache(settings.resolved_cache_dir()) if settings.cache else None


def predict_with_llm(
    prompt: Prompt, settings: LLMSettings, *, ledger: CostLedger | None = None, cache: ResponseCache | None = None
) -> LLMVerdict:
    """Ask the configured model; served from the on-disk cache when the same question was already paid for.

    Raises crane.llm.client.LLMError (LLMNotConfigured when no model is set)."""
    ledger = SESSION if ledger is None else ledger
    cache = cache if cache is not None else _cache_for(settings)
    start = time.perf_counter()
    key = None
    if cache is not None and settings.model:
        key = cache_key(settings.model, settings.api_base, prompt.messages,
                        max_tokens=settings.max_tokens, temperature=settings.temperature)
        entry = cache.get(key)
        if entry is not None:
            ledger.add_cache_hit()
            return LLMVerdict(answer=entry.answer, usage=entry.usage, cached=True, repaired=entry.repaired,
                              elapsed_ms=(time.perf_counter() - start) * 1000)
    messages = prompt.messages
    if needs_cache_markers(settings.model):
        messages = with_cache_markers(messages, prompt.stable_chars)
    answer, usage, repaired = request_answer(settings, messages, ledger)
    if key is not None and cache is not None:
        cache.put(key, settings.require_model(), answer, usage, repaired)
    return LLMVerdict(answer=answer, usage=usage, repaired=repaired, elapsed_ms=(time.perf_counter() - start) * 1000)


async def apredict_with_llm(prompt: Prompt, settings: LLMSettings, **kwargs) -> LLMVerdict:
    """`predict_with_llm` in a worker thread (for the daemon's event loop); bounded by the settings' timeout."""
    return await asyncio.to_thread(predict_with_llm, prompt, settings, **kwargs)


def failed_ename(target: Cell, traceback: str | list[str] | None) -> str | None:
    """The exception the cell already raised in this state: its recorded error's class, the class on the
    traceback's last line, "" when only the failure is known (a traceback note), None when it did not fail."""
    if target.error is not None:
        return target.error.ename
    if not traceback:
        return None
    last = (traceback if isinstance(traceback, str) else "\n".join(traceback)).strip().splitlines()[-1:]
    head = last[0].split(":", 1)[0].strip() if last else ""
    return head if head.isidentifier() and (head.endswith(("Error", "Exception")) or head[:1].isupper()) else ""


def offline_diagnosis(target: Cell, findings: list[Finding], llm_error: str | None = None) -> Diagnosis:
    """The rules' diagnosis (no model configured, or the model failed: `llm_error` says how)."""
    top = max(findings, key=lambda f: f.confidence) if findings else None
    d = Diagnosis(cell=target.number, prediction="crash" if findings else "no-crash", mode="offline",
                  markdown="", verdict=top, findings=findings, llm_error=llm_error)
    d.markdown = render_markdown(d)
    return d


def diagnose(
    history: list[Cell],
    target: Cell,
    probe: ProbeResult | None,
    findings: list[Finding],
    settings: LLMSettings,
    traceback: str | list[str] | None = None,
    *,
    history_errors: dict[int, str] | None = None,
    ledger: CostLedger | None = None,
) -> Diagnosis:
    """Diagnose `target`: with the configured model (raises LLMError if it fails), offline otherwise.

    The rules' findings always stand (crane.policy: a model only adds); the model's crash claim is checked
    (crane.llm.claims) and shown as its own: counted when the runtime facts corroborate it or a rule found the
    same exception, a suspicion when nothing checked it, dropped (with the reasons) when incoherent or
    contradicted."""
    from crane.llm.claims import model_answer

    ledger = SESSION if ledger is None else ledger
    if not settings.enabled:
        return offline_diagnosis(target, findings)
    prompt = build_prompt(history, target, probe, findings, traceback, history_errors=history_errors)
    verdict = predict_with_llm(prompt, settings, ledger=ledger)
    model = model_answer(verdict, target, probe, failed_with=failed_ename(target, traceback))
    decision = with_model(findings, model)
    counted = model.finding if model.finding is not None and not decision.suspicions else None
    d = Diagnosis(
        cell=target.number,
        prediction=decision.prediction,
        kept=list(findings) if findings and not verdict.answer.crash else [],
        mode="llm",
        markdown="",
        verdict=counted,
        findings=findings,
        answer=verdict.answer,
        usage=verdict.usage,
        cached=verdict.cached,
        model=settings.model,
        prompt_chars=prompt.chars,
        session=ledger.totals(),
        suspicions=decision.suspicions,
        dropped=list(model.dropped),
        checked=model.checked,
    )
    d.markdown = render_markdown(d)
    return d


def _dist(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)
    return {"min": s[0], "median": statistics.median(s), "p90": s[min(len(s) - 1, int(0.9 * len(s)))], "max": s[-1],
            "mean": round(statistics.fmean(s), 1)}


def dry_run_stats(
    prompts: list[Prompt], model: str | None = None, reference_chars: int = STUDY_MEDIAN_PROMPT_CHARS
) -> dict:
    """Sizes of a set of prompts without calling a model: chars, tokens (offline tokenizer), sections, the
    runtime facts they carry, and the ratio of the median to the CRANE-LLM study's median prompt."""
    user = [p.user_chars for p in prompts]
    total = [p.chars for p in prompts]
    tokens = [p.token_count(model) for p in prompts] if prompts else []
    carried: dict[str, int] = {}
    for p in prompts:
        for k in p.carried:
            carried[k] = carried.get(k, 0) + 1
    sections = sorted({k for p in prompts for k in p.sections})
    stats = {
        "prompts": len(prompts),
        "user_chars": _dist(user),
        "total_chars": _dist(total),
        "tokens": _dist(tokens),
        "system_prompt_chars": total[0] - user[0] if prompts else 0,
        "sections_median_chars": {k: statistics.median([p.sections.get(k, 0) for p in prompts]) for k in sections},
        "carried": dict(sorted(carried.items())),
        "history_statements_cut": sum(p.history_statements_cut for p in prompts),
        "reference_median_chars": reference_chars,
    }
    if prompts:
        stats["ratio_user_median"] = round(statistics.median(user) / reference_chars, 3)
        stats["ratio_total_median"] = round(statistics.median(total) / reference_chars, 3)
    return stats
