"""Every request answered: a line on stdio the SDK could not decode gets a JSON-RPC answer instead of silence.

The SDK's stdio transport validates each line strictly and drops one it cannot read (the client then waits for
an answer until its timeout). `answer` reads such a line again, leniently, and says what was wrong:

- not JSON at all: a parse error (-32700) with `id: null`, as JSON-RPC 2.0 says;
- JSON whose strings hold a lone UTF-16 surrogate (`"\\ud800"`: valid JSON escapes, not Unicode text): a
  `tools/call` gets a tool result with `isError` naming the argument (the model reads it and retries), any other
  request invalid params (-32602) with its id;
- JSON that is not a JSON-RPC message: invalid request (-32600), with its id when it has one.

A notification (no id) that cannot be read gets no answer (JSON-RPC answers no notification).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import mcp_types as types

log = logging.getLogger(__name__)


def _raw_line(exc: Exception) -> Any:
    """The line a pydantic ValidationError was raised for (text), or what it had decoded (a dict), or None."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return None
    try:
        first = errors()[0]
    except Exception:
        return None
    value = first.get("input")
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, (str, dict, list)) else None


def _surrogate_path(value: Any, path: str = "$") -> str | None:
    """The JSON path of the first string holding a lone surrogate, or None."""
    if isinstance(value, str):
        return path if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _surrogate_path(k, path) or _surrogate_path(v, f"{path}.{k}")
            if found:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _surrogate_path(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def answer(exc: Exception) -> types.JSONRPCMessage | None:
    """The answer to a line the transport could not decode (`exc`: its error), or None (a notification)."""
    line = _raw_line(exc)
    if line is None:
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(
            code=types.PARSE_ERROR, message=f"Parse error: {exc}"[:500]))
    try:
        msg = json.loads(line) if isinstance(line, str) else line
    except ValueError as bad:
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(
            code=types.PARSE_ERROR, message=f"Parse error: not JSON ({bad})"))
    if not isinstance(msg, dict) or "id" not in msg:
        if isinstance(msg, dict) and "method" in msg:
            log.info("dropping an unreadable notification %r", msg.get("method"))
            return None
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(
            code=types.INVALID_REQUEST, message="Invalid Request: not a JSON-RPC 2.0 message"))
    rid = msg["id"] if _valid_id(msg["id"]) else None
    where = _surrogate_path(msg)
    if where is None:
        return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(
            code=types.INVALID_REQUEST, message=f"Invalid Request: {str(exc).splitlines()[0][:300]}"))
    text = (f"{where.replace('$.params.arguments.', 'argument ')} holds a lone UTF-16 surrogate (an escape such "
            "as \\ud800 without its pair), which is not Unicode text: send valid UTF-8 text")
    if msg.get("method") == "tools/call" and rid is not None:
        result = types.CallToolResult(content=[types.TextContent(type="text", text=f"invalid arguments: {text}")],
                                      is_error=True)
        return types.JSONRPCResponse(jsonrpc="2.0", id=rid,
                                     result=result.model_dump(by_alias=True, exclude_unset=True, mode="json"))
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(
        code=types.INVALID_PARAMS, message=f"Invalid params: {text}"))
