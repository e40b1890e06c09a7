"""The typed export request across the transplant's boundary: the daemon's `ExportRequest` (no defaults: every call
site states each field) and the kernel side's check (`sandbox/kernel/export_request.py`, standard library only)
declare the same keys and types; the kernel side refuses a request of another shape before it reads the
namespace, and reads no default of its own."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import msgspec
import pytest

from crane.sandbox.export_request import ExportRequest, export_args
from crane.sandbox.kernel import export_request as kernel_request

from .test_request import _accepted  # the Python types a field's annotation admits (a float: an int too)


def _request(**change) -> ExportRequest:
    fields = {"dir": "/d", "token": "t", "names": ["df", "x"], "strings": [], "by_string": False, "attrs": [], "rebinds": [], "skip": [], "tag": 0, "copy_mb": 256,
              "max_s": 0.7,
              "watched_max_s": 10.0, "miniature": None}
    return ExportRequest(**{**fields, **change})


def test_both_sides_declare_the_same_keys_and_types_and_the_daemon_side_has_no_defaults():
    hints = typing.get_type_hints(ExportRequest, include_extras=False)
    fields = msgspec.structs.fields(ExportRequest)
    assert {f.encode_name: _accepted(hints[f.name]) for f in fields} == {
        k: set(v) for k, v in kernel_request.EXPORT_FIELDS.items()}
    assert all(f.required for f in fields), [f.name for f in fields if not f.required]


def test_an_encoded_request_passes_the_kernel_check_with_every_key_present():
    raw = ast.literal_eval(repr(export_args(_request(miniature={"fraction": 0.1}))))  # as the kernel receives it
    assert kernel_request.check_export_request(raw) is raw
    assert set(raw) == set(kernel_request.EXPORT_FIELDS) and raw["miniature"] == {"fraction": 0.1}


@pytest.mark.parametrize("change, word", [
    (lambda r: r.pop("max_s"), "lacks"),
    (lambda r: r.update(surprise=1), "unknown"),
    (lambda r: r.update({1: 2}), "unknown"),
    (lambda r: r.update(copy_mb="256"), "'copy_mb'"),
    (lambda r: r.update(tag=True), "'tag'"),
    (lambda r: r.update(tag=-1), "'tag'"),
    (lambda r: r.update(max_s=0), "'max_s'"),
    (lambda r: r.update(names=["a", 1]), "'names'"),
    (lambda r: r.update(skip="a"), "'skip'"),
    (lambda r: r.update(miniature=[]), "'miniature'"),
])
def test_the_kernel_side_refuses_a_request_of_another_shape(change, word):
    raw = export_args(_request())
    change(raw)
    with pytest.raises(kernel_request.ExportRequestError, match=word):
        kernel_request.check_export_request(raw)


def test_the_export_answers_a_malformed_request_before_it_reads_the_kernel():
    from crane.sandbox.kernel import export

    out = export.export({"dir": "/nowhere"})
    assert out == {"ok": False, "reason": out["reason"]} and out["reason"].startswith("bad export request: it lacks")
    assert export.export("not a dict")["reason"] == "bad export request: it is not a dict"


def test_the_export_parts_read_no_default_of_a_request_field():
    """No `req.get(...)`/`args.get(...)` with a fallback anywhere in the kernel side's export parts: a field the
    daemon did not state is refused at the edge, never replaced by a kernel-side value."""
    kernel = Path(kernel_request.__file__).parent
    for part in ("export.py", "stops.py", "pickling.py", "environment.py", "proof.py", "bound.py"):
        tree = ast.parse((kernel / part).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("req", "args", "request"):
                pytest.fail(f"{part}:{node.lineno} reads a request field with a default")
