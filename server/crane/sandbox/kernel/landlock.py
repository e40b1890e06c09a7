"""Landlock rulesets (Linux 5.13+, any architecture): the one place CRANE builds and applies them.

Standard library only (`ctypes`, `os`, `struct`); shipped as source in the sandbox's kernel-side module and in the
transplant worker's (kernel/common.py, worker/main.py). Used by the forked child's confinement (`kernel/confine.py`)
and by the portable worker's Linux layer (`worker/linux.py`). Nothing here runs in the user's kernel process itself.

`apply_landlock(writable, abi, ...)` restricts the calling thread (and every thread and process it starts later):
- write-type rights (write, truncate, remove, make, link across folders) only below `writable` and on `files`;
- with `hidden`: reading files only outside those paths (Landlock is an allow-list, so the read rights are granted
  on every entry of each folder on the way from `/` to a hidden path but that path and the folders leading to it:
  `read_rules`); listing folders stays allowed everywhere (names only, never contents);
- programs: exec refused everywhere (`handle_execute`), or left alone;
- TCP bind and connect refused (ABI >= 4), signals and abstract UNIX sockets scoped to the sandbox (ABI >= 6).
The landlock syscalls have the same numbers on every architecture (444-446, the unified table).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import sys
from typing import Any

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_LL_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE = 1 << 4, 1 << 5
FS_MAKE = (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
FS_REFER, FS_TRUNCATE = 1 << 13, 1 << 14
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1
_LL_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE  # what a rule on a non-directory may grant

_LL_LIBC: list = []


def _ll_syscall(*args: Any) -> int:
    if not _LL_LIBC:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        _LL_LIBC.append(lib)
    return int(_LL_LIBC[0].syscall(*args))


def _ll_check(rc: int, what: str) -> int:
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return rc


def landlock_abi() -> int:
    """The Landlock ABI version the running kernel offers (0: none, or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        rc = _ll_syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except Exception:
        return 0
    return rc if rc > 0 else 0


def _ll_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_rules(hidden: list[str] | tuple[str, ...]) -> list[str]:
    """The paths that get the read right so that every file is readable but those below `hidden` (real, absolute
    paths): every entry of each folder on the way from `/` to a hidden path, but that path and the folders on the
    way (which get none: their other entries get one each, deeper). Empty `hidden`: ["/"]."""
    hide = _hide(hidden)
    if not hide:
        return [os.sep]
    return [os.path.join(d, name) for d, names in _listings(hide).items() for name in names]


def _hide(hidden: list[str] | tuple[str, ...]) -> list[str]:
    hide = sorted({os.path.realpath(h) for h in hidden if h and os.path.isabs(h)})
    return [h for h in hide if h != os.sep]


def _listings(hide: list[str]) -> dict[str, dict[str, int]]:
    """Each folder on the way from `/` to a path of `hide` (`_hide`'s), with the entries `read_rules` grants in it:
    name -> the inode its listing names. An entry of such a folder can be below a hidden path only by being one (the
    folder itself is not below one), so only the names of the hidden paths and of the folders on the way are left
    out: no work per entry but the listing's (/tmp's ~1,800 entries are listed once per run)."""
    on_way: set[str] = set()
    for h in hide:
        d = os.path.dirname(h)
        while True:
            on_way.add(d)
            if d == os.sep:
                break
            d = os.path.dirname(d)
    skip: dict[str, list[str]] = {}
    for p in on_way.union(hide):
        if p != os.sep:
            skip.setdefault(os.path.dirname(p), []).append(os.path.basename(p))
    out: dict[str, dict[str, int]] = {}
    for d in sorted(on_way):
        if any(_ll_under(d, h) for h in hide):
            continue  # a folder on the way to one hidden path inside another
        try:
            with os.scandir(d) as entries:
                names = {e.name: e.inode() for e in entries}
        except OSError:
            continue
        for name in skip.get(d, ()):
            names.pop(name, None)
        out[d] = names
    return out


def _create_ruleset(attr: bytes) -> int:
    abuf = ctypes.create_string_buffer(attr, len(attr))
    return _ll_check(_ll_syscall(ctypes.c_long(_SYS_CREATE_RULESET), abuf, ctypes.c_size_t(len(attr)),
                                 ctypes.c_uint32(0)), "landlock_create_ruleset")


def _add_rule(rs: int, path: str, rights: int, flags: int) -> tuple[int, int] | None:
    """One rule of `rights` on `path` (opened with `flags`; a file gets only a file's rights) in ruleset `rs`: the
    (device, inode) it holds, or None where none was added (gone, a device this machine lacks, no right left)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC | flags)
    except OSError:
        return None  # a device this machine does not have, an entry gone since it was listed
    try:
        st = os.fstat(fd)
        if not flags & os.O_DIRECTORY and not stat.S_ISDIR(st.st_mode):
            rights &= _LL_FILE_RIGHTS  # a file (or a link itself): only the rights a file can have
        if not rights:
            return None
        rule = struct.pack("=Qi", rights, fd)
        rbuf = ctypes.create_string_buffer(rule, len(rule))
        rc = _ll_syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(rs), ctypes.c_int(_LL_RULE_PATH_BENEATH), rbuf,
                         ctypes.c_uint32(0))
        if rc < 0 and ctypes.get_errno() not in (errno.EINVAL, errno.EBADFD):
            _ll_check(rc, f"landlock_add_rule({path})")
        return (st.st_dev, st.st_ino) if rc >= 0 else None
    finally:
        os.close(fd)


def _restrict(rs: int) -> None:
    _ll_check(_ll_syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(rs), ctypes.c_uint32(0)),
              "landlock_restrict_self")


def apply_landlock(writable: list[str], abi: int, *, files: tuple[str, ...] = (), handle_execute: bool = True,
                   hidden: list[str] | tuple[str, ...] | None = None, network: bool = True,
                   extra: tuple[tuple[str, int], ...] = ()) -> dict:
    """Restrict the calling thread (see the module docstring). `writable`: folders where writes are allowed;
    `files`: single files writable too (/dev/null); `handle_execute`: exec refused everywhere (True) or left
    alone; `hidden` (None: reads not handled): real paths whose files cannot be read; `network`: TCP bind/connect
    refused (ABI >= 4); `extra`: more (path, rights) rules. Returns what was confined."""
    fs = FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE
    if handle_execute:
        fs |= FS_EXECUTE
    if abi >= 2:
        fs |= FS_REFER
    if abi >= 3:
        fs |= FS_TRUNCATE
    reads = hidden is not None
    if reads:
        fs |= FS_READ_FILE
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 and network else 0
    scoped = (SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL) if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", fs, net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", fs, net)
    else:
        attr = struct.pack("=Q", fs)
    rs = _create_ruleset(attr)
    added = 0
    try:
        write_dir = fs & ~FS_EXECUTE
        write_file = fs & (FS_WRITE_FILE | FS_TRUNCATE | FS_READ_FILE)
        rules: list[tuple[str, int, int]] = [(d, write_dir, os.O_DIRECTORY) for d in writable]
        rules += [(f, write_file, 0) for f in files]
        if reads:
            rules += [(p, FS_READ_FILE, os.O_NOFOLLOW) for p in read_rules(list(hidden or ()))]
        rules += [(p, r & fs, 0) for p, r in extra]
        for path, rights, flags in rules:
            added += _add_rule(rs, path, rights, flags) is not None
        _restrict(rs)
    finally:
        os.close(rs)
    return {"abi": abi, "writes": "confined", "reads": "hidden paths" if reads else "all",
            "exec": "refused" if handle_execute else "allowed", "tcp": "refused" if net else "not handled",
            "scoped": "signals, abstract UNIX sockets" if scoped else "not handled", "rules": added}


def prepare_reads(hidden: list[str] | tuple[str, ...], abi: int) -> dict:
    """The read half of `apply_landlock(..., hidden=hidden)` made ahead, in a process that stays unconfined (a
    portable head between runs, worker/head.py): a ruleset that handles reads (and, ABI >= 2, reparenting) only,
    with a read rule on every entry `read_rules(hidden)` names. Its run's process takes it with `restrict_prepared`
    instead of adding those rules itself (one per entry of each folder on the way to a hidden path: ~1,800 rules,
    25-45 ms under load, where the kernel's connection file is in /tmp). Raises OSError where Landlock refuses."""
    fs = FS_READ_FILE | (FS_REFER if abi >= 2 else 0)
    rs = _create_ruleset(struct.pack("=Q", fs))
    hide = _hide(hidden)
    try:
        listed = _listings(hide) if hide else {}
        paths = [os.path.join(d, name) for d, names in listed.items() for name in names] if hide else [os.sep]
        held = {got for p in paths if (got := _add_rule(rs, p, FS_READ_FILE, os.O_NOFOLLOW)) is not None}
    except BaseException:
        os.close(rs)
        raise
    return {"fd": rs, "abi": abi, "hidden": hide, "listed": listed, "held": held, "rules": len(held)}


def _held_below(roots: list[str], held: set) -> str | None:
    """The first path at or below `roots` (links not followed) whose (device, inode) is in `held`, or None."""
    stack = list(roots)
    while stack:
        p = stack.pop()
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in held:
            return p
        if stat.S_ISDIR(st.st_mode):
            try:
                stack += [os.path.join(p, name) for name in os.listdir(p)]
            except OSError:
                pass
    return None


def restrict_prepared(prepared: dict, writable: list[str], files: tuple[str, ...], hidden: list[str] | tuple[str, ...],
                      abi: int) -> dict:
    """Restrict the calling thread as `apply_landlock(writable, abi, files=files, hidden=hidden)` does, from a
    ruleset `prepare_reads` made ahead (for the same hidden paths and ABI), in two layers: the prepared one (reads,
    reparenting) brought up to date now, then a small one of the writes, exec, TCP and scopes (`apply_landlock`
    without reads). A path is readable under both exactly where it is under the one ruleset (Landlock allows an
    access only where every layer that handles it does). Up to date: an entry listed since it was prepared gets its
    rule now, like the run's own folders; an entry gone or replaced keeps a rule on its old inode, which is allowed
    only while no hidden path, no folder on the way to one and (where an entry went) nothing below a hidden path is
    that inode (moved there since): else OSError, as for other hidden paths or another ABI, and the caller applies a
    whole ruleset. The prepared ruleset is closed
    here in every case (nothing the run loads can add to it)."""
    rs = int(prepared["fd"])
    try:
        if prepared.get("abi") != abi or prepared.get("hidden") != _hide(hidden):
            raise OSError("the prepared Landlock ruleset was made for other hidden paths")
        held = prepared["held"]
        for h in prepared["hidden"]:
            p = h
            while True:
                try:
                    st = os.stat(p)
                except OSError:
                    st = None
                if st is not None and (st.st_dev, st.st_ino) in held:
                    raise OSError(f"{p} is an inode the prepared Landlock ruleset grants reads on")
                if p == os.sep:
                    break
                p = os.path.dirname(p)
        listed = prepared["listed"]
        now = _listings(prepared["hidden"]) if prepared["hidden"] else {}
        new = [os.path.join(d, name) for d, names in now.items()
               for name, _ in names.items() - (listed.get(d) or {}).items()]
        if any(d not in now or names.items() - now[d].items() for d, names in listed.items()):
            found = _held_below(prepared["hidden"], held)  # (an entry gone or replaced since: moved below one?)
            if found is not None:
                raise OSError(f"{found} is an inode the prepared Landlock ruleset grants reads on")
        added = sum(_add_rule(rs, p, FS_READ_FILE, os.O_NOFOLLOW) is not None for p in new)
        own = FS_READ_FILE | (FS_REFER if abi >= 2 else 0)
        added += sum(_add_rule(rs, d, own, os.O_DIRECTORY) is not None for d in writable)
        added += sum(_add_rule(rs, f, FS_READ_FILE, 0) is not None for f in files)
        _restrict(rs)
    finally:
        os.close(rs)
    info = apply_landlock(writable, abi, files=files, handle_execute=True, hidden=None)
    info.update(reads="hidden paths", rules=int(prepared["rules"]) + added + int(info["rules"]), prepared=True,
                layers=2)
    return info
