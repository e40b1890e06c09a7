"""The seal (issue 41; docs/sandbox.md, "Who writes the verdict"): made by a run's process, read by its parent.

Runs on every side: in the user's kernel and its forked children and in transplant workers (a part of
`_crane_sandbox`, before kernel/common.py), and in the daemon (copy_seal.py, assemble.py). Standard library only.
A process whose record (or reply) is out blocks in a raw read(2) whose unused argument registers carry
`SEAL_MAGIC`, a code saying how its cell (or command) ended — from CRANE's control flow — and the digest of every
byte CRANE wrote on the channel. Its parent reads that from outside in /proc/<pid>/syscall (`read_seal`) and
ends it, or answers it. No function of the standard library makes a raw system call with chosen registers: pure
Python cannot seal (ctypes can: docs/sandbox.md).
"""

from __future__ import annotations

import errno
import os
from hashlib import blake2b as _SEAL_HASH
from typing import Any, NoReturn

SEAL_MAGIC = 0x4352414E45534541
# how the cell or command ended: clean, raised, ended its process, changed CRANE's code, a record without a cell
SEAL_CLEAN, SEAL_RAISED, SEAL_ENDS, SEAL_TAMPERED, SEAL_RECORD = 1, 2, 3, 4, 5


def seal_digest(data: bytes) -> int:
    """The seal's digest of `data` (blake2b, 8 bytes, little-endian), by the hash bound when this module was loaded
    (never a `hashlib` a cell rebinds later)."""
    return int.from_bytes(_SEAL_HASH(data, digest_size=8).digest(), "little")


def read_seal(pid: int, refused: bool | None = None) -> tuple[int, int] | None | bool:
    """From outside (the parent): (code, digest) when a thread of process `pid` is in CRANE's sealed wait (the main
    thread's is looked at first; the cell may end its process from another thread); None when none is (running,
    elsewhere, gone); False when this process may not read its /proc/<pid>/syscall (EACCES/EPERM: Yama, an LSM).
    `refused` is what any other failed read of an existing process's file means: None (the kernel side: as if not
    sealed) or False (the daemon: unchecked, `copy_seal`)."""
    found = _seal_at(f"/proc/{pid}/syscall", refused)
    if found is not None:
        return found
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        if tid != str(pid):
            found = _seal_at(f"/proc/{pid}/task/{tid}/syscall", refused)
            if found:
                return found
    return None


def _seal_at(path: str, refused: bool | None) -> tuple[int, int] | None | bool:
    try:
        with open(path, "rb") as f:
            fields = f.read().split()
    except PermissionError:
        return False
    except OSError as exc:  # gone (ENOENT, ESRCH), or refused otherwise: the caller's `refused`
        return None if exc.errno in (errno.ENOENT, errno.ESRCH) else refused
    try:
        if len(fields) >= 7 and int(fields[0]) == 0 and int(fields[6], 16) == SEAL_MAGIC:
            return int(fields[4], 16), int(fields[5], 16)
    except ValueError:
        pass
    return None


def _seal_parts(pipe: bool = True) -> tuple[Any, int, Any]:
    """What a sealed wait needs, made now: (libc's syscall, a pipe's read end nobody writes — its write end stays
    open, so no EOF ends the wait; -1 without `pipe` —, a 1-byte buffer)."""
    import ctypes
    fn = ctypes.CDLL(None, use_errno=True).syscall
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                   ctypes.c_ulong]
    r = os.pipe()[0] if pipe else -1
    return fn, r, ctypes.create_string_buffer(1)


def wait_sealed(code: int, digest: int, done_fd: int = -1) -> NoReturn:
    """Seal with `code` over `digest` and wait, for good, to be ended by the parent; `done_fd` (when >= 0) wakes
    the parent first (then it looks in /proc). The wait is made ready before the wake-up."""
    fn, r, buf = _seal_parts()
    if done_fd >= 0:
        try:
            os.write(done_fd, b"d")
        except OSError:
            pass
    while True:
        try:
            fn(0, r, buf, 1, code, digest, SEAL_MAGIC)
        except Exception:  # noqa: BLE001 - nothing to do but wait for the parent
            import time
            time.sleep(0.05)
