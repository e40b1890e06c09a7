"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for the LLM-layer tests.

Stdlib only (http.server in a thread). Replies are scripted: each request pops the next `Reply` from the
queue (the default reply when the queue is empty). Every request is recorded (path, headers, JSON body).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VALID_ANSWER = {
    "explanation": "df has no column 'Age' (columns: name, age), so df['Age'] raises KeyError.",
    "crash": True,
    "confidence": 0.9,
    "exception": "KeyError",
    "line": 2,
    "root_cause": "data confusion",
    "suggested_fix": "use df['age']",
}


class Reply:
    """What the server does for one request."""

    def __init__(
        self,
        content: str | None = None,
        status: int = 200,
        delay_s: float = 0.0,
        drop: bool = False,
        usage: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
        raw: bytes | None = None,
        content_type: str = "application/json",
    ):
        self.content = json.dumps(VALID_ANSWER) if content is None else content
        self.status = status
        self.delay_s = delay_s
        self.drop = drop
        self.usage = usage or {"prompt_tokens": 1000, "completion_tokens": 100, "cached_tokens": 0}
        self.headers = headers or {}
        self.body = body
        self.raw = raw  # sent as it is (e.g. an HTML page), with `content_type`
        self.content_type = content_type

    @classmethod
    def answer(cls, **fields: Any) -> Reply:
        return cls(content=json.dumps({**VALID_ANSWER, **fields}))

    @classmethod
    def error(cls, status: int, message: str = "scripted error", headers: dict[str, str] | None = None) -> Reply:
        return cls(status=status, body={"error": {"message": message, "type": "server_error", "code": status}},
                   headers=headers)


class FakeLLMServer:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.default = Reply()
        self.get_routes: dict[str, Any] = {}  # GET path -> JSON body (a local server's own endpoints); else 404
        self.gets: list[str] = []  # GET paths asked (kept apart from the chat requests)
        self.require_v1 = False  # POSTs outside /v1/ get a 404, as llama-cpp-python answers them
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                with server._lock:
                    server.gets.append(self.path)
                    body = server.get_routes.get(self.path)
                payload = json.dumps(body if body is not None else {"error": "not found"}).encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with server._lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    if server.require_v1 and not self.path.startswith("/v1/"):
                        reply = Reply(status=404, body={"detail": "Not Found"})
                    else:
                        reply = server.script.pop(0) if server.script else server.default
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.drop:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(2)
                    except OSError:
                        pass
                    return
                if reply.raw is not None:
                    payload = reply.raw
                elif reply.status != 200:
                    payload = json.dumps(reply.body or {}).encode()
                else:
                    u = reply.usage
                    payload = json.dumps(
                        {
                            "id": f"chatcmpl-{len(server.requests)}",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": (body or {}).get("model", "fake"),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": reply.content},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": u["prompt_tokens"],
                                "completion_tokens": u["completion_tokens"],
                                "total_tokens": u["prompt_tokens"] + u["completion_tokens"],
                                "prompt_tokens_details": {"cached_tokens": u.get("cached_tokens", 0)},
                            },
                        }
                    ).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("content-length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.api_base = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fake-llm", daemon=True)

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def reset(self, *replies: Reply) -> None:
        with self._lock:
            self.script = list(replies)
            self.requests.clear()
            self.default = Reply()
            self.get_routes = {}
            self.gets.clear()
            self.require_v1 = False
