"""litellm wrapper: one JSON verdict per request, with retries, timeouts, a repair retry and no stdout.

litellm is imported lazily by `litellm_import.load_litellm()`, never at daemon start.

API keys come from the provider's usual environment variables and are never logged: every error message
that leaves this module is scrubbed of the values of *_KEY / *_TOKEN / *_SECRET variables.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any

from crane.llm import local_call, local_server
from crane.llm.cost import CostLedger, price_usage
from crane.llm.errors import (
    LLMBadAnswer,
    LLMBudgetExceeded,
    LLMError,
    LLMNotConfigured,
    LLMRequestRejected,
    LLMTimeout,
    LLMUnavailable,
)
from crane.llm.litellm_import import load_litellm
from crane.llm.schema import (
    ANSWER_JSON_SCHEMA,
    RESPONSE_FORMAT_OBJECT,
    RESPONSE_FORMAT_SCHEMA,
    AnswerError,
    LLMAnswer,
    Usage,
    decode_answer,
)
from crane.llm.settings import LLMSettings

log = logging.getLogger(__name__)

# Models whose provider rejected a response_format kind: remember the next kind to try.
_format_downgrades: dict[str, str] = {}

REPAIR_PROMPT = (
    "Your reply could not be used: {error}. Reply again with only the JSON object described in the system "
    "message (keys: explanation, crash, confidence, exception, line, root_cause, suggested_fix), no other text."
)




def _secrets() -> list[str]:
    out = []
    for k, v in os.environ.items():
        if v and len(v) >= 8 and k.upper().endswith(("_KEY", "_TOKEN", "_SECRET", "_API_KEY", "_PASSWORD")):
            out.append(v)
    return sorted(out, key=len, reverse=True)


def scrub(text: str) -> str:
    """Replace the values of secret-looking environment variables in `text`."""
    for secret in _secrets():
        text = text.replace(secret, "***")
    return text


def short_error(exc: BaseException) -> str:
    msg = scrub(str(exc)).strip().replace("\n", " ")
    return msg[:300] + ("..." if len(msg) > 300 else "")


def choose_response_format(litellm, model: str, settings: LLMSettings | None = None) -> str:
    """The response_format kind: the `structured` setting when it names one; else 'schema' where the server
    enforces a JSON schema (litellm's table, or a local server known to: llama.cpp's llama-server, Ollama,
    vLLM, LM Studio), 'object' otherwise. A kind the server rejected before is not tried again."""
    if settings is not None and settings.structured != "auto":
        return settings.structured
    if model in _format_downgrades:
        return _format_downgrades[model]
    if settings is not None and settings.local:
        from crane.llm.local_server import enforces_json_schema

        if enforces_json_schema(settings.api_base, model):
            return "schema"
    try:
        if litellm.supports_response_schema(model=model):
            return "schema"
    except Exception:
        pass
    return "object"


_FORMATS = {"schema": RESPONSE_FORMAT_SCHEMA, "object": RESPONSE_FORMAT_OBJECT, "none": None}
_NEXT_FORMAT = {"schema": "object", "object": "none"}


def _provider(litellm, model: str) -> str | None:
    try:
        return litellm.get_llm_provider(model)[1]
    except Exception:
        return None


def _request_kwargs(litellm, settings: LLMSettings, messages: list[dict], fmt: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": settings.model,
        "messages": messages,
        "timeout": settings.request_timeout_s,
        "max_tokens": settings.max_tokens,
        "max_retries": 0,  # CRANE retries itself (with its own back-off and accounting)
        "drop_params": True,  # e.g. temperature for models that only accept the default
    }
    if settings.temperature is not None:
        kwargs["temperature"] = settings.temperature
    if settings.api_base:
        kwargs["api_base"] = settings.api_base
        # Local OpenAI-compatible servers need no key, but the OpenAI client insists on one.
        if _provider(litellm, settings.require_model()) == "openai" and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = "no-key-required"
    if fmt == "schema" and settings.local:
        from crane.llm.local_server import schema_format

        kwargs["response_format"] = schema_format(settings.api_base, RESPONSE_FORMAT_SCHEMA, ANSWER_JSON_SCHEMA)
    elif _FORMATS[fmt] is not None:
        kwargs["response_format"] = _FORMATS[fmt]
    return kwargs


def usage_of(litellm, settings: LLMSettings, response) -> Usage:
    u = getattr(response, "usage", None)
    prompt = int(getattr(u, "prompt_tokens", 0) or 0)
    completion = int(getattr(u, "completion_tokens", 0) or 0)
    details = getattr(u, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    model = settings.require_model()
    cost = price_usage(litellm, model, prompt, completion, cached)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached, cost_usd=cost,
                 model=model)


def retry_after(exc: BaseException) -> float | None:
    for headers in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None),
                                                                             "headers", None)):
        if headers is None:
            continue
        try:
            return max(0.0, float(headers.get("retry-after")))
        except (AttributeError, TypeError, ValueError):
            continue
    return None


def classify_error(litellm, exc: BaseException) -> tuple[type[LLMError], bool, str]:
    """(error class, retryable, what happened)."""
    if isinstance(exc, litellm.Timeout):
        return LLMTimeout, True, "timed out"
    if isinstance(exc, litellm.RateLimitError):
        return LLMUnavailable, True, "rate limited (HTTP 429)"
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)):
        return LLMRequestRejected, False, "refused the credentials (check the provider's API key variable)"
    if isinstance(exc, litellm.NotFoundError):
        return LLMRequestRejected, False, "does not know this model"
    if isinstance(exc, litellm.ContextWindowExceededError):
        return LLMRequestRejected, False, "rejected the prompt as too long for the model"
    if isinstance(exc, litellm.BadRequestError):
        return LLMRequestRejected, False, "rejected the request"
    if "connection error" in str(exc).lower():  # refused, reset or dropped before a reply
        return LLMUnavailable, True, "could not be reached or dropped the connection"
    if isinstance(exc, (litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError)):
        status = getattr(exc, "status_code", None)
        return LLMUnavailable, True, f"failed (HTTP {status})" if status else "failed (server error)"
    if isinstance(exc, litellm.APIConnectionError):
        return LLMUnavailable, True, "could not be reached"
    if isinstance(exc, litellm.APIError):
        status = getattr(exc, "status_code", None)
        return LLMUnavailable, bool(status and int(status) >= 500), f"failed (HTTP {status})"
    return LLMError, False, "failed"


_KEY_VAR = re.compile(r"`?\b([A-Z][A-Z0-9_]*_(?:API_KEY|AUTH_TOKEN|KEY))\b`?")


def describe_failure(litellm, exc: BaseException, settings: LLMSettings) -> tuple[type[LLMError], bool, str]:
    """`classify_error`, with the real cause named where litellm's class hides it: a missing API key (litellm:
    HTTP 500 for OpenAI), an HTML page instead of JSON (HTTP 500), an API base without `/v1` (HTTP 404, which
    reads as "does not know this model")."""
    text = str(exc)
    low = text.lower()
    if "missing credentials" in low or "no key is set" in low or ("api_key" in low and "must be set" in low):
        names = list(dict.fromkeys(m.group(1) for m in _KEY_VAR.finditer(text)))
        var = " or ".join(names[:2]) if names else "the provider's API key variable"
        return LLMRequestRejected, False, f"needs an API key, and none is set (set {var})"
    if "<!doctype html" in low or "<html" in low:
        return (LLMRequestRejected, False, "answered with an HTML page, not JSON: the API base must be the "
                "server's OpenAI-compatible endpoint (usually ending in /v1), not a web page or proxy")
    err_cls, retryable, what = classify_error(litellm, exc)
    base = (settings.api_base or "").rstrip("/")
    if isinstance(exc, litellm.NotFoundError) and base and not base.endswith("/v1"):
        from crane.llm.local_server import answers

        hint = f"{base}/v1"
        if settings.local and answers(hint):
            return (LLMRequestRejected, False, f"answered HTTP 404 at {base}/chat/completions: the API base has "
                    f"no /v1 (use --api-base {hint})")
        return (LLMRequestRejected, False, f"answered HTTP 404 (an unknown path or model): OpenAI-compatible "
                f"servers usually serve at {hint}, is /v1 missing from the API base?")
    return err_cls, retryable, what


def _format_rejected(exc: BaseException) -> bool:
    """The server's error names response_format (HTTP 400 from most servers, HTTP 500 from llama-cpp-python)."""
    text = str(exc).lower()
    return "response_format" in text or "json_schema" in text or "response format" in text


class DeadlinePassed(LLMTimeout):
    """The caller's time budget ended before or during the request (the request was abandoned)."""


def completion_with_retries(
    settings: LLMSettings,
    ledger: CostLedger,
    make_kwargs: Callable[[Any], dict[str, Any]],
    *,
    label: str = "LLM",
    on_error: Callable[[BaseException, type[LLMError]], bool] | None = None,
    deadline: float | None = None,
) -> tuple[Any, Usage, str]:
    """`litellm.completion` with the budget check, retries on 429 / 5xx / timeouts / dropped connections and
    clear errors; the usage is recorded in `ledger`. `make_kwargs(litellm)` builds each attempt's request;
    `on_error(exc, error_class)` may return True to try again at once (e.g. after changing the request).

    `deadline` (time.monotonic()): each attempt's timeout is cut to what is left, so the caller's time budget
    holds during a request (the HTTP request is abandoned at the deadline); DeadlinePassed when it is over.
    A local server (settings.local) computes one request at a time: a timed-out request is not sent again
    (the server would still be busy with the abandoned one).

    Returns (response, usage, where) — `where` names the model server for messages."""
    if not settings.enabled:
        raise LLMNotConfigured("no model is configured (set --model, CRANE_MODEL or crane.llm.model)")
    litellm = load_litellm()
    where = f"the model server ({settings.api_base})" if settings.api_base else f"the provider of {settings.model}"
    attempt = 0
    unstreamed = False  # this request goes without streaming (its stream broke)
    while True:
        attempt += 1
        try:
            ledger.check_budget(settings.budget_usd)
        except LLMBudgetExceeded:
            raise
        kwargs = make_kwargs(litellm)
        limit = float(kwargs.get("timeout") or settings.request_timeout_s)
        cut = False  # the attempt's timeout is the time left to the deadline
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlinePassed(f"the time budget ended before the request to {where}", attempts=attempt - 1)
            if left < limit:
                kwargs["timeout"] = limit = left
                cut = True
        streamed = bool(settings.local and settings.api_base and local_server.streams(settings.api_base)
                        and not unstreamed)
        try:
            if settings.local and settings.api_base:
                response = local_call.local_completion(
                    litellm, kwargs, settings.api_base, stream=streamed,
                    first_token_s=settings.first_token_timeout_s, total_s=limit)
            else:
                response = litellm.completion(**kwargs)
        except local_call.StreamBroken as exc:
            log.warning("%s: %s; asking again without streaming", where, exc)
            unstreamed = True
            attempt -= 1
            continue
        except local_call.StreamUnsupported as exc:
            log.info("%s: %s", where, exc)
            local_server.mark_no_stream(settings.api_base or "")
            attempt -= 1
            continue
        except local_call.ServerHung as exc:
            ledger.add_failure()
            raise LLMUnavailable(f"{where} does not answer ({exc}): is it running, or hung?",
                                 attempts=attempt) from None
        except local_call.NoFirstToken as exc:
            ledger.add_failure()  # not sent again: the server's one slot may still be busy with it
            raise LLMTimeout(f"{where} sent no token within {exc.seconds:g} s (the first-token timeout: "
                             f"--llm-first-token-timeout / CRANE_LLM_FIRST_TOKEN_TIMEOUT / "
                             f"crane.llm.firstTokenTimeout): is it busy with another request, stuck, or too slow "
                             f"for this prompt?", attempts=attempt) from None
        except local_call.StreamStalled as exc:
            ledger.add_failure()
            if cut:
                raise DeadlinePassed(f"the time budget ended during the request to {where} ({exc})",
                                     attempts=attempt) from None
            raise LLMTimeout(f"{where}: {exc} (the request timeout: --llm-timeout / CRANE_LLM_TIMEOUT / "
                             f"crane.llm.timeout)", attempts=attempt) from None
        except Exception as exc:
            if streamed and not isinstance(exc, local_call.HtmlPage) and local_call.stream_rejected(exc):
                log.info("%s refused streaming: %s", where, short_error(exc))
                local_server.mark_no_stream(settings.api_base or "")
                attempt -= 1
                continue
            ledger.add_failure()
            err_cls, retryable, what = describe_failure(litellm, exc, settings)
            if err_cls is LLMTimeout and cut:
                raise DeadlinePassed(f"the time budget ended during the request to {where} (abandoned after "
                                     f"{limit:.0f} s)", attempts=attempt) from None
            if err_cls is LLMTimeout and settings.local:
                retryable = False  # one slot: the server still computes the abandoned request
            if on_error is not None and on_error(exc, err_cls):
                attempt -= 1
                continue
            if retryable and attempt <= settings.retries:
                delay = retry_after(exc)
                if delay is None:
                    delay = settings.retry_backoff_s * (2 ** (attempt - 1))
                delay = min(delay, 30.0)
                log.warning("%s request %s (attempt %d); retrying in %.1f s: %s", label, what, attempt, delay,
                            short_error(exc))
                time.sleep(delay)
                continue
            detail = f" after {limit:g} s" if err_cls is LLMTimeout else ""
            if err_cls is LLMTimeout and settings.local and settings.timeout_s is None:
                detail += " (raise it with --llm-timeout / CRANE_LLM_TIMEOUT for slow CPU inference)"
            msg = f"{where} {what}{detail} ({attempt} attempt{'s' if attempt > 1 else ''}): {short_error(exc)}"
            raise err_cls(msg, attempts=attempt) from None
        usage = usage_of(litellm, settings, response)
        ledger.add(usage)
        return response, usage, where


def call_model(
    settings: LLMSettings, messages: list[dict], ledger: CostLedger, fmt: str | None = None,
    deadline: float | None = None,
) -> tuple[str, Usage]:
    """One model reply (with retries on 429 / 5xx / timeouts / dropped connections); its usage is recorded.
    `deadline`: as completion_with_retries's."""
    if not settings.enabled:
        raise LLMNotConfigured("no model is configured (set --model, CRANE_MODEL or crane.llm.model)")
    state = {"fmt": fmt or choose_response_format(load_litellm(), settings.require_model(), settings)}

    def make_kwargs(litellm) -> dict[str, Any]:
        from crane.llm.prompt import for_response_format

        log.info("LLM request: model=%s format=%s", settings.model, state["fmt"])
        return _request_kwargs(litellm, settings, for_response_format(messages, state["fmt"]), state["fmt"])

    def downgrade_format(exc: BaseException, err_cls: type[LLMError]) -> bool:
        fmt_now = state["fmt"]
        # any 4xx / 5xx whose body names response_format (llama-cpp-python answers json_schema with HTTP 500)
        if err_cls is not LLMTimeout and fmt_now in _NEXT_FORMAT and _format_rejected(exc):
            log.warning("%s rejected response_format=%s; trying %s", settings.model, fmt_now, _NEXT_FORMAT[fmt_now])
            state["fmt"] = _format_downgrades[settings.require_model()] = _NEXT_FORMAT[fmt_now]
            return True
        return False

    response, usage, _ = completion_with_retries(settings, ledger, make_kwargs, on_error=downgrade_format,
                                                 deadline=deadline)
    try:
        text = response.choices[0].message.content or ""
    except (AttributeError, IndexError):
        text = ""
    return text, usage


def _usable(text: str, system_prompt: str) -> LLMAnswer:
    """The decoded answer, or AnswerError when the reply cannot be used: invalid, or incoherent in itself
    (crane.llm.claims.reply_problems: a placeholder explanation, a flag its own explanation contradicts, a crash
    with no exception class)."""
    from crane.llm.claims import reply_problems

    answer = decode_answer(text)
    problems = reply_problems(answer, system_prompt)
    if problems:
        raise AnswerError("; ".join(problems))
    return answer


def request_answer(settings: LLMSettings, messages: list[dict], ledger: CostLedger) -> tuple[LLMAnswer, Usage, bool]:
    """Ask for a verdict; on an unusable reply (invalid, or incoherent in itself), one repair retry that shows
    the model what was wrong; a second unusable reply is no answer (LLMBadAnswer).

    Returns (answer, usage of all requests, repaired).
    """
    system = next((m["content"] for m in messages if m.get("role") == "system" and isinstance(m.get("content"), str)),
                  "")
    text, usage = call_model(settings, messages, ledger)
    try:
        return _usable(text, system), usage, False
    except AnswerError as first:
        log.warning("LLM reply unusable (%s); sending one repair request", first)
        repair = [
            *messages,
            {"role": "assistant", "content": text[:4000] or "(empty)"},
            {"role": "user", "content": REPAIR_PROMPT.format(error=first)},
        ]
        try:
            text2, usage2 = call_model(settings, repair, ledger)
        except LLMError as exc:
            exc.usage = usage + exc.usage if exc.usage else usage
            raise
        usage = usage + usage2
        try:
            return _usable(text2, system), usage, True
        except AnswerError as second:
            raise LLMBadAnswer(
                f"{settings.model} did not return a valid verdict, even after a repair request: {second}",
                usage=usage,
                attempts=2,
            ) from None
