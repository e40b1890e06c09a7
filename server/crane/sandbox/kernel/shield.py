"""Kernel side: what keeps CRANE's own work in the user's kernel from running the user's code.

- hooks off: the user's profile and trace hooks (`sys.setprofile`/`settrace`, and `threading`'s hooks for new
  threads) are turned off inline at the top of each kernel-side entry point (the export, the fork path's
  `start`/`session`) and restored as its last statements: they never see a frame of CRANE's below the entry. What cannot be turned off: audit hooks (`sys.addaudithook` is permanent by design), IPython's
  `pre_execute`/`post_execute` events, input transformers and display formatters that every execute request
  (CRANE's private ones included) goes through; docs/sandbox.md says so.
- `private_open`, `dumps`: file and JSON helpers bound to the C implementations (`_io.open`,
  `_json.encode_basestring_ascii`) when the module is installed, so a notebook that replaced `builtins.open`,
  `io.open` or `json.dumps`/`json.loads` does not get called; CRANE's arguments arrive as Python literals, not
  JSON, so nothing is parsed in the kernel.
- `memory_headroom`: how much memory the kernel's process may still use, cgroup-aware (v2 `memory.max -
  memory.current` on the process's cgroup and its ancestors, v1 `memory.limit_in_bytes - memory.usage_in_bytes`;
  reclaimable page cache discounted), and never more than `/proc/meminfo`'s MemAvailable.
- builtins bound at install: this part comes first in the fork sandbox's private module (in the transplant's,
  right after kernel/pristine.py, whose proven copy and private `__import__` it takes), and the module's
  `__builtins__` becomes a copy of the builtins taken then, so every function of the parts after it (the export)
  calls the `len`, `isinstance`, `__import__`, ... of that moment, never a `builtins.len` the notebook replaced
  later (`BUILTINS`; also given to CRANE's private cloudpickle, whose pickler imports modules by name).
- `own_c(module, name)`: the C functions every part binds, read from the interpreter's C module (`posix.stat`,
  never `os.stat`) and checked to be its own under that name; one that is not is named in `SH_NOT_OWN`, and the
  transplant refuses to install (kernel/stdlib_own.py). Install-time code calls none of them.
"""

from __future__ import annotations

import _io  # noqa: F401  (loaded: own_c reads it from the table)
import _json  # noqa: F401
import builtins
import os
import sys
from typing import Any

_SH_HELD = globals()["__builtins__"]  # (the transplant's: kernel/pristine.py's proven copy, its private import)
BUILTINS: dict = dict(_SH_HELD) if type(_SH_HELD) is dict else dict(builtins.__dict__)
globals()["__builtins__"] = BUILTINS
_SH_GET = object.__getattribute__
_SH_MODULE = type(sys)
_SH_C_FUNCTION: Any = type(().__class__.__base__.__subclasses__)  # type: ignore[union-attr]  # C function
_SH_SYS_MODULES: Any = dict.get(_SH_GET(sys, "__dict__"), "modules")
_SH_SYS_MODULES = _SH_SYS_MODULES if type(_SH_SYS_MODULES) is dict else {}
SH_NOT_OWN: list = []  # `module.name` of each C function bound below that is not the interpreter's own


def own_c(module: str, name: str) -> Any:
    """The C function `name` of the interpreter's module `module` (`posix`, `time`, `sys`, ...: read from its own
    namespace, never an attribute of `os`, which the notebook may rebind), as it is now; when it is not that
    module's own C function under that name (the notebook replaced it before the install) it is named in
    `SH_NOT_OWN` (the transplant then refuses to install: kernel/stdlib_own.py). Nothing is called."""
    m = dict.get(_SH_SYS_MODULES, module)
    f: Any = dict.get(_SH_GET(m, "__dict__"), name) if type(m) is _SH_MODULE else None
    if not (type(f) is _SH_C_FUNCTION and f.__self__ is m and f.__name__ == name):
        SH_NOT_OWN.append(f"{module}.{name}")
    return f


_SH_OS = os.name  # `posix` or `nt`: the module of os's C functions
private_open = own_c("_io", "open")
# Every part of a kernel-side module shares this module's namespace (crane.kernel.private_module): `open` here
# is what all of them call, never a `builtins.open` the notebook replaced.
open = private_open  # noqa: A001
_ESCAPE = own_c("_json", "encode_basestring_ascii")
# bound at install: the environment's own storage and the process functions (a notebook's `os.environ = Sub(...)`,
# `os.getpid = ...` or a patched mapping method is never called); `os._Environ` is proven the standard library's
# class at install (kernel/stdlib_own.py checks `os`)
_SH_ENVIRON, _SH_ENVIRON_TYPE = os.environ, dict.get(_SH_GET(os, "__dict__"), "_Environ")
_SH_FS_ENCODING_OF = own_c("sys", "getfilesystemencoding")  # (called at an export, after the install's check)
_SH_GETPID, _SH_STAT = own_c(_SH_OS, "getpid"), own_c(_SH_OS, "stat")


# The pattern every kernel-side entry point follows, inline (no call of ours runs while the user's hooks are on,
# so they see only the entry point's own frame being entered and left, as they see every private request):
#     saved = (sys.getprofile(), sys.gettrace(), threading.__dict__.get("_profile_hook"),
#              threading.__dict__.get("_trace_hook"))
#     sys.setprofile(None); sys.settrace(None)
#     threading.__dict__["_profile_hook"] = threading.__dict__["_trace_hook"] = None
#     try: ... finally:
#         threading.__dict__["_profile_hook"], threading.__dict__["_trace_hook"] = saved[2], saved[3]
#         sys.settrace(saved[1]); sys.setprofile(saved[0])


def dumps(obj: Any) -> str:
    """JSON text of builtins (dict with str keys, list, tuple, str, int, float, bool, None), exact types only
    (a subclass's methods are never called: its value is written as its base type's)."""
    out: list[str] = []

    def enc(v: Any, depth: int) -> None:
        if depth > 64:
            raise ValueError("too deep")
        t = type(v)
        if v is None:
            out.append("null")
        elif v is True:
            out.append("true")
        elif v is False:
            out.append("false")
        elif issubclass(t, str):
            out.append(_ESCAPE(str.__str__(v)))
        elif issubclass(t, int):
            out.append(int.__repr__(v))
        elif issubclass(t, float):
            r = float.__repr__(v)
            out.append(r if r not in ("nan", "inf", "-inf") else "null")
        elif issubclass(t, dict):
            out.append("{")
            for i, (k, x) in enumerate(dict.items(v)):
                if i:
                    out.append(",")
                out.append(_ESCAPE(str.__str__(k)) if issubclass(type(k), str) else _ESCAPE(repr(k)))
                out.append(":")
                enc(x, depth + 1)
            out.append("}")
        elif issubclass(t, (list, tuple)):
            out.append("[")
            for i, x in enumerate(list.__iter__(v) if issubclass(t, list) else tuple.__iter__(v)):
                if i:
                    out.append(",")
                enc(x, depth + 1)
            out.append("]")
        else:
            out.append(_ESCAPE(f"<{t.__name__}>"))

    enc(obj, 0)
    return "".join(out)


def _read(path: str) -> str:
    try:
        with private_open(path, "rb") as f:
            return f.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return ""


def _number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def _stat(text: str, key: str) -> int:
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == key and v.strip().isdigit():
            return int(v)
    return 0


def memory_headroom(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup",
                    meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes the kernel's process may still allocate before its cgroup's (or the machine's) limit; None when
    nothing is known. The smallest headroom along the cgroup's path to the root is the one that counts."""
    best: int | None = None

    def take(n: int | None) -> None:
        nonlocal best
        if n is not None:
            best = n if best is None else min(best, n)

    for line in _read(proc_cgroup).splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        path = path.strip().strip("/")
        if controllers == "":  # cgroup v2
            bases, limit_f, usage_f, cache_key = [root, root + "/unified"], "memory.max", "memory.current", "inactive_file"
        elif "memory" in controllers.split(","):
            bases, limit_f, usage_f, cache_key = [root + "/memory"], "memory.limit_in_bytes", "memory.usage_in_bytes", \
                "total_inactive_file"
        else:
            continue
        for base in bases:
            segs = path.split("/") if path else []
            for n in range(len(segs), -1, -1):
                d = "/".join([base, *segs[:n]])
                limit = _number(_read(f"{d}/{limit_f}"))
                usage = _number(_read(f"{d}/{usage_f}"))
                if limit is None or usage is None or limit >= 1 << 60:
                    continue
                cache = _stat(_read(f"{d}/memory.stat"), cache_key)
                take(limit - max(0, usage - cache))
    for line in _read(meminfo).splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                take(int(fields[1]) * 1024)
    return best


# Bound at install, like the builtins above: never a `sys._is_gil_enabled` the notebook replaced later. One the
# notebook replaced BEFORE the install is never called (it is named in SH_NOT_OWN: the copy's export refuses to
# install); the fork path then goes by the build's ABI flags, read as data at install (a free-threaded build's
# `sys.abiflags` holds "t"; 3.13 builds with the GIL always on answer True anyway).
_IS_GIL_ENABLED = own_c("sys", "_is_gil_enabled") if "_is_gil_enabled" in _SH_GET(sys, "__dict__") else None
_SH_GIL_OWN = _IS_GIL_ENABLED is not None and "sys._is_gil_enabled" not in SH_NOT_OWN
_SH_ABIFLAGS = dict.get(_SH_GET(sys, "__dict__"), "abiflags")
_SH_FREE_BUILD = type(_SH_ABIFLAGS) is not str or "t" in _SH_ABIFLAGS  # (no flags: Windows before 3.14, unknown)


def free_threaded() -> str | None:
    """Why this kernel gets no sandbox run, where its Python runs without the GIL (a free-threaded build, 3.13t+,
    with the GIL off: `sys._is_gil_enabled()` False; it can change at run time, so it is asked each time); None
    where the GIL holds. The fork and the copy's export both rely on it: a fork taken while other threads run
    Python code in parallel can leave their objects half-changed in the child, and the export reads objects other
    threads could change at the same moment. Neither has been made or proven safe without it. Where the notebook
    replaced `sys._is_gil_enabled` before the install, its function is never called: a build whose ABI flags show
    the GIL always on runs; any other gets no run, naming the replacement."""
    if _IS_GIL_ENABLED is None:
        return None
    if not _SH_GIL_OWN:
        if not _SH_FREE_BUILD:
            return None
        return ("the notebook replaced `sys._is_gil_enabled` before CRANE's install and this Python may be a "
                "free-threaded build (its ABI flags do not rule it out): whether the GIL is on cannot be asked "
                "without calling the notebook's function, and CRANE's sandbox (fork and copy) needs the GIL, so no "
                "speculative run is made")
    if _IS_GIL_ENABLED():
        return None
    return ("the kernel runs a free-threaded Python with the GIL disabled (sys._is_gil_enabled() is False): "
            "CRANE's sandbox (fork and copy) needs the GIL, so no speculative run is made")


def environ_strings() -> dict:
    """The environment a child process gets, as str -> str, from the bound `os.environ`'s own storage (no method of
    a mapping is called)."""
    if type(_SH_ENVIRON) is not _SH_ENVIRON_TYPE:
        return {}
    data = dict.get(_SH_GET(_SH_ENVIRON, "__dict__"), "_data")
    out: dict = {}
    if type(data) is not dict:
        return out
    encoding = _SH_FS_ENCODING_OF()
    for k, v in dict.items(data):
        if type(k) is bytes and type(v) is bytes:
            k = bytes.decode(k, encoding, "surrogateescape")
            v = bytes.decode(v, encoding, "surrogateescape")
        if type(k) is str and type(v) is str:
            out[k] = v
    return out


def process_identity() -> tuple[int, int, int | None]:
    """This process: (pid, start time in clock ticks, pid namespace inode); 0 and None where /proc cannot say."""
    pid, start, pidns = _SH_GETPID(), 0, None
    try:
        with private_open("/proc/self/stat", "rb") as f:
            data = f.read()
        start = int(data[data.rindex(b")") + 2:].split()[19])
        pidns = _SH_STAT("/proc/self/ns/pid").st_ino
    except (OSError, ValueError, IndexError):
        pass
    return pid, start, pidns
