"""The diagnosis of one cell (crane.llm.predictor.diagnose), as the CLI (--json) and the daemon show it."""

from __future__ import annotations

from typing import Literal

import msgspec

from crane.finding import Finding
from crane.llm.cost import SessionTotals
from crane.llm.schema import LLMAnswer, Usage
from crane.policy import Prediction


class Diagnosis(msgspec.Struct, kw_only=True, rename="camel"):
    """A diagnosis of one cell, for the CLI (--json) and the daemon's crane/diagnosis notification."""

    cell: int
    prediction: Prediction
    mode: Literal["llm", "offline"]
    markdown: str
    verdict: Finding | None = None  # the LLM's finding, or the strongest rule finding offline
    findings: list[Finding] = []  # the offline rules' findings
    answer: LLMAnswer | None = None
    usage: Usage | None = None
    cached: bool = False
    model: str | None = None
    prompt_chars: int | None = None
    session: SessionTotals | None = None
    kept: list[Finding] = []  # rule findings that stand although the model said "no crash" (crane.policy)
    llm_error: str | None = None  # the model failed: this is the rules' diagnosis
    suspicions: list[Finding] = []  # the model's crash claim that nothing checked (predicts nothing)
    dropped: list[str] = []  # why the model's crash claim does not count (incoherent, contradicted by the facts)
    checked: bool = False  # the runtime facts corroborate the model's crash claim
