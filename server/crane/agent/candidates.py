"""The verified quick fixes (crane.fixes, no model) the repair agent starts from: searched first, each already ran
clean in a sandbox of the current state, and given to the model as its starting point (crane.agent.context).
Used by `crane fix --model` and `crane bench --fix`."""

from __future__ import annotations

import logging

from crane.notebook.model import Notebook

log = logging.getLogger(__name__)

SEARCH_SECONDS = 60.0


def verified_candidates(nb: Notebook, target: int, *, python: str | None = None, launcher=None,
                        max_seconds: float = SEARCH_SECONDS) -> tuple[list, str | None]:
    """(verified fixes, why none were searched): a failed search is a reason, never an exception (the agent
    then starts from scratch)."""
    from crane.errors import CraneError
    from crane.fixes.offline import fix_notebook
    from crane.fixes.search import SearchBudget

    try:
        report = fix_notebook(nb, target, python=python, budget=SearchBudget(max_seconds=max_seconds),
                              launcher=launcher)
    except CraneError as exc:
        log.info("no verified quick fixes for cell %d: %s", target, exc)
        return [], str(exc)
    return list(report.fixes), None
