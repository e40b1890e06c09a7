"""Kernel messages on jupyter_server's kernel channels websocket: both wire formats, pure functions.

- `v1.kernel.websocket.jupyter.org` (binary frames; what CRANE asks for): 8-byte little-endian count `n`, then
  `n` little-endian 8-byte offsets, then the channel name, header, parent_header, metadata, content and any
  buffers, each part from its offset to the next. The server passes the parts to the kernel unparsed (it only
  signs them), so replies cost it no JSON work.
- the legacy JSON protocol (no subprotocol; older servers and gateways): one JSON text frame per message with a
  `channel` key; a message with binary buffers comes as a binary frame: big-endian uint32 count, uint32 offsets,
  the JSON part, then the buffers.

Incoming messages are returned in jupyter_client's dict shape (`header`, `parent_header`, `metadata`,
`content`, `buffers`, `msg_id`, `msg_type`), dates left as ISO strings. Malformed frames raise `ValueError`.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import msgspec

V1_PROTOCOL = "v1.kernel.websocket.jupyter.org"
CHANNELS = ("shell", "iopub", "stdin", "control")

_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


def _json_default(obj: Any) -> Any:
    isoformat = getattr(obj, "isoformat", None)
    if isoformat is not None:  # datetimes in jupyter_client's headers
        return isoformat()
    raise TypeError(f"cannot send {type(obj).__name__} in a kernel message")


def _pack(obj: Any) -> bytes:
    try:
        return _encode.encode(obj)
    except TypeError:
        return json.dumps(obj, default=_json_default).encode()


def _dict(raw: bytes) -> dict:
    value = _decode.decode(raw) if raw else {}
    if not isinstance(value, dict):
        raise ValueError("a kernel message part is not a JSON object")
    return value


def _shaped(channel: str, header: dict, parent: dict, metadata: dict, content: dict, buffers: list) -> tuple[str, dict]:
    return channel, {
        "header": header, "parent_header": parent, "metadata": metadata, "content": content, "buffers": buffers,
        "msg_id": header.get("msg_id"), "msg_type": header.get("msg_type"),
    }


def encode_v1(channel: str, msg: dict) -> bytes:
    parts = [channel.encode(), _pack(msg["header"]), _pack(msg.get("parent_header") or {}),
             _pack(msg.get("metadata") or {}), _pack(msg.get("content") or {})]
    parts += [bytes(b) for b in msg.get("buffers") or ()]
    offsets = [8 * (1 + len(parts) + 1)]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    head = struct.pack(f"<{len(offsets) + 1}Q", len(offsets), *offsets)
    return head + b"".join(parts)


def decode_v1(data: bytes) -> tuple[str, dict]:
    try:
        (n,) = struct.unpack_from("<Q", data, 0)
        if not 6 <= n <= 1 + 5 + 4096 or len(data) < 8 * (n + 1):
            raise ValueError(f"bad part count {n}")
        offsets = struct.unpack_from(f"<{n}Q", data, 8)
        if list(offsets) != sorted(offsets) or offsets[-1] > len(data):
            raise ValueError("bad offsets")
        parts = [data[offsets[i]:offsets[i + 1]] for i in range(n - 1)]
        channel = parts[0].decode()
        return _shaped(channel, _dict(parts[1]), _dict(parts[2]), _dict(parts[3]), _dict(parts[4]), parts[5:])
    except (struct.error, UnicodeDecodeError, msgspec.DecodeError, IndexError) as exc:
        raise ValueError(f"malformed v1 kernel message: {exc}") from None


def encode_json(channel: str, msg: dict) -> str:
    if msg.get("buffers"):
        raise ValueError("the JSON protocol sends no buffers from CRANE")
    out = {"header": msg["header"], "parent_header": msg.get("parent_header") or {},
           "metadata": msg.get("metadata") or {}, "content": msg.get("content") or {}, "channel": channel,
           "buffers": []}
    return _pack(out).decode()


def decode_json(data: str | bytes, binary: bool) -> tuple[str, dict]:
    try:
        buffers: list[bytes] = []
        if isinstance(data, str):
            raw = data.encode()
        elif binary:
            (n,) = struct.unpack_from("!I", data, 0)
            offsets = list(struct.unpack_from(f"!{n}I", data, 4)) + [len(data)]
            raw = data[offsets[0]:offsets[1]]
            buffers = [data[offsets[i]:offsets[i + 1]] for i in range(1, n)]
        else:
            raw = data
        msg = _dict(raw)
        return _shaped(str(msg.get("channel") or "shell"), msg.get("header") or {}, msg.get("parent_header") or {},
                       msg.get("metadata") or {}, msg.get("content") or {}, buffers)
    except (struct.error, UnicodeDecodeError, msgspec.DecodeError, IndexError, TypeError) as exc:
        raise ValueError(f"malformed kernel message: {exc}") from None
