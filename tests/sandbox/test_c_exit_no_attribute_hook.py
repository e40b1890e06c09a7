"""Review L2 (round 11): kernel/common._c_exit tells the C `_exit` by its type before reading any attribute.

`_real_exit` asks `_c_exit` about whatever `posix._exit` is now; the notebook can replace it with an object whose
class reads attributes with code of its own. `getattr(fn, "__self__", None)` came first and ran that code (inside
CRANE's outcome path); the exact builtin-function type is now checked first, and nothing else is read of any
other object.
"""

from __future__ import annotations

import os

from crane.sandbox.kernel.common import _c_exit


class _Hooked:
    """Records every attribute read (its class's `__getattribute__` and `__getattr__`)."""

    reads: list[str] = []

    def __getattribute__(self, name: str):
        _Hooked.reads.append(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str):
        _Hooked.reads.append(name)
        raise AttributeError(name)

    def __call__(self, code: int) -> None:  # (stands in for `_exit`)
        return None


def test_a_replaced_exit_s_attribute_hooks_never_run():
    _Hooked.reads.clear()
    assert not _c_exit(_Hooked())
    assert _Hooked.reads == []  # (before: ['__self__', '__self__'])


def test_the_c_exit_is_still_told():
    assert _c_exit(os._exit)
    assert not _c_exit(len) and not _c_exit(lambda code: None)
