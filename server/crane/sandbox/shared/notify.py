"""Seccomp user notifications for network sockets, answered on both sides of the boundary.

A process of the sandbox asking for a network socket is held by the kernel until the listener answers. The
layered mode's supervisor A answers in the kernel's forked child (`kernel/layer.supervise`); the daemon answers
for blocking runs (`crane.sandbox.drain`). Standard library only (see the package's docstring).
"""

from __future__ import annotations

import ctypes
import errno
import struct
from collections.abc import Callable

_NOTIF_RECV, _NOTIF_SEND = 0xC0502100, 0xC0182101  # SECCOMP_IOCTL_NOTIF_RECV / _SEND
_FAMILIES = {2: "AF_INET", 10: "AF_INET6", 17: "AF_PACKET", 4: "AF_IPX", 5: "AF_APPLETALK", 31: "AF_BLUETOOTH"}


def answer_notification(listener: int, record: Callable[[str], object]) -> None:
    """A network socket asked for by a process of the sandbox (seccomp user notification): `record(what)` who
    tried (before the answer, so the record precedes anything the caller does next: the run is then "blocked",
    even when a program swallowed the error), then refuse it with EPERM. Nothing when the caller died
    meanwhile. Used by A (layered) and by the daemon (blocking runs, `crane.sandbox.drain`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    req = ctypes.create_string_buffer(80)
    if libc.ioctl(listener, ctypes.c_ulong(_NOTIF_RECV), req) != 0:
        return
    nid, pid = struct.unpack_from("=QI", req, 0)
    family = struct.unpack_from("=Q", req, 32)[0] & 0xFFFFFFFF
    try:
        with open(f"/proc/{pid}/comm") as f:
            who = f.read().strip()
    except OSError:
        who = "a process"
    try:
        record(f"crane sandbox: a network socket ({_FAMILIES.get(family, f'family {family}')}) is blocked: {who}")
    except OSError:
        pass
    resp = ctypes.create_string_buffer(struct.pack("=QqiI", nid, 0, -errno.EPERM, 0), 24)
    libc.ioctl(listener, ctypes.c_ulong(_NOTIF_SEND), resp)
