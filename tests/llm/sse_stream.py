"""OpenAI-style streaming (server-sent events) for the test servers on 127.0.0.1 (fake_llm_server.py and
tests/agent/fake_agent_server.py): a reply sent as `chat.completion.chunk` events, the way llama.cpp's servers,
Ollama and vLLM answer `"stream": true` — the role first, the text and each tool call's arguments in pieces, the
finish reason, the usage when `stream_options.include_usage` asks for it, then `data: [DONE]`.

`stall_after` stops after that many content events and holds the connection open (a server that stalls
mid-reply) until `release` is set.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

PIECE = 12  # characters of text or of a tool call's arguments per event


def _pieces(text: str) -> list[str]:
    return [text[i:i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def chunk_events(model: str, content: str | None, tool_calls: list[dict[str, Any]], usage: dict[str, int] | None,
                 finish_reason: str) -> list[dict[str, Any]]:
    """The events of one reply: each a chat.completion.chunk (the usage event has no choices)."""
    base = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def ev(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [ev({"role": "assistant", "content": ""})]
    if content:
        events += [ev({"content": p}) for p in _pieces(content)]
    for i, call in enumerate(tool_calls):
        fn = call["function"]
        events.append(ev({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": fn["name"], "arguments": ""}}]}))
        events += [ev({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                   for p in _pieces(fn["arguments"])]
    events.append(ev({}, finish_reason))
    if usage is not None:
        events.append({**base, "choices": [], "usage": {
            "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
            "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)}}})
    return events


def wants_usage(body: dict[str, Any] | None) -> bool:
    opts = (body or {}).get("stream_options")
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


def write_sse(handler: BaseHTTPRequestHandler, events: list[dict[str, Any]], *, stall_after: int | None = None,
              release: threading.Event | None = None) -> None:
    """Send `events` as an event stream (the connection closes at the end: no content-length). With
    `stall_after`, only the role event and that many more are sent; then the connection is held until
    `release` is set."""
    handler.close_connection = True
    try:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("connection", "close")
        handler.end_headers()
        for n, event in enumerate(events):
            if stall_after is not None and n > stall_after:
                handler.wfile.flush()
                if release is not None:
                    release.wait()
                return
            handler.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            handler.wfile.flush()
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
    except OSError:  # the client gave up
        pass
