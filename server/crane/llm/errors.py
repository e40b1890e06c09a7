"""Errors of the LLM layer: each message is fit to show a user and carries no secret."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crane.errors import CraneError

if TYPE_CHECKING:
    from crane.llm.schema import Usage


class LLMError(CraneError):
    """A request to the model failed; the message is fit to show a user (no secrets)."""

    def __init__(self, message: str, usage: Usage | None = None, attempts: int = 1):
        super().__init__(message)
        self.usage = usage
        self.attempts = attempts


class LLMNotConfigured(LLMError):
    """No model is configured (callers should use the offline modes instead)."""


class LLMTimeout(LLMError):
    pass


class LLMUnavailable(LLMError):
    """The model server could not be reached, dropped the connection or kept answering 5xx / 429."""


class LLMRequestRejected(LLMError):
    """The provider refused the request (bad key, unknown model, bad request): retrying will not help."""


class LLMBadAnswer(LLMError):
    """The model's reply was not a valid verdict, twice."""


class LLMBudgetExceeded(LLMError):
    pass

