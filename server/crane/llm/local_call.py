"""One request to a model server on this machine or the private network, bounded three ways so that a server
that fails costs seconds or the time it was given, never an unbounded wait:

- **alive** — after LIVENESS_AFTER_S without a token, and every LIVENESS_AFTER_S after, the server must answer
  `GET /health` within LIVENESS_TIMEOUT_S (any HTTP status: `crane.llm.local_server.alive`). A busy server
  does: llama.cpp's HTTP threads answer while a slot computes, llama-cpp-python's web framework answers a path
  that does not need its model. One that does not is dead or hung: `ServerHung`, about 13 s after the request
  instead of at its timeout.
- **first token** — the request is streamed (`stream: true`); the first piece of the reply (text, a tool call
  or reasoning) must arrive within `first_token_s`: `NoFirstToken` otherwise. This bounds a server that is
  alive but never starts the reply (its one slot stuck, or still busy with a request abandoned earlier).
- **total** — the whole reply must have arrived within `total_s` (the request timeout) of the server starting
  its answer (the response's headers): `StreamStalled` otherwise, e.g. a server that sent a few pieces and then
  nothing. Until the server starts answering, litellm's own timeout (the same `total_s`, for each read) and the
  first-token bound hold; the clock does not count the client's own start-up (litellm's first request in a
  process spends seconds importing its provider code, more on a loaded machine).

The streamed pieces are put back together by litellm's `stream_chunk_builder` (text, tool calls split over
pieces, usage), so callers get the same response object as without streaming.

A server that ignores `stream: true` and sends its whole reply as one JSON chat completion has answered: that
reply is used as it is (asking again would cost a second generation). One that cannot stream otherwise — another
body, or an error that names streaming — raises `StreamUnsupported`; the caller sends the request again without streaming and
`crane.llm.local_server` remembers not to stream to it again. Without streaming, the liveness check and the
request timeout still hold; the first-token bound does not (there is no first token to wait for).

Hosted providers are not streamed: they answer in seconds, and their usage and billing are read from the
plain reply. litellm's own timeout (`kwargs["timeout"]`) stays on the request, so the worker thread of an
abandoned request ends by itself.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

LIVENESS_AFTER_S = 10.0
LIVENESS_TIMEOUT_S = 3.0


class ServerHung(Exception):
    """A local server accepted the request but answers nothing, not even GET /health."""


class NoFirstToken(Exception):
    """The streamed reply did not start within the first-token timeout."""

    def __init__(self, seconds: float):
        super().__init__(f"no first token within {seconds:g} s")
        self.seconds = seconds


class StreamStalled(Exception):
    """The streamed reply was not complete at the total timeout."""

    def __init__(self, seconds: float, pieces: int):
        what = f"after {pieces} piece{'s' if pieces != 1 else ''} of the reply" if pieces else "before any token"
        super().__init__(f"the reply stopped {what}; abandoned at the {seconds:g} s total timeout")
        self.seconds = seconds
        self.pieces = pieces


class StreamUnsupported(Exception):
    """The server answered `stream: true` with a plain reply (JSON), not an event stream."""


class StreamBroken(Exception):
    """The event stream ended with no piece of a reply (llama-cpp-python 0.3.36 raised in its chat template after
    sending the headers, for some message lists and only when streaming): the request is sent again without
    streaming, once (an empty reply, were it real, costs one more request)."""


class HtmlPage(Exception):
    """The server answered with an HTML page (a web UI or a proxy's page, not the model's API); the text
    holds the page's start, which `crane.llm.client.describe_failure` names as such."""


def _is_token(chunk: Any) -> bool:
    """The chunk carries part of the reply: text, a tool call or reasoning (not just the role or a finish)."""
    for choice in getattr(chunk, "choices", None) or []:
        delta = getattr(choice, "delta", None)
        if delta is None:
            continue
        if getattr(delta, "content", None) or getattr(delta, "tool_calls", None) \
                or getattr(delta, "function_call", None) or getattr(delta, "reasoning_content", None):
            return True
    return False


def _http_response(stream: Any) -> Any:
    """The HTTP response under litellm's stream wrapper (the OpenAI client's `Stream.response`), or None when
    the provider's stream is not built that way."""
    return getattr(getattr(stream, "completion_stream", None), "response", None)


def _content_type(stream: Any) -> str | None:
    response = _http_response(stream)
    headers = getattr(response, "headers", None)
    try:
        return str(headers.get("content-type", "")).lower() if headers is not None else None
    except Exception:
        return None


def _body_start(stream: Any, limit: int = 2000) -> str:
    response = _http_response(stream)
    try:
        return bytes(response.read()[:limit]).decode("utf-8", "replace") if response is not None else ""
    except Exception:
        return ""


def _plain_reply(stream: Any) -> dict[str, Any] | None:
    """The chat completion a server sent whole (as JSON) though asked to stream, or None when the body is not
    one (an error object, something else): then the request is sent again without streaming."""
    response = _http_response(stream)
    try:
        data = json.loads(response.read()) if response is not None else None
    except Exception:
        return None
    if type(data) is not dict or type(data.get("choices")) is not list or not data["choices"]:
        return None
    return data


def _close(stream: Any) -> None:
    """Close the abandoned stream's connection, so the server sees the client go and can stop computing."""
    response = _http_response(stream)
    if response is not None:
        try:
            response.close()
        except Exception as exc:  # best effort: the worker also stops at litellm's own timeout
            log.debug("closing an abandoned stream: %s", exc)


def stream_rejected(exc: BaseException) -> bool:
    """An error whose text says the server does not take `stream: true` (HTTP 400/422/500 of servers that
    cannot stream)."""
    text = str(exc).lower()
    return "stream" in text and any(w in text for w in ("not supported", "unsupported", "not implemented",
                                                         "does not support", "not allowed", "invalid",
                                                         "unknown", "unrecognized", "extra"))


def local_completion(litellm: Any, kwargs: dict[str, Any], api_base: str, *, stream: bool,
                     first_token_s: float | None, total_s: float) -> Any:
    """`litellm.completion(**kwargs)` in a worker thread, watched as the module's docstring says. With
    `stream`, the request is streamed and the pieces are assembled into one response; `first_token_s` bounds
    the wait for the first piece (ignored when it is not below `total_s`) and `total_s` the whole reply from the
    moment the server starts answering."""
    from crane.llm.local_server import alive

    if stream:
        kwargs = {**kwargs, "stream": True, "stream_options": {"include_usage": True}}
    box: dict[str, Any] = {}
    chunks: list[Any] = []
    first = threading.Event()
    done = threading.Event()
    wake = threading.Event()
    abandoned = threading.Event()

    def work() -> None:
        try:
            response = litellm.completion(**kwargs)
            if not stream:
                box["response"] = response
                return
            box["stream"] = response
            box["answering_since"] = time.monotonic()
            wake.set()
            if abandoned.is_set():
                _close(response)
                return
            kind = _content_type(response)
            if kind is not None and "json" in kind:  # it ignored `stream`: the whole reply is this body
                reply = _plain_reply(response)
                if reply is not None:
                    box["response"] = litellm.ModelResponse(**reply)
                    return
            if kind is not None and "text/event-stream" not in kind:
                body = _body_start(response)
                _close(response)
                if "html" in kind or "<html" in body.lower():
                    raise HtmlPage(f"answered with {kind}: {body}")
                raise StreamUnsupported(f"it answered stream=true with {kind or 'no content type'}, "
                                        "not an event stream")
            for chunk in response:
                chunks.append(chunk)
                if not first.is_set() and _is_token(chunk):
                    first.set()
                    wake.set()
                if abandoned.is_set():
                    break
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc
        finally:
            done.set()
            wake.set()

    def abandon(exc: Exception) -> Exception:
        abandoned.set()
        if "stream" in box:
            _close(box["stream"])
        return exc

    threading.Thread(target=work, name="crane-llm-request", daemon=True).start()
    start = time.monotonic()
    check_at = start + LIVENESS_AFTER_S
    first_by = start + first_token_s if stream and first_token_s is not None and first_token_s < total_s else None
    while not done.is_set():
        now = time.monotonic()
        since = box.get("answering_since")
        total_by = since + total_s if since is not None else None
        if first_by is not None and not first.is_set() and now >= first_by:
            raise abandon(NoFirstToken(first_token_s or 0.0))
        if total_by is not None and now >= total_by:
            raise abandon(StreamStalled(total_s, sum(map(_is_token, list(chunks)))))
        if now >= check_at:
            if not first.is_set() and not done.is_set() and not alive(api_base, LIVENESS_TIMEOUT_S):
                raise abandon(ServerHung(f"no reply to the request, nor to GET /health within "
                                         f"{LIVENESS_TIMEOUT_S:g} s"))
            check_at = time.monotonic() + LIVENESS_AFTER_S
        due = [check_at, *(t for t in (first_by if not first.is_set() else None, total_by) if t is not None)]
        wake.wait(max(0.0, min(due) - time.monotonic()))
        wake.clear()
    if "error" in box:
        raise box["error"]
    if "response" in box:  # not streamed, or a server that answered `stream: true` with its whole reply
        return box["response"]
    if not any(map(_is_token, chunks)):  # (litellm's stream adds a finish of its own when the stream ends)
        raise StreamBroken(f"its event stream ended with no piece of a reply ({len(chunks)} event(s))")
    built = litellm.stream_chunk_builder(chunks, messages=kwargs.get("messages"))
    if built is None:  # an event stream with no piece at all
        raise StreamUnsupported("its event stream held no reply")
    return built
