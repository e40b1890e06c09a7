"""Nearest existing names for a missing one, for candidate fixes (looser than the diagnostics' "did you mean",
crane.rulekit.suggest, because every candidate is verified by running it before it is offered).

Scores in [0, 1]: equal up to case and surrounding spaces 1.0; the fitted-attribute underscore (`coef` →
`coef_`) 0.98; equal up to case and punctuation ('Total Gross' / 'total_gross') 0.97; else the larger of
difflib's ratio (case-insensitive) and a containment score when the missing name, normalised, holds the
existing one ('Total Gross (millions)' / 'Total_Gross'; not the other way round: 'scaled_Amount' is another
column than 'Amount', derived from it). Candidates under CUTOFF are never proposed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

CUTOFF = 0.7


def _norm(s: str) -> str:
    return re.sub(r"[^0-9a-z]", "", s.lower())


def score(word: str, cand: str) -> float:
    if cand.strip().lower() == word.strip().lower():
        return 1.0
    if cand == word + "_":
        return 0.98
    nw, nc = _norm(word), _norm(cand)
    if nw and nw == nc:
        return 0.97
    ratio = difflib.SequenceMatcher(a=word.lower(), b=cand.lower(), autojunk=False).ratio()
    contain = 0.0
    if len(nc) >= 4 and nc in nw:  # the missing name spells out an existing, shorter one
        contain = 0.6 + 0.3 * len(nc) / len(nw)
        if nw.startswith(nc):
            contain += 0.05
    return max(ratio, contain)


def nearest(word: Any, candidates: Iterable[Any] | None, limit: int = 3, cutoff: float = CUTOFF) -> list[str]:
    """Up to `limit` existing text names closest to `word`, best first."""
    if not isinstance(word, str) or not candidates:
        return []
    pool = [c for c in dict.fromkeys(candidates) if isinstance(c, str) and c != word]
    scored = sorted(((score(word, c), i, c) for i, c in enumerate(pool)), key=lambda t: (-t[0], t[1]))
    return [c for s, _, c in scored if s >= cutoff][:limit]
