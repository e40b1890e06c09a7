"""Portable sandbox, worker side: absolute paths into the notebook's real working folder (issue 40, round 14, fixB).

The worker works in the run's private view of the working folder (worker/portable.RunFolder); a path the cell
computed in the kernel (`OUT = os.path.abspath('results')`, `BASE = Path.cwd()`, `Path('data').resolve()`,
`os.environ['PWD']`) names the REAL folder, which the audit hook refuses to write (`blocked`). Such a path is the
same path relative to the working folder: `install_abs_paths` replaces the Python primitives every writer and
reader reaches the OS through (`open`/`io.open`, `os.open` and the path functions of `os`: `pathlib`, `shutil`,
pandas and numpy call them) by functions that hand the OS the view's counterpart instead
(`RunFolder.translate`, decided on the path as the OS resolves it: links and `..` included), and the call guard
gives a writer of its table the counterpart in place of the real path (`CallGuard._vet_entry`), so a native writer
never receives the real path. Writes (and `os.chdir`) always go to the view; a read goes there only where the run
made the entry its own (written, removed, made private), else it reads the real file by the path it was given.
The audit hook stays the layer underneath: a real path that reaches the OS untranslated is refused as before.
"""

from __future__ import annotations

import builtins
import io
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from crane.sandbox.worker.guard import _as_given  # kernel: strip

# os functions: their path arguments (position, keyword) and whether they write (else they read)
_AP_OS_WRITES: dict[str, tuple[tuple[int, str], ...]] = {n: ((0, "path"),) for n in (
    "mkdir", "rmdir", "remove", "unlink", "chmod", "chown", "lchown", "lchmod", "utime", "truncate", "mkfifo", "mknod",
    "setxattr", "removexattr", "chflags", "lchflags", "chdir")}
_AP_OS_WRITES.update(rename=((0, "src"), (1, "dst")), replace=((0, "src"), (1, "dst")), link=((0, "src"), (1, "dst")),
                  symlink=((1, "dst"),))
_AP_OS_READS = {n: ((0, "path"),) for n in (
    "stat", "lstat", "listdir", "scandir", "access", "readlink", "statvfs", "getxattr", "listxattr", "pathconf")}
_AP_OPEN_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def ap_counterpart(translate: Callable[[Any, bool], str | None], path: Any, write: bool) -> Any:
    """`path`, or the view's counterpart of it (in the caller's type) where it names the real working folder."""
    if path is None or isinstance(path, int):
        return path
    new = translate(path, write)
    return path if new is None else _as_given(path, new)


def install_abs_paths(translate: Callable[[Any, bool], str | None], on: Callable[[], bool]) -> list[str]:
    """Replace `open` (builtins, io) and `os`'s path functions by ones that hand the OS the view's counterpart of a
    path into the real working folder while `on()` (the cell runs, not CRANE's own operation). Returns what was
    replaced."""
    done: list[str] = []
    busy = threading.local()  # (a translation's own calls of the replaced functions: the originals' behaviour)

    def _args(args: tuple, kw: dict, spots: tuple, write: bool) -> tuple[tuple, dict]:
        if kw.get("dir_fd") is not None or kw.get("src_dir_fd") is not None or kw.get("dst_dir_fd") is not None:
            return args, kw  # relative to a folder's descriptor: the audit hook and the shield decide
        lst = list(args)
        busy.on = True
        try:
            for i, name in spots:
                if i < len(lst):
                    lst[i] = ap_counterpart(translate, lst[i], write)
                elif name in kw:
                    kw[name] = ap_counterpart(translate, kw[name], write)
        finally:
            busy.on = False
        return tuple(lst), kw

    def active() -> bool:
        return not getattr(busy, "on", False) and on()

    def wrap(orig: Callable, spots: tuple, write: bool) -> Callable:
        def call(*args: Any, **kw: Any) -> Any:
            if active():
                args, kw = _args(args, kw, spots, write)
            return orig(*args, **kw)
        return call

    def wrap_open(orig: Callable, name: str, writes: Callable[[tuple, dict], bool]) -> Callable:
        def call(*args: Any, **kw: Any) -> Any:
            if active():
                args, kw = _args(args, kw, ((0, name),), writes(args, kw))
            return orig(*args, **kw)
        return call

    def put(mod: Any, name: str, w: Callable) -> None:
        orig = mod.__dict__.get(name)
        if orig is None or getattr(orig, "__crane_abs__", False):
            return
        w.__name__ = w.__qualname__ = getattr(orig, "__name__", name)
        w.__doc__ = getattr(orig, "__doc__", None)
        # (the module it now lives in: pickled by reference there; under the original's `__module__` — `posix`,
        # 3.13's `_io` — the lookup finds the original, and cloudpickle copied the closure by value, which does not load)
        w.__module__ = mod.__name__
        w.__crane_abs__ = True  # type: ignore[attr-defined]
        mod.__dict__[name] = w
        done.append(f"{mod.__name__}.{name}")

    def open_writes(args: tuple, kw: dict) -> bool:
        mode = args[1] if len(args) > 1 else kw.get("mode", "r")
        return not isinstance(mode, str) or any(c in mode for c in "wax+")

    def os_open_writes(args: tuple, kw: dict) -> bool:
        flags = args[1] if len(args) > 1 else kw.get("flags", 0)
        return not isinstance(flags, int) or bool(flags & _AP_OPEN_WRITES)

    orig_open = builtins.open
    opener = wrap_open(orig_open, "file", open_writes)
    _AP_OPEN.update(orig=orig_open, opener=opener)
    put(builtins, "open", opener)
    if io.__dict__.get("open") is orig_open:
        io.__dict__["open"] = opener
        done.append("io.open")
        _picklable_by_name(orig_open, "io:open")
    shell = sys.modules.get("IPython.core.interactiveshell")  # IPython's `open` in the user's namespace calls the
    if shell is not None and shell.__dict__.get("io_open") is orig_open:  # `io.open` it bound at import
        shell.__dict__["io_open"] = opener
        done.append("IPython.core.interactiveshell.io_open")
    put(os, "open", wrap_open(os.open, "path", os_open_writes))
    for table, write in ((_AP_OS_WRITES, True), (_AP_OS_READS, False)):
        for name, spots in table.items():
            fn = os.__dict__.get(name)
            if fn is not None:
                put(os, name, wrap(fn, spots, write))
    return done


def _picklable_by_name(orig: Any, name: str) -> None:
    """`orig`, a C function whose module attribute (`io.open`) now holds the replacement, pickles as `name` looked up
    where it is loaded (`pkgutil.resolve_name`): pickle's by-reference check (`io.open is orig`) failed, so an object
    of the notebook's holding the original — IPython's `open` in the user's namespace keeps it as `__wrapped__`, a
    joblib task of a notebook function that calls `open` carries it — could not be pickled as in the kernel (a false
    `PicklingError` crash). Every other object of its type pickles as before (a dispatch entry already there, the
    notebook's, is called for them)."""
    import copyreg
    import pkgutil
    kind = type(orig)
    prev = copyreg.dispatch_table.get(kind)

    def reduce(obj: Any) -> Any:
        if obj is orig:
            return (pkgutil.resolve_name, (name,))
        return prev(obj) if prev is not None else obj.__reduce_ex__(4)

    copyreg.dispatch_table[kind] = reduce


_AP_OPEN: dict[str, Any] = {}  # `install_abs_paths`'s replaced `open` (orig) and its replacement (opener)


def reach_user_open(ns: Any) -> None:
    """The user's namespace's `open` as the worker loaded it (IPython's, a copy whose globals hold the `io.open` it
    bound at import: the worker's copy, never the kernel's) made to call the replacement."""
    fn = ns.get("open") if isinstance(ns, dict) else None
    glb = getattr(fn, "__globals__", None)
    if _AP_OPEN and type(glb) is dict and glb.get("io_open") is _AP_OPEN["orig"]:
        glb["io_open"] = _AP_OPEN["opener"]
