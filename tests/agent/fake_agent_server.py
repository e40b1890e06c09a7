"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 that answers with tool calls.

(tests/llm/fake_llm_server.py only answers with text.) Each request pops the next scripted turn; a turn is a
`Turn` (tool calls and/or text, usage, delay) or a callable `(request_body) -> Turn` that can look at the
conversation so far (e.g. the last tool observation). Every request body is recorded. A request without `tools`
(the agent's focused ask: code wanted, no tool call) is answered from `plain` (default: `NO_CODE`, prose) and
recorded in `plain_requests`, so the tool-call turns keep their own script and indices. A request with
`"stream": true` (CRANE streams from local servers) is answered as an event stream, each tool call's arguments
in pieces (tests/llm/sse_stream.py), as llama.cpp's servers do.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.llm.sse_stream import chunk_events, wants_usage, write_sse


class Turn:
    def __init__(self, calls: list[tuple[str, dict]] | None = None, text: str | None = None,
                 usage: dict[str, int] | None = None, delay_s: float = 0.0, error: tuple[int, dict] | None = None):
        self.error = error  # (HTTP status, JSON body): the request is answered with this error instead
        self.calls = calls or []
        self.text = text
        self.usage = usage or {"prompt_tokens": 1200, "completion_tokens": 80, "cached_tokens": 0}
        self.delay_s = delay_s


def tool(name: str, reflection: str = "next step", usage: dict[str, int] | None = None, **args: Any) -> Turn:
    """One turn with one tool call."""
    return Turn(calls=[(name, {"reflection": reflection, **args})], usage=usage)


# a focused ask's reply with no code in it, and no tokens (the token budgets of tests are the tool turns')
NO_CODE = Turn(text="I cannot fix it.", usage={"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0})

Script = list["Turn | Callable[[dict], Turn]"]


class FakeAgentServer:
    def __init__(self) -> None:
        self.script: list = []
        self.default: Turn | Callable[[dict], Turn] = Turn(text="I am done.")
        self.requests: list[dict[str, Any]] = []
        self.plain: list = []  # turns for requests without tools
        self.plain_requests: list[dict[str, Any]] = []
        self.get_routes: dict[str, Any] = {}  # GET path -> JSON body (what a server's own endpoints answer); else 404
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send_json(self, status: int, obj: Any) -> None:
                payload = json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass

            def do_GET(self) -> None:
                body = server.get_routes.get(self.path.split("?")[0])
                self.send_json(200 if body is not None else 404, body if body is not None else {"detail": "Not Found"})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                body = json.loads(raw)
                with server._lock:
                    if "tools" in body:
                        server.requests.append(body)
                        item = server.script.pop(0) if server.script else server.default
                    else:
                        server.plain_requests.append(body)
                        item = server.plain.pop(0) if server.plain else NO_CODE
                    n = len(server.requests) + len(server.plain_requests)
                turn = item(body) if callable(item) else item
                if turn.delay_s:
                    time.sleep(turn.delay_s)
                if turn.error is not None:
                    self.send_json(*turn.error)
                    return
                message: dict[str, Any] = {"role": "assistant", "content": turn.text}
                if turn.calls:
                    message["tool_calls"] = [
                        {"id": f"call_{n}_{i}", "type": "function",
                         "function": {"name": name, "arguments": json.dumps(args)}}
                        for i, (name, args) in enumerate(turn.calls)
                    ]
                u = turn.usage
                if body.get("stream") is True:
                    write_sse(self, chunk_events(body.get("model", "fake"), turn.text, message.get("tool_calls", []),
                                                 u if wants_usage(body) else None,
                                                 "tool_calls" if turn.calls else "stop"))
                    return
                self.send_json(200, {
                    "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if turn.calls else "stop"}],
                    "usage": {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
                              "total_tokens": u["prompt_tokens"] + u["completion_tokens"],
                              "prompt_tokens_details": {"cached_tokens": u.get("cached_tokens", 0)}},
                })

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.api_base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fake-agent-llm", daemon=True)

    def start(self) -> FakeAgentServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def reset(self, *turns, default=None, plain=()) -> None:
        with self._lock:
            self.script = list(turns)
            self.plain = list(plain)
            self.requests.clear()
            self.plain_requests.clear()
            self.default = default or Turn(text="I am done.")
            self.get_routes.clear()

    def observations(self, request_index: int) -> list[str]:
        """The tool messages' contents in one recorded request."""
        return [m["content"] for m in self.requests[request_index]["messages"] if m.get("role") == "tool"]
