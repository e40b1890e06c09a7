"""Transplant export, kernel side: the daemon's `ExportRequest`, checked at the edge (standard library only).

Runs in the user's kernel (part of `_crane_transplant`, called by kernel/export.py before anything else). The
daemon declares every field once, without defaults (`crane.sandbox.export_request.ExportRequest`), and sends
them all as a Python literal (nothing is parsed in the kernel). Here each key's accepted types are listed
(tests/sandbox keep them equal to the Struct's); a request that lacks a key, has one of another type (compared by
identity: no `==` or `isinstance` runs), or has an unknown key is refused with a message naming it. The export
then reads `req[key]`, never a default of its own.
"""

from __future__ import annotations

_NONE_TYPE = type(None)
EXPORT_FIELDS: dict[str, tuple[type, ...]] = {
    "dir": (str,),
    "token": (str,),
    "names": (list,),
    "strings": (list,),
    "by_string": (bool,),
    "attrs": (list,),
    "rebinds": (list,),
    "skip": (list,),
    "tag": (int,),
    "copy_mb": (int,),
    "max_s": (float, int),
    "watched_max_s": (float, int),
    "miniature": (dict, _NONE_TYPE),
}
_STRING_LISTS = ("names", "strings", "attrs", "rebinds", "skip")
_NOT_NEGATIVE = ("tag", "copy_mb")
_POSITIVE = ("max_s", "watched_max_s")


class ExportRequestError(ValueError):
    """The daemon's export request does not have the declared shape."""


def check_export_request(raw: object) -> dict:
    """`raw` when it has exactly the declared keys with values of their types (`ExportRequestError` otherwise)."""
    if type(raw) is not dict:
        raise ExportRequestError("it is not a dict")
    missing = [k for k in EXPORT_FIELDS if k not in raw]
    unknown = [k if type(k) is str else "?" for k in dict.keys(raw) if type(k) is not str or k not in EXPORT_FIELDS]
    if missing or unknown:
        raise ExportRequestError(f"it lacks {missing} / has unknown keys {unknown}")
    for key, types in EXPORT_FIELDS.items():
        t = type(raw[key])
        if not any(t is k for k in types):
            raise ExportRequestError(f"its {key!r} is a {t.__name__}")
    for key in _STRING_LISTS:
        if not all(type(x) is str for x in list.__iter__(raw[key])):
            raise ExportRequestError(f"its {key!r} are not all strings")
    for key in _NOT_NEGATIVE:
        if raw[key] < 0:
            raise ExportRequestError(f"its {key!r} is negative")
    for key in _POSITIVE:
        if not raw[key] > 0:
            raise ExportRequestError(f"its {key!r} is not positive")
    return raw
