"""Fork sandbox, kernel side: the kernel's open file descriptors made private in the child.

The forked child inherits the kernel's descriptors (ZMQ sockets, files the user opened in earlier cells). Each
one >= 3 is replaced, at the same number and with the same close-on-exec flag, by a private descriptor that
behaves like it without reaching what the kernel holds:
- a regular file opened for reading: opened again (a new open file description at the same offset, so the
  kernel's offset and locks are untouched);
- a regular file opened for writing: a private in-memory copy (a memfd with the file's contents when it is
  open for reading too, the same size and offset and O_APPEND flag), for files up to 1 MiB while a copy budget
  lasts; larger ones (IPython's history database, an open HDF5 or SQLite file) are opened again read-only
  ("degraded": reads see the file, a write fails with EBADF, which the run reports as blocked);
- a directory: opened again read-only; an O_PATH descriptor is kept (it cannot read or write);
- the harmless character devices (/dev/null, zero, random, urandom, full): opened again;
- everything else (sockets, pipes, ttys, eventfd/epoll, ...): /dev/null opened read-write, so a write is
  discarded and a read sees end-of-file.
Standard library only; runs in the forked child only.
"""

from __future__ import annotations

import fcntl
import os
import stat

_PATH_FLAG = getattr(os, "O_PATH", 0o10000000)
_MEM_DEVICES = {(1, 3), (1, 5), (1, 7), (1, 8), (1, 9)}  # null, zero, full, random, urandom
_CHUNK = 1 << 20


def _reopen(fd: int, flags: int) -> int:
    return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)


def _memfd_copy(fd: int, size: int, flags: int, with_contents: bool) -> int:
    """A memfd of `size` bytes (holding the file's bytes when `with_contents`), reopened with the access mode
    and O_APPEND flag of `flags`, positioned at the original descriptor's offset."""
    mem = os.memfd_create("crane-sandbox-private", os.MFD_CLOEXEC)
    try:
        if with_contents:
            off = 0
            while off < size:
                chunk = os.pread(fd, min(_CHUNK, size - off), off)
                if not chunk:
                    break
                os.write(mem, chunk)
                off += len(chunk)
        os.ftruncate(mem, size)
        new = os.open(f"/proc/self/fd/{mem}", (flags & (os.O_ACCMODE | os.O_APPEND)) | os.O_CLOEXEC)
    finally:
        os.close(mem)
    return new


def privatise_descriptors(copy_budget: int = 8 << 20, copy_file_limit: int = 1 << 20, keep: tuple = ()) -> dict:
    """Replace every inherited descriptor >= 3 but `keep` (CRANE's own: see the module docstring). Returns counts by
    treatment."""
    counts = {"reopened": 0, "copied": 0, "sunk": 0, "kept": 0, "degraded": 0}
    sink = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    left = int(copy_budget)
    try:
        for fd in sorted(int(x) for x in os.listdir("/proc/self/fd")):
            if fd < 3 or fd == sink or fd in keep:
                continue
            try:
                st = os.fstat(fd)
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
                inheritable = os.get_inheritable(fd)
            except OSError:
                continue  # the directory listing's own descriptor, already closed
            new = -1
            mode = st.st_mode
            try:
                if flags & _PATH_FLAG:
                    counts["kept"] += 1
                    continue
                if stat.S_ISREG(mode):
                    pos = os.lseek(fd, 0, os.SEEK_CUR)
                    access = flags & os.O_ACCMODE
                    if access == os.O_RDONLY:
                        try:
                            new = _reopen(fd, os.O_RDONLY)
                            counts["reopened"] += 1
                        except OSError:
                            if st.st_size > left:
                                raise
                            new = _memfd_copy(fd, st.st_size, flags, True)
                            left -= st.st_size
                            counts["copied"] += 1
                    else:
                        readable = access == os.O_RDWR
                        need = st.st_size if readable else 0
                        if need <= min(left, copy_file_limit):
                            new = _memfd_copy(fd, st.st_size, flags, readable)
                            left -= need
                            counts["copied"] += 1
                        else:
                            new = _reopen(fd, os.O_RDONLY)
                            counts["degraded"] += 1
                    os.lseek(new, pos, os.SEEK_SET)
                elif stat.S_ISDIR(mode):
                    new = _reopen(fd, os.O_RDONLY | os.O_DIRECTORY)
                    counts["reopened"] += 1
                elif stat.S_ISCHR(mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) in _MEM_DEVICES:
                    new = _reopen(fd, flags & (os.O_ACCMODE | os.O_APPEND))
                    counts["reopened"] += 1
            except OSError:
                if new >= 0:
                    os.close(new)
                new = -1
                if stat.S_ISREG(mode):
                    counts["degraded"] += 1
            if new < 0:
                os.dup2(sink, fd, inheritable=inheritable)
                counts["sunk"] += 1
            else:
                os.dup2(new, fd, inheritable=inheritable)
                os.close(new)
    finally:
        os.close(sink)
    return counts


def reopen_through_mounts(skip: set) -> dict:
    """Layered mode, in B after its mounts: the regular files and directories still open at the numbers the
    kernel had them are opened again *by path*, so they resolve through B's own mounts (read-only outside the
    layers, the overlay inside one) instead of the kernel's writable ones: chmod, chown, utime, xattr or a
    dir_fd-relative change through one of them then fails (EROFS) or stays in the layer. A descriptor whose path
    B cannot open again (out of reach of its mount namespace) is replaced by /dev/null; an unlinked file, one
    whose path now names another file, the private copies (memfds) and `skip` (the sandbox's own channels) are
    left as they are. Returns counts."""
    counts = {"reopened": 0, "kept": 0, "lost": 0}
    for fd in sorted(int(x) for x in os.listdir("/proc/self/fd")):
        if fd < 3 or fd in skip:
            continue
        try:
            st = os.fstat(fd)
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            inheritable = os.get_inheritable(fd)
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        mode = st.st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)) or not path.startswith("/") or path.startswith("/memfd:"):
            continue
        if path.endswith(" (deleted)"):  # unlinked (a TemporaryFile): no path reaches it, keep it readable
            counts["kept"] += 1
            continue
        new = -1
        try:
            if flags & _PATH_FLAG:
                new = os.open(path, _PATH_FLAG | os.O_CLOEXEC)
            elif stat.S_ISDIR(mode):
                new = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            else:
                new = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                os.lseek(new, os.lseek(fd, 0, os.SEEK_CUR), os.SEEK_SET)
            again = os.fstat(new)
            if not (again.st_ino == st.st_ino or (again.st_size, again.st_mtime_ns) == (st.st_size, st.st_mtime_ns)):
                os.close(new)  # the path names another file now (replaced since it was opened): keep the old one
                counts["kept"] += 1
                continue
            counts["reopened"] += 1
        except OSError:
            if new >= 0:
                os.close(new)
            new = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            counts["lost"] += 1
        os.dup2(new, fd, inheritable=inheritable)
        os.close(new)
    return counts
