"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for the LLM-layer tests.

Stdlib only (http.server in a thread). Replies are scripted: each request pops the next `Reply` from the
queue (the default reply when the queue is empty). Every request is recorded (path, headers, JSON body).
A request with `"stream": true` is answered as an event stream (sse_stream.py), as real servers do; a `Reply`'s
`stream` mode scripts the other behaviours of a local server: "json" ignores `stream` (a plain JSON body),
"reject" refuses it (HTTP 400 naming streaming), "silent" accepts the request and never sends a byte (GET
requests are still answered: the server is alive), "stall" sends the role and `stall_after`
pieces of the text and then nothing, "broken" sends the event stream's headers and closes the connection (as
llama-cpp-python does when its chat template raises after the headers went out).
Held requests end when the server is reset or stopped. `model_lock` makes GET /v1/models wait while a chat
request is being answered, as llama-cpp-python's server does (its /v1/models takes the model's lock).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .sse_stream import chunk_events, wants_usage, write_sse

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
        stream: str = "sse",
        stall_after: int = 1,
        stream_usage: bool = True,
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
        if stream not in ("sse", "json", "reject", "silent", "stall", "broken"):
            raise ValueError(f"unknown stream mode {stream!r}")
        self.stream = stream  # what the server does with a request (see the module's docstring)
        self.stall_after = stall_after  # "stall": pieces of text sent before it stops (0: only the role)
        self.stream_usage = stream_usage  # False: no usage event even when asked (llama-cpp-python sends none)

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
        self._release = threading.Event()  # set: held ("silent", "stall") requests end
        self.model_lock = False  # GET /v1/models waits for the chat requests being answered (llama-cpp-python)
        self._answering = 0
        self._idle = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                if server.model_lock and self.path.rstrip("/").endswith("/v1/models"):
                    with server._idle:
                        server._idle.wait_for(lambda: server._answering == 0 or server._release.is_set(), 60)
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
                with server._idle:
                    server._answering += 1
                try:
                    self._post()
                finally:
                    with server._idle:
                        server._answering -= 1
                        server._idle.notify_all()

            def _post(self):
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with server._lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                            "at": time.monotonic()})  # when it came (the system's monotonic clock)
                    if server.require_v1 and not self.path.startswith("/v1/"):
                        reply = Reply(status=404, body={"detail": "Not Found"})
                    else:
                        reply = server.script.pop(0) if server.script else server.default
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                streamed = isinstance(body, dict) and body.get("stream") is True
                if reply.stream == "silent":  # accepted, never answered
                    server._release.wait()
                    self.close_connection = True
                    return
                if streamed and reply.stream == "broken":
                    self.close_connection = True
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    self.wfile.flush()
                    return
                if streamed and reply.stream == "reject":
                    reply = Reply.error(400, "streaming is not supported by this server (stream=true)")
                elif streamed and reply.stream in ("sse", "stall") and reply.status == 200 and reply.raw is None \
                        and not reply.drop:
                    events = chunk_events((body or {}).get("model", "fake"), reply.content, [],
                                          reply.usage if wants_usage(body) and reply.stream_usage else None, "stop")
                    write_sse(self, events, stall_after=reply.stall_after if reply.stream == "stall" else None,
                              release=server._release)
                    return
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
        self._release.set()
        with self._idle:
            self._idle.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def reset(self, *replies: Reply) -> None:
        with self._lock:
            self._release.set()  # requests held by the last test end
            with self._idle:
                self._idle.notify_all()
            self._release = threading.Event()
            self.model_lock = False
            self.script = list(replies)
            self.requests.clear()
            self.default = Reply()
            self.get_routes = {}
            self.gets.clear()
            self.require_v1 = False
