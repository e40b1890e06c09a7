"""One tool-calling request to the model through litellm (lazily imported by crane.llm.client.load_litellm),
with the LLM layer's retries, error classes and accounting (crane.llm.cost).

The conversation is append-only: the system prompt and the notebook context come first and never change,
each observation is appended, so providers that cache prompt prefixes (OpenAI, Gemini, DeepSeek: automatic;
Anthropic: the `cache_control` markers added here) bill the repeated prefix at the cached rate.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import msgspec

from crane.agent.tools import TOOLS, ToolCall
from crane.llm.client import LLMError, completion_with_retries
from crane.llm.cost import CostLedger
from crane.llm.schema import Usage
from crane.llm.settings import LLMSettings

log = logging.getLogger(__name__)


class ModelTurn(msgspec.Struct):
    """The model's reply: optional text and tool calls, and what the request cost."""

    content: str
    tool_calls: list[ToolCall]
    usage: Usage

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation (OpenAI shape)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return msg


def _is_anthropic(model: str) -> bool:
    m = model.lower()
    return m.startswith(("anthropic/", "claude", "bedrock/anthropic", "vertex_ai/claude"))


def with_cache_markers(messages: list[dict]) -> list[dict]:
    """Anthropic needs explicit markers: the system prompt and the context message are the cached prefix."""
    out = []
    for i, m in enumerate(messages):
        if i < 2 and isinstance(m.get("content"), str):
            m = {**m, "content": [{"type": "text", "text": m["content"], "cache_control": {"type": "ephemeral"}}]}
        out.append(m)
    return out


def _kwargs(litellm, settings: LLMSettings, messages: list[dict], max_tokens: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": settings.model,
        "messages": with_cache_markers(messages) if _is_anthropic(settings.require_model()) else messages,
        "tools": TOOLS,
        "tool_choice": "auto",
        "timeout": settings.timeout_s,
        "max_tokens": max_tokens,
        "max_retries": 0,
        "drop_params": True,
    }
    if settings.temperature is not None:
        kwargs["temperature"] = settings.temperature
    if settings.api_base:
        kwargs["api_base"] = settings.api_base
        try:
            provider = litellm.get_llm_provider(settings.model)[1]
        except Exception:
            provider = None
        if provider == "openai" and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = "no-key-required"  # local OpenAI-compatible servers need none
    return kwargs


def _tool_calls(message) -> list[ToolCall]:
    calls = []
    for i, c in enumerate(getattr(message, "tool_calls", None) or []):
        fn = getattr(c, "function", None)
        name = getattr(fn, "name", None) or ""
        args = getattr(fn, "arguments", None)
        if not isinstance(args, str):
            import json

            args = json.dumps(args or {})
        calls.append(ToolCall(id=getattr(c, "id", None) or f"call_{i}", name=name, arguments=args))
    return calls


def request_turn(settings: LLMSettings, messages: list[dict], ledger: CostLedger, max_tokens: int | None = None) -> ModelTurn:
    """One model turn with tools; retries 429 / 5xx / timeouts / dropped connections (settings.retries)."""
    tokens = max_tokens or max(settings.max_tokens, 1500)
    response, usage, where = completion_with_retries(
        settings, ledger, lambda litellm: _kwargs(litellm, settings, messages, tokens), label="agent")
    try:
        message = response.choices[0].message
    except (AttributeError, IndexError):
        raise LLMError(f"{where} sent a reply without a message", usage=usage) from None
    return ModelTurn(content=getattr(message, "content", None) or "", tool_calls=_tool_calls(message), usage=usage)
