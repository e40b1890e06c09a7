"""The typed request across the sandbox's boundary: the daemon's `SandboxRequest` and the kernel side's check
(`sandbox/kernel/request.py`, standard library only) declare the same keys and types, and the kernel side refuses
a request of another shape before any fork."""

from __future__ import annotations

import json
import types
import typing

import msgspec
import pytest

from crane.sandbox.kernel import request as kernel_request
from crane.sandbox.request import SandboxRequest, encode_request

_PY = {str: str, int: int, float: float, bool: bool, list: list, dict: dict, type(None): type(None)}


def _accepted(annotation) -> set[type]:
    """The Python types a field's annotation admits on the wire (a float also accepts an int)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        out: set[type] = set()
        for arg in typing.get_args(annotation):
            out |= _accepted(arg)
        return out
    if origin is typing.Literal:
        return {type(a) for a in typing.get_args(annotation)}
    if origin is not None:
        return {origin}
    return {int, float} if annotation is float else {annotation}


def test_both_sides_declare_the_same_keys_and_types():
    hints = typing.get_type_hints(SandboxRequest, include_extras=False)
    fields = {f.encode_name: hints[f.name] for f in msgspec.structs.fields(SandboxRequest)}
    assert set(fields) == set(kernel_request.REQUEST_FIELDS)
    for name, annotation in fields.items():
        assert _accepted(annotation) == set(kernel_request.REQUEST_FIELDS[name]), name
    for name, choices in kernel_request.REQUEST_CHOICES.items():
        assert set(typing.get_args(fields[name])) == set(choices), name


def test_an_encoded_request_passes_the_kernel_check_with_every_key_present():
    req = SandboxRequest(dir="/d", scratch="/d/s", token="t", source="x = 1", miniature={"rows": 3})
    raw = kernel_request.decode_request(encode_request(req))
    assert raw["source"] == "x = 1" and raw["cpu_s"] is None and raw["layer"] == "auto"
    assert set(raw) == set(kernel_request.REQUEST_FIELDS)


@pytest.mark.parametrize("change, word", [
    (lambda r: r.pop("budget_s"), "lacks"),
    (lambda r: r.update(surprise=1), "unknown"),
    (lambda r: r.update(memory_mb="2048"), "'memory_mb'"),
    (lambda r: r.update(idle=1), "'idle'"),
    (lambda r: r.update(max_processes=True), "'max_processes'"),
    (lambda r: r.update(layer="none"), "'layer'"),
    (lambda r: r.update(places=[1]), "'places'"),
])
def test_the_kernel_side_refuses_a_request_of_another_shape(change, word):
    raw = json.loads(encode_request(SandboxRequest(dir="/d", scratch="/d/s", token="t")))
    change(raw)
    with pytest.raises(kernel_request.RequestError, match=word):
        kernel_request.check_request(raw)


def test_the_fork_entry_answers_unavailable_for_a_malformed_request():
    from crane.sandbox.kernel import entry

    out = entry.start(json.dumps({"dir": "/nowhere"}))
    assert out["ok"] is False and out["verdict"] == "unavailable" and "lacks" in out["reason"]
    out = entry.start("not json")
    assert out["ok"] is False and "not JSON" in out["reason"]
