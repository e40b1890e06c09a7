"""What requests cost: litellm's bundled price table where the model is known, else tokens only; and the
running total of a session (one CLI run, one daemon process) with an optional budget.
"""

from __future__ import annotations

import logging
import threading

import msgspec

from crane.llm.errors import LLMBudgetExceeded
from crane.llm.schema import Usage

log = logging.getLogger(__name__)


def price_usage(litellm, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> float | None:
    """Cost in USD from litellm's price table (cached prompt tokens at the cache-read price), or None."""
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cache_read_input_tokens=cached_tokens,
        )
    except Exception:  # ModelNotMappedError and friends: tokens only
        return None
    return float(prompt_cost) + float(completion_cost)


def is_priced(model: str) -> bool:
    """Whether litellm's bundled price table knows `model` (imports litellm)."""
    from crane.llm.litellm_import import load_litellm

    try:
        info = load_litellm().get_model_info(model)
    except Exception:
        return False
    return bool(info.get("input_cost_per_token") or info.get("output_cost_per_token"))


class SessionTotals(msgspec.Struct, kw_only=True, rename="camel"):
    requests: int = 0  # requests sent to a model (a repair retry counts)
    cache_hits: int = 0  # answers served from the on-disk cache (nothing paid)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0  # over the priced requests
    unpriced_requests: int = 0  # requests whose model has no price: their cost is unknown
    failed_requests: int = 0  # requests sent that got no usable reply (timeouts, HTTP errors, dropped)

    def cost_text(self) -> str:
        """"$0.01234", "$0.01234 (+2 unpriced)", or "unpriced" when no answered request had a price."""
        if self.requests and self.unpriced_requests >= self.requests:
            return "unpriced"
        return f"${self.cost_usd:.5f}" + (f" (+{self.unpriced_requests} unpriced)" if self.unpriced_requests else "")

    def describe(self) -> str:
        """One line: real requests (failed ones included), tokens, cost, and the answers served from cache."""
        text = (f"{self.requests + self.failed_requests} request(s)"
                + (f" ({self.failed_requests} failed)" if self.failed_requests else "")
                + f", {self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion tokens")
        if self.cached_tokens:
            text += f" ({self.cached_tokens:,} served from the provider's prompt cache)"
        text += ", " + self.cost_text()
        if self.cache_hits:
            text += f"; {self.cache_hits} answer(s) from CRANE's cache (no request)"
        return text


class CostLedger:
    """Running totals for one session; thread-safe (the daemon may run requests in worker threads)."""

    def __init__(self, budget_usd: float | None = None):
        self.budget_usd = budget_usd
        self._lock = threading.Lock()
        self._totals = SessionTotals()

    def totals(self) -> SessionTotals:
        with self._lock:
            return msgspec.structs.replace(self._totals)

    def check_budget(self, budget_usd: float | None = None) -> None:
        budget = self.budget_usd if budget_usd is None else budget_usd
        if budget is None:
            return
        with self._lock:
            spent = self._totals.cost_usd
        if spent >= budget:
            raise LLMBudgetExceeded(f"the LLM budget of ${budget:.4f} for this session is used up (spent ${spent:.4f})")

    def add(self, usage: Usage, requests: int = 1) -> None:
        with self._lock:
            t = self._totals
            t.requests += requests
            t.prompt_tokens += usage.prompt_tokens
            t.completion_tokens += usage.completion_tokens
            t.cached_tokens += usage.cached_tokens
            if usage.cost_usd is None:
                t.unpriced_requests += requests
            else:
                t.cost_usd += usage.cost_usd

    def reset(self) -> None:
        """Start the totals again (a test running several CLI commands in one process)."""
        with self._lock:
            self._totals = SessionTotals()

    def add_failure(self) -> None:
        """A request was sent and failed (it may have cost something: its tokens are unknown)."""
        with self._lock:
            self._totals.failed_requests += 1

    def add_cache_hit(self) -> None:
        with self._lock:
            self._totals.cache_hits += 1

    def describe(self) -> str:
        return "session: " + self.totals().describe()


# The process-wide session: one CLI run or one daemon process.
SESSION = CostLedger()
