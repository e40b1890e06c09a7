""""Did you mean ...?" for a missing name, key, column or attribute: the closest existing one, or nothing.

One policy for every rule (names, keys, attributes): first an existing name equal up to case and surrounding
spaces ('Price' or 'price ' for 'price'); else the closest by difflib's similarity ratio, compared
case-insensitively, when it is at least CUTOFF; never a suggestion when nothing is that close. Only text
candidates count. Candidates come from the probe (for a live object it sends up to three close names, chosen
in the kernel with a looser cutoff, from every key or attribute it has) or from the facts (a column list).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

CUTOFF = 0.8


def closest(word: Any, candidates: Iterable[Any] | None) -> str | None:
    if not isinstance(word, str) or not candidates:
        return None
    pool = [c for c in dict.fromkeys(candidates) if isinstance(c, str) and c != word]
    norm = word.strip().lower()
    for c in pool:
        if c.strip().lower() == norm:
            return c
    lowered: dict[str, str] = {}
    for c in pool:
        lowered.setdefault(c.lower(), c)
    best = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=CUTOFF)
    return lowered[best[0]] if best else None


def hint(word: Any, candidates: Iterable[Any] | None) -> str:
    """" (did you mean 'price'?)" or ""."""
    match = closest(word, candidates)
    return f" (did you mean {match!r}?)" if match is not None else ""
