"""A recording proxy between CRANE and a local OpenAI-compatible model server: every exchange is forwarded
unchanged and appended to a JSON-lines file, one object a line (`model`, `status`, `seconds`, `request`,
`response`), the format of ../shared/llm-replies/replies.jsonl and of the replay fixtures under tests/llm/.

    .venv/bin/python benchmarks/llm_record_proxy.py --upstream http://127.0.0.1:8080 --port 8081 \\
        --out /tmp/replies.jsonl &
    crane check nb.ipynb --mode llm --model openai/qwen2.5-coder-0.5b --api-base http://127.0.0.1:8081/v1

GET requests (the server probes of crane.llm.local_server, /v1/models) are forwarded and not recorded.
A streamed reply (`stream: true`, which CRANE sends to local servers: crane.llm.local_call) is passed on piece
by piece as the server sends it, so the client's first-token and total timeouts see the server's own timing;
it is recorded put back together (`response.choices[0].message` with the text and tool calls, `usage` when the
server sent it) with `stream: true`, `first_token_seconds` (the first piece of text or of a tool call) and,
when the client went away before the end, `abandoned: true` (the upstream connection is then closed too).
Stdlib only; not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def assemble_stream(events: list[dict]) -> dict:
    """One chat.completion from the chat.completion.chunk events of a streamed reply: the text, the tool calls
    (their arguments joined by index), the finish reason and the usage event's usage."""
    content: list[str] = []
    calls: dict[int, dict] = {}
    finish = None
    usage = None
    for ev in events:
        if isinstance(ev.get("usage"), dict):
            usage = ev["usage"]
        for choice in ev.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(int(tc.get("index") or 0), {"id": None, "type": "function",
                                                                     "function": {"name": "", "arguments": ""}})
                call["id"] = tc.get("id") or call["id"]
                fn = tc.get("function") or {}
                call["function"]["name"] += fn.get("name") or ""
                call["function"]["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message: dict = {"role": "assistant", "content": "".join(content)}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    out: dict = {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = usage
    return out


def _is_token(event: dict) -> bool:
    return any((c.get("delta") or {}).get("content") or (c.get("delta") or {}).get("tool_calls")
               for c in event.get("choices") or [])


def make_handler(upstream: str, out_path: str, lock: threading.Lock, timeout_s: float):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args) -> None:  # quiet: one line per recorded exchange instead
            pass

        def _forward(self, body: bytes | None) -> tuple[int, bytes, str]:
            req = urllib.request.Request(upstream.rstrip("/") + self.path, data=body, method=self.command,
                                         headers={"content-type": self.headers.get("content-type",
                                                                                   "application/json")})
            try:
                with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (loopback upstream)
                    return resp.status, resp.read(), resp.headers.get("content-type", "application/json")
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read(), exc.headers.get("content-type", "application/json")

        def _reply(self, status: int, data: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                self._reply(*self._forward(None))
            except (urllib.error.URLError, OSError):
                self._reply(502, b'{"error": "upstream unreachable"}', "application/json")

        def _relay_stream(self, resp, start: float) -> tuple[list[dict], float | None, bool]:
            """Pass an event stream on as it arrives; returns (its events, seconds to the first token, whether
            the client went away before the end)."""
            self.close_connection = True
            self.send_response(resp.status)
            self.send_header("content-type", resp.headers.get("content-type", "text/event-stream"))
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            events: list[dict] = []
            first = None
            for line in resp:
                try:
                    self.wfile.write(line)
                    self.wfile.flush()
                except OSError:  # the client gave up (its first-token or total timeout): stop the upstream too
                    return events, first, True
                text = line.decode("utf-8", "replace").strip()
                if text.startswith("data:") and text[5:].strip() not in ("", "[DONE]"):
                    try:
                        ev = json.loads(text[5:])
                    except ValueError:
                        continue
                    events.append(ev)
                    if first is None and _is_token(ev):
                        first = round(time.monotonic() - start, 2)
            return events, first, False

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            start = time.monotonic()
            try:
                wants_stream = json.loads(body or b"null").get("stream") is True
            except (ValueError, AttributeError):
                wants_stream = False
            if wants_stream and self._post_stream(body, start):
                return
            try:
                status, data, ctype = self._forward(body)
            except (urllib.error.URLError, OSError) as exc:
                status, data, ctype = 504, json.dumps({"error": f"upstream: {exc}"}).encode(), "application/json"
            seconds = round(time.monotonic() - start, 2)
            try:
                response = json.loads(data or b"null")
            except ValueError:
                response = data.decode("utf-8", "replace")
            self._record(body, status, seconds, response)
            try:
                self._reply(status, data, ctype)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout): still recorded
                pass

        def _post_stream(self, body: bytes, start: float) -> bool:
            """Forward a streamed request and record it; False when the upstream cannot be reached."""
            req = urllib.request.Request(upstream.rstrip("/") + self.path, data=body, method="POST",
                                         headers={"content-type": "application/json"})
            try:
                resp = urllib.request.urlopen(req, timeout=timeout_s)  # noqa: S310 (loopback upstream)
            except urllib.error.HTTPError as exc:  # an error status: recorded and passed on as it is
                data = exc.read()
                try:
                    response = json.loads(data or b"null")
                except ValueError:
                    response = data.decode("utf-8", "replace")
                self._record(body, exc.code, round(time.monotonic() - start, 2), response)
                self._reply(exc.code, data, exc.headers.get("content-type", "application/json"))
                return True
            except (urllib.error.URLError, OSError):
                return False  # the caller answers 504 (and records it)
            with resp:
                if "text/event-stream" not in resp.headers.get("content-type", ""):
                    data = resp.read()
                    seconds = round(time.monotonic() - start, 2)
                    try:
                        response = json.loads(data or b"null")
                    except ValueError:
                        response = data.decode("utf-8", "replace")
                    self._record(body, resp.status, seconds, response)
                    self._reply(resp.status, data, resp.headers.get("content-type", "application/json"))
                    return True
                events, first, abandoned = self._relay_stream(resp, start)
            seconds = round(time.monotonic() - start, 2)
            extra = {"stream": True, "first_token_seconds": first, **({"abandoned": True} if abandoned else {})}
            self._record(body, resp.status, seconds, assemble_stream(events), extra)
            return True

        def _record(self, body: bytes, status: int, seconds: float, response, extra: dict | None = None) -> None:
            try:
                request = json.loads(body or b"null")
            except ValueError:
                request = body.decode("utf-8", "replace")
            model = request.get("model") if isinstance(request, dict) else None
            line = json.dumps({"model": model, "status": status, "seconds": seconds, "path": self.path,
                               **(extra or {}), "request": request, "response": response})
            with lock, open(out_path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
            first = (extra or {}).get("first_token_seconds")
            print(f"{self.path} {status} {seconds:.1f} s" + (f" (first token {first} s)" if first else ""),
                  file=sys.stderr, flush=True)

    return Handler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", default="http://127.0.0.1:8080")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="seconds to wait for the upstream's reply")
    args = ap.parse_args(argv)
    server = ThreadingHTTPServer(("127.0.0.1", args.port),
                                 make_handler(args.upstream, args.out, threading.Lock(), args.timeout_s))
    print(f"recording {args.upstream} at http://127.0.0.1:{args.port} into {args.out}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
