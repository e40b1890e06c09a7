"""Fork sandbox, kernel side: the daemon's `SandboxRequest`, checked at the edge (standard library only).

The daemon declares every key and default once (`crane.sandbox.request.SandboxRequest`) and sends every field.
Here each key's name and accepted types are listed (tests/sandbox keep them equal to the Struct's), and a request
that lacks one, has one of another type, or has an unknown key is refused with a message naming it, before any
fork. The parts read `args[key]`, never a default of their own.
"""

from __future__ import annotations

import json

_NONE = type(None)
REQUEST_FIELDS: dict[str, tuple[type, ...]] = {
    "dir": (str,),
    "scratch": (str,),
    "token": (str,),
    "mode": (str,),
    "source": (str,),
    "budget_s": (float, int),
    "cpu_s": (float, int, _NONE),
    "memory_mb": (int,),
    "file_mb": (int,),
    "layer_mb": (int,),
    "output_limit": (int,),
    "layer": (str,),
    "places": (list,),
    "idle": (bool,),
    "max_processes": (int,),
    "miniature": (dict, _NONE),
    "notify": (str, _NONE),
    "channel": (str,),
    "remote_ok": (bool,),
    "run_id": (str, _NONE),
    "confinement": (str,),
    "portable_reason": (str, _NONE),
    "os_layers": (list,),
    "vm_floor_mb": (int,),
}
REQUEST_CHOICES = {"mode": ("run", "session"), "layer": ("auto", "blocking"), "channel": ("local", "remote"),
                   "confinement": ("os", "portable", "guard")}


class RequestError(ValueError):
    """The daemon's request does not have the declared shape."""


def check_request(raw: object) -> dict:
    """`raw` (a decoded JSON object) when it has exactly the declared keys with values of their types."""
    if type(raw) is not dict:
        raise RequestError("the sandbox request is not a JSON object")
    missing = [k for k in REQUEST_FIELDS if k not in raw]
    unknown = [k for k in raw if k not in REQUEST_FIELDS]
    if missing or unknown:
        raise RequestError(f"the sandbox request lacks {missing} / has unknown keys {unknown}")
    for key, types in REQUEST_FIELDS.items():
        value = raw[key]
        if type(value) not in types or (type(value) is bool and bool not in types):
            raise RequestError(f"the sandbox request's {key!r} is a {type(value).__name__}")
        if key in REQUEST_CHOICES and value not in REQUEST_CHOICES[key]:
            raise RequestError(f"the sandbox request's {key!r} is {value!r}")
    if not all(type(p) is str for p in raw["places"]):
        raise RequestError("the sandbox request's 'places' are not all strings")
    return raw


def decode_request(text: str) -> dict:
    """The daemon's request JSON, checked (RequestError when it does not have the declared shape)."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise RequestError(f"the sandbox request is not JSON: {exc}") from None
    return check_request(raw)
