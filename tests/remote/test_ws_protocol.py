"""The kernel websocket wire formats and server URLs, without a server."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from crane.kernel.target import KernelTarget, ServerSpec, ServerSpecError, kernel_id_from_connection_file
from crane.kernel.ws_protocol import decode_json, decode_v1, encode_json, encode_v1


def _msg(**content):
    return {"header": {"msg_id": "m1", "msg_type": "execute_request", "session": "s", "date": "2024-01-01T00:00:00Z"},
            "parent_header": {}, "metadata": {}, "content": content}


def test_v1_round_trip_matches_jupyter_server():
    from jupyter_server.services.kernels.connection.base import deserialize_msg_from_ws_v1

    data = encode_v1("shell", _msg(code="1+1", silent=True))
    channel, parts = deserialize_msg_from_ws_v1(data)  # the server's own decoder
    assert channel == "shell" and json.loads(parts[3]) == {"code": "1+1", "silent": True}
    ch, msg = decode_v1(data)
    assert ch == "shell" and msg["msg_type"] == "execute_request" and msg["msg_id"] == "m1"
    assert msg["content"] == {"code": "1+1", "silent": True} and msg["buffers"] == []


def test_v1_decodes_server_frames_with_buffers():
    from jupyter_server.services.kernels.connection.base import serialize_msg_to_ws_v1

    frames: tuple[dict[str, Any], ...] = ({"msg_id": "x", "msg_type": "display_data"}, {"msg_id": "p"}, {},
                                          {"data": {}})
    parts = [json.dumps(p).encode() for p in frames]
    ch, msg = decode_v1(serialize_msg_to_ws_v1(parts + [b"\x00\x01"], "iopub"))
    assert ch == "iopub" and msg["parent_header"] == {"msg_id": "p"} and msg["buffers"] == [b"\x00\x01"]


def test_json_protocol_text_and_binary():
    from jupyter_server.services.kernels.connection.base import serialize_binary_message

    text = encode_json("control", _msg(a=1))
    assert json.loads(text)["channel"] == "control"
    ch, msg = decode_json(text, binary=False)
    assert ch == "control" and msg["content"] == {"a": 1}
    binary = serialize_binary_message({**_msg(b=2), "channel": "iopub", "buffers": [b"abc"]})
    ch, msg = decode_json(binary, binary=True)
    assert ch == "iopub" and msg["content"] == {"b": 2} and msg["buffers"] == [b"abc"]


@pytest.mark.parametrize("data", [b"", b"\x01" * 7, struct.pack("<Q", 99) + b"\x00" * 16,
                                  struct.pack("<7Q", 6, 56, 60, 58, 59, 60, 61) + b"shel"])
def test_malformed_v1_frames_raise_value_error(data):
    with pytest.raises(ValueError):
        decode_v1(data)


def test_malformed_json_frames_raise_value_error():
    for data, binary in (("not json", False), ("[1, 2]", False), (b"\x00\x00", True)):
        with pytest.raises(ValueError):
            decode_json(data, binary=binary)


def test_server_spec_parses_urls_as_users_paste_them():
    s = ServerSpec.parse("https://hub.example.org/user/alice/lab/tree/x.ipynb?token=abc", env={})
    assert s.url == "https://hub.example.org/user/alice/" and s.token == "abc" and s.secure
    assert s.channels_url("k-1", "s 1") == "wss://hub.example.org/user/alice/api/kernels/k-1/channels?session_id=s+1"
    assert ServerSpec.parse("http://127.0.0.1:8888", env={"JUPYTER_TOKEN": "t"}).token == "t"
    assert ServerSpec.parse("http://127.0.0.1:8888/api/", token="x", env={"JUPYTER_TOKEN": "t"}).token == "x"
    assert ServerSpec.parse("http://h:1/base/api", env={}).api("kernels", "a/b") == "http://h:1/base/api/kernels/a%2Fb"
    assert "abc" not in repr(s) and "abc" not in str(s) and "abc" not in s.display
    for bad in ("", "localhost:8888", "ftp://h/", "http:///x", "http://h:99999/"):
        with pytest.raises(ServerSpecError):
            ServerSpec.parse(bad, env={})


def test_kernel_targets():
    assert kernel_id_from_connection_file("/run/jupyter/kernel-0b0c2d6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e.json") == \
        "0b0c2d6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e"
    assert kernel_id_from_connection_file("/tmp/kernel-v3abc.json") is None
    t = KernelTarget.remote(ServerSpec.parse("http://h:1/", token="secret", env={}), "abc-1")
    assert t.is_remote and t.describe() == "remote kernel (http://h:1/)" and "secret" not in repr(t)
    with pytest.raises(ValueError):
        KernelTarget.remote(ServerSpec.parse("http://h:1/", env={}), "../etc")
    with pytest.raises(ValueError):
        KernelTarget()
