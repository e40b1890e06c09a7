"""Fork sandbox, kernel side: shared memory mappings made private in the child.

A forked child shares MAP_SHARED mappings with the kernel: a write through an `np.memmap(mode="r+")`, a
multiprocessing lock or a shared tensor would reach the kernel's memory or the real file. Before any user code
the child replaces each writable shared mapping, at the same address and with the same protection, by a
private one with the same contents:
- a file that can be opened again (same inode) is mapped MAP_PRIVATE|MAP_FIXED at the same offset
  (copy-on-write: reads see the file, writes stay in the child);
- anything else (anonymous shared memory, SysV segments, memfds, deleted files) is copied into a private
  anonymous mapping moved into place with mremap, while the total stays under a copy budget;
- what is left (too large to copy) is unmapped: an access then kills the child with SIGSEGV, which the daemon
  reports as "blocked" (the setup record counts these mappings), never as a crash.
Standard library only; runs in the forked child only.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import re
import struct
from collections.abc import Callable
from typing import Any

from crane.sandbox.kernel.confine import _libc  # kernel: strip

_PROCMAP_QUERY = 0xC0686611  # _IOWR('f', 17, struct procmap_query) (Linux >= 6.11)
_PMQ_WRITABLE, _PMQ_SHARED, _PMQ_COVERING_OR_NEXT = 0x02, 0x08, 0x10
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS = 0x02, 0x10, 0x20
_MREMAP_MAYMOVE, _MREMAP_FIXED = 1, 2
_MAP_FAILED = ctypes.c_void_p(-1).value
_MAPS_LINE = re.compile(rb"^([0-9a-f]+)-([0-9a-f]+) (r|-)(w|-)(x|-)s ([0-9a-f]+) ([0-9a-f]+):([0-9a-f]+) (\d+)\s*(.*)$", re.M)


def _query_shared() -> bool | None:
    """True/False: whether any shared mapping exists (PROCMAP_QUERY, a few syscalls); None when the
    kernel cannot answer (older than 6.11): then the caller parses /proc/self/maps."""
    try:
        fd = os.open("/proc/self/maps", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        buf = ctypes.create_string_buffer(104)
        struct.pack_into("=QQQ", buf, 0, 104, _PMQ_COVERING_OR_NEXT | _PMQ_SHARED, 0)
        if _libc.ioctl(fd, ctypes.c_ulong(_PROCMAP_QUERY), buf) == 0:
            return True
        return False if ctypes.get_errno() == _errno.ENOENT else None
    finally:
        os.close(fd)


def shared_mappings() -> list[dict]:
    """Every MAP_SHARED mapping of this process, read-only ones included (mprotect can make one writable again
    where the file or memory behind it was opened for writing): start, end, read, write, exec, offset, inode,
    path."""
    if _query_shared() is False:
        return []
    with open("/proc/self/maps", "rb") as f:
        maps = f.read()
    out = []
    for m in _MAPS_LINE.finditer(maps):
        out.append({"start": int(m.group(1), 16), "end": int(m.group(2), 16), "read": m.group(3) == b"r",
                    "write": m.group(4) == b"w", "exec": m.group(5) == b"x", "offset": int(m.group(6), 16),
                    "inode": int(m.group(9)), "path": os.fsdecode(m.group(10).strip())})
    return out


def _fns() -> tuple[Callable[..., Any], ...]:
    mmap = _libc.mmap
    mmap.restype = ctypes.c_void_p
    mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    mremap = _libc.mremap
    mremap.restype = ctypes.c_void_p
    mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    mprotect = _libc.mprotect
    mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    munmap = _libc.munmap
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return mmap, mremap, mprotect, munmap


def _remap_file(m: dict, prot: int, mmap: Callable[..., Any]) -> bool:
    path = m["path"]
    if not m["inode"] or not path.startswith("/") or path.endswith(" (deleted)"):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_ino != m["inode"]:
            return False
        addr = mmap(m["start"], m["end"] - m["start"], prot, _MAP_PRIVATE | _MAP_FIXED, fd, m["offset"])
        return addr == m["start"]
    finally:
        os.close(fd)


def _copy_private(m: dict, prot: int, mmap: Callable[..., Any], mremap: Callable[..., Any],
                  munmap: Callable[..., Any]) -> bool:
    """Copy the mapping's bytes into a private anonymous mapping and move that over the shared one."""
    size = m["end"] - m["start"]
    tmp = mmap(None, size, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if tmp in (None, _MAP_FAILED):
        return False
    if m["read"]:
        ctypes.memmove(tmp, m["start"], size)
    moved = mremap(tmp, size, size, _MREMAP_MAYMOVE | _MREMAP_FIXED, m["start"])
    if moved != m["start"]:
        munmap(tmp, size)
        return False
    if prot != _PROT_READ | _PROT_WRITE:
        _libc.mprotect(ctypes.c_void_p(m["start"]), ctypes.c_size_t(size), prot)
    return True


def privatise_shared_mappings(copy_budget: int = 256 << 20) -> dict:
    """Make every shared mapping private (see the module docstring). Returns counts: `remapped` (file,
    copy-on-write), `copied`, `unmapped` (too large to copy: an access there kills the child with SIGSEGV,
    reported as blocked; a read-only view would not do, as mprotect could make it writable again)."""
    counts = {"remapped": 0, "copied": 0, "unmapped": 0}
    maps = shared_mappings()
    if not maps:
        return counts
    mmap, mremap, mprotect, munmap = _fns()
    left = int(copy_budget)
    for m in maps:
        prot = ((_PROT_READ if m["read"] else 0) | (_PROT_WRITE if m["write"] else 0)
                | (_PROT_EXEC if m["exec"] else 0))
        size = m["end"] - m["start"]
        if _remap_file(m, prot, mmap):
            counts["remapped"] += 1
        elif size <= left and _copy_private(m, prot, mmap, mremap, munmap):
            left -= size
            counts["copied"] += 1
        elif munmap(m["start"], size) == 0:
            counts["unmapped"] += 1
        else:
            raise OSError(ctypes.get_errno(), "a shared mapping could not be made private or removed")
    return counts
