"""A recording proxy between CRANE and a local OpenAI-compatible model server: every exchange is forwarded
unchanged and appended to a JSON-lines file, one object a line (`model`, `status`, `seconds`, `request`,
`response`), the format of ../shared/llm-replies/replies.jsonl and of the replay fixtures under tests/llm/.

    .venv/bin/python benchmarks/llm_record_proxy.py --upstream http://127.0.0.1:8080 --port 8081 \\
        --out /tmp/replies.jsonl &
    crane check nb.ipynb --mode llm --model openai/qwen2.5-coder-0.5b --api-base http://127.0.0.1:8081/v1

GET requests (the server probes of crane.llm.local_server, /v1/models) are forwarded and not recorded.
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

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            start = time.monotonic()
            try:
                status, data, ctype = self._forward(body)
            except (urllib.error.URLError, OSError) as exc:
                status, data, ctype = 504, json.dumps({"error": f"upstream: {exc}"}).encode(), "application/json"
            seconds = round(time.monotonic() - start, 2)
            try:
                request = json.loads(body or b"null")
            except ValueError:
                request = body.decode("utf-8", "replace")
            try:
                response = json.loads(data or b"null")
            except ValueError:
                response = data.decode("utf-8", "replace")
            model = request.get("model") if isinstance(request, dict) else None
            line = json.dumps({"model": model, "status": status, "seconds": seconds, "path": self.path,
                               "request": request, "response": response})
            with lock, open(out_path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
            print(f"{self.path} {status} {seconds:.1f} s", file=sys.stderr, flush=True)
            try:
                self._reply(status, data, ctype)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout): still recorded
                pass

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
