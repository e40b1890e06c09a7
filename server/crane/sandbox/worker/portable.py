"""Portable sandbox, worker side: a transplant run confined by nothing but Python (macOS, Windows, Linux on ARM,
Linux without namespaces/Landlock/seccomp, or `--sandbox portable` anywhere).

`prepare_portable(args, shell, out)` sets the run up without any OS confinement (no namespaces, Landlock,
seccomp, /proc, FIFOs or pidfds: the result channel is `out`, the worker's stdout pipe to the daemon, and a
session's commands come down its stdin pipe, crane.sandbox.pipes):
- the **run folder**: a private view of the run (`<run dir>/view/<the working folder's real path>`) that mirrors
  the cell's working folder and each of its ancestors with one symbolic link per entry (so `../data` reads the
  same files); the worker works there. Reads go through the links to the real files. A write
  through Python's file APIs (`open`, `os.*`, `shutil.*`, `sqlite3`) or through a writer of the guard's table
  (`to_csv`, `savefig`, `np.save`, `torch.save`, `to_parquet`, ...) into that folder first replaces the links on its
  way by private copies (`RunFolder.materialize`: a directory becomes a directory of links, a file a copy), so the
  cell sees its own writes and the real files never change (the layered mode's promise, file by file);
- the **audit hook** (PEP 578, `_portable_hook`), the layer under the guard: file writes, removals, renames and
  metadata changes outside the run folder and the run's scratch directory, sockets (connect, bind, send, name
  resolution, URL/HTTP/mail clients), process creation (`os.system`, `exec`, `spawn`, `fork`, `subprocess`),
  signals to other processes, `ctypes` from user code, `gc` walks and trace/profile hooks from user code,
  `os.chdir` out of the run folder, resource limits: refused, wherever they come from (a library's internals,
  a C intermediary such as `map(os.remove, ...)` the guard does not see);
- the **call guard** (worker/guard.py), installed by `run_portable` around the cell only (lean where Landlock
  holds the worker: no per-call hook, neither a profile hook nor `sys.monitoring`, see worker/guard.py);
- **pools**: where the Linux layer holds the worker, multiprocessing's fork pools and joblib's tasks run in real
  processes of the run (worker/pools.py); elsewhere joblib's tasks run in the worker's process and pools are
  refused. A fork child's refusal is the run's: the child hands it to the worker (`_tell_parent`: a pipe and a
  signal), which ends the run `blocked`; a child never writes on the result channel (closed in it at fork);
- the **resource limits** (worker/limits.py, `apply_limits`): memory, CPU time and file size set just before the
  cell (a session: before each run), with the platform's own process limits (rlimits on POSIX, a job object on
  Windows).
A refusal ends the run at once with a `blocked` record naming the call (`crane sandbox: ... is refused`): never
a crash, never a guess, and nothing of the cell runs after it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import stat
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from crane.sandbox.kernel.audit import (  # kernel: strip
    _DENY_EVENTS,
    _PATH_EVENTS,
    _ends_process,
    _guard_process_end,
    _local_file_url,
)
from crane.sandbox.kernel.common import (  # kernel: strip
    _SETUP,
    _WRITE_FLAGS,
    SEAL_RECORD,
    SandboxBlocked,
    _Ctx,
    _seal_other,
    _write_json,
)
from crane.sandbox.kernel.isolation import _neutralise_kernel_io, capture_std_streams  # kernel: strip
from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.run import run_source  # kernel: strip
from crane.sandbox.shared.view_names import view_sensitive  # kernel: strip
from crane.sandbox.worker.abs_paths import install_abs_paths, reach_user_open  # kernel: strip
from crane.sandbox.worker.guard import (  # kernel: strip
    _THIS_THREAD,
    CallGuard,
    makes_own_code,
    multiprocessing_children,
    other_process_entry,
    shield_unaudited,
)
from crane.sandbox.worker.imports import (  # kernel: strip
    CODE_EVENTS,
    CodeProvenance,
    answer_physical_cores_first,
    answer_platform_first,
    import_leeway,
)
from crane.sandbox.worker.limits import lift_memory_limit, set_run_limits  # kernel: strip
from crane.sandbox.worker.linux import LINUX_LAYER, confine_worker, hidden_paths  # kernel: strip
from crane.sandbox.worker.pools import install_joblib  # kernel: strip
from crane.sandbox.worker.reaper import end_descendants, kill_child  # kernel: strip

PORTABLE_LAYERS = ("call guard", "audit hook")
# events whose path is followed to its target (the link must become a private copy first)
# round 12 (h7): environment variables naming paths that native code writes at, with no Python `open` for the audit
# hook to see: XLA reads its flags when a backend first compiles (`--xla_dump_to=<folder>`: HLO dumps written in C++;
# its dumps' and caches' other path flags: `_writes_at`), TensorFlow its graph-dump prefix. When the cell sets one
# (`os.environ[k] = v`: the `os.putenv` audit event), every path it names is vetted as a path the run writes.
_NATIVE_FLAG_VARIABLES = frozenset(("XLA_FLAGS", "TF_XLA_FLAGS", "LIBTPU_INIT_ARGS"))
_NATIVE_PATH_VARIABLES = frozenset(("TF_DUMP_GRAPH_PREFIX",))
_XLA_PATH_FLAG = re.compile(r"""--?([A-Za-z0-9_]+)=("[^"]*"|'[^']*'|\S*)""")
_XLA_PATH_FLAG_ENDS = ("_dir", "_directory", "_path", "_file", "_prefix")


def _writes_at(flag: str) -> bool:
    """An XLA flag whose value is a path written at: `..._to` (`--xla_dump_to`, `..._autotune_results_to`), or a
    path-valued dump's or cache's (`--xla_gpu_per_fusion_autotune_cache_dir`); read-only ones such as
    `--xla_gpu_cuda_data_dir` (set in GPU users' environments) or an input `..._file` are not vetted."""
    name = flag.lower()
    return name.endswith("_to") or (("dump" in name or "cache" in name) and name.endswith(_XLA_PATH_FLAG_ENDS))


def native_env_paths(key: Any, value: Any) -> list[str]:
    """The paths the environment variable `key` set to `value` has native code write at ([] for other variables;
    `-`, XLA's standard output, is none)."""
    try:
        k, v = os.fsdecode(key), os.fsdecode(value)
    except (TypeError, ValueError):
        return []
    if k in _NATIVE_PATH_VARIABLES:
        return [v] if v else []
    if k not in _NATIVE_FLAG_VARIABLES:
        return []
    found = []
    for name, val in _XLA_PATH_FLAG.findall(v):
        val = val[1:-1] if val[:1] in "\"'" and len(val) > 1 and val[-1] == val[0] else val
        if _writes_at(name) and val not in ("", "-"):
            found.append(val)
    return found


_FOLLOWS = {"os.chmod", "os.chown", "os.utime", "os.truncate", "os.chflags", "os.setxattr", "os.removexattr",
            "shutil.rmtree", "os.rmdir"}
# moves whose source (argument 0) is made private first: a view link moved elsewhere no longer names its counterpart,
# so it read as the cell's own link and a write to the moved file came back blocked (os.rename, os.replace, shutil.move)
_MOVES = {"os.rename", "shutil.move"}
_DIR_FD = {"os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.chmod": (2,), "os.chown": (3,),
           "os.utime": (3,), "os.symlink": (2,), "os.rename": (2, 3), "os.link": (2, 3)}
_FROM_USER_EVENTS = {"ctypes.dlopen": "loading native code with ctypes", "ctypes.dlsym": "ctypes",
                     "ctypes.dlsym/handle": "ctypes", "ctypes.call_function": "a ctypes call",
                     "ctypes.cdata": "ctypes memory access", "ctypes.cdata/buffer": "ctypes memory access",
                     "ctypes.string_at": "ctypes memory access", "ctypes.wstring_at": "ctypes memory access",
                     "ctypes.addressof": "ctypes memory access", "gc.get_objects": "walking the interpreter's objects",
                     "gc.get_referrers": "walking the interpreter's objects",
                     "gc.get_referents": "walking the interpreter's objects",
                     "sys.setprofile": "changing the interpreter's profile hook",
                     "sys.settrace": "changing the interpreter's trace hook",
                     "sys._current_frames": "reading other threads' frames"}
_WINREG_WRITES = ("winreg.SetValue", "winreg.CreateKey", "winreg.DeleteKey", "winreg.DeleteValue", "winreg.SaveKey",
                  "winreg.LoadKey", "winreg.ConnectRegistry")


def _exists(path: Any) -> bool:
    """`path` names something that exists (a link counts), without following or changing anything."""
    try:
        return os.path.lexists(path)
    except (TypeError, ValueError):
        return False


class RunFolder:
    """The run's private view of the file system around the cell's working folder: `mirror` holds the real path
    of the working folder (`root`, where the worker works) with, at every level from the top, one link per entry
    of the real directory (so `../data/train.csv` and `Path.cwd().parent` read what they read in the kernel, and
    `Path.cwd().name` is the real folder's name); links are made private copies on write."""

    def __init__(self, real: str, private: str, scratch: str, staged: str | None = None,
                 stop: Callable[[], bool] | None = None) -> None:
        self.real = os.path.realpath(real)
        self.mirror = os.path.abspath(private)
        drive, rest = os.path.splitdrive(self.real)
        parts = [p for p in rest.split(os.sep) if p]
        self.root = os.path.join(self.mirror, *([drive.rstrip(":")] if drive else []), *parts)
        self.scratch = os.path.realpath(scratch)
        self.staged = staged is not None and _adopt(staged, self.real, self.mirror)  # brought up to date below
        os.makedirs(self.root, exist_ok=True)
        self.mirror_real = os.path.realpath(self.mirror)
        self.linked = True
        real_dir, mirror_dir = (drive + os.sep) if drive else os.sep, os.path.join(
            self.mirror, *([drive.rstrip(":")] if drive else []))
        self.stopped = False  # `stop()` said to stop (a head's staging: a request waits) before every link was made
        for part in parts + [None]:  # every ancestor's other entries, then the working folder's
            self.linked = self._mirror(real_dir, mirror_dir, stop) and self.linked
            if part is None or self.stopped:
                break
            real_dir, mirror_dir = os.path.join(real_dir, part), os.path.join(mirror_dir, part)

    def _mirror(self, real: str, into: str, stop: Callable[[], bool] | None = None) -> bool:
        """One link per entry of `real` in `into` (False: links cannot be made here, e.g. Windows without the
        privilege: then writes into the working folder are refused, never redirected halfway). A staged view
        (`stage_view`) is brought up to date: links made for new entries, the view's links to entries gone removed.
        `stop` (staging only) is asked every 32 entries; where it says so, the rest is left undone (`stopped`)."""
        try:
            names = os.listdir(real)
            have = set(os.listdir(into))
        except OSError:
            return True
        for name in have.difference(names):  # (only in a staged view: entries removed since it was made)
            at = os.path.join(into, name)
            if os.path.islink(at) and self._view_link(at) is not None:
                os.unlink(at)
        for i, name in enumerate(names):
            if stop is not None and i % 32 == 0 and stop():
                self.stopped = True
                return True
            if name in have:
                continue  # the next directory on the way to the working folder (a real one), or staged already
            try:
                os.symlink(os.path.join(real, name), os.path.join(into, name))
            except FileExistsError:
                pass
            except (OSError, NotImplementedError):
                return False
        return True

    def _abs(self, path: Any) -> str:
        p = os.fsdecode(path)
        return p if os.path.isabs(p) else os.path.join(os.getcwd(), p)

    def _counterpart(self, at: str) -> str | None:
        """The real path a view entry `at` (a resolved path under the view) mirrors."""
        rel = os.path.relpath(at, self.mirror_real)
        if rel == os.curdir or rel.startswith(os.pardir):
            return None
        parts = rel.split(os.sep)
        if os.name == "nt":
            return parts[0] + ":" + os.sep + os.sep.join(parts[1:])
        return os.sep + os.sep.join(parts)

    def _view_link(self, at: str) -> str | None:
        """The real target when `at` is one of the view's own links (made by `_mirror`: it points at its
        counterpart), else None (the cell's own link, or not a link)."""
        try:
            target = os.readlink(at)
        except (OSError, ValueError):
            return None
        want = self._counterpart(at)
        return target if want is not None and target == want else None

    def _under(self, p: str) -> bool:
        return (self.linked and _within(p, self.mirror_real)) or _within(p, self.scratch)

    def resolve(self, path: Any, make: bool = False, leaf: bool = True) -> str | None:
        """Where the operating system would reach `path` once the view's links on its way are private copies: the
        path walked component by component as the OS does (`..` after whatever the previous component resolved
        to), following the cell's own links and anything outside the view for real, and taking the view's own links
        as the private folders they become. `make`: make them private copies now, along exactly these components
        (and the last one too when `leaf`). None: the path cannot be walked (a link loop, a bad name)."""
        try:
            text = self._abs(path)
            return self._walk(text.replace("/", os.sep) if os.name == "nt" else text, make, leaf)
        except (TypeError, ValueError, OSError):
            return None

    def _walk(self, text: str, make: bool, leaf: bool) -> str | None:
        todo = text.split(os.sep)
        drive, _ = os.path.splitdrive(todo[0] + os.sep) if os.name == "nt" else ("", "")
        cur = (drive + os.sep) if drive else os.sep
        todo = todo[1:] if drive or not todo[0] else todo
        hops = 0
        while todo:
            comp = todo.pop(0)
            if comp in ("", os.curdir):
                continue
            if comp == os.pardir:
                cur = os.path.dirname(cur)
                continue
            nxt = os.path.join(cur, comp)
            if not os.path.islink(nxt):
                cur = nxt
                continue
            last = not [c for c in todo if c not in ("", os.curdir)]
            if self.linked and _within(nxt, self.mirror_real) and self._view_link(nxt) is not None:
                if make and (leaf or not last):
                    self._materialize_one(nxt, last)
                cur = nxt  # a private folder (or file) of the view, once materialized
                continue
            hops += 1
            if hops > 40:
                return None
            try:
                target = os.readlink(nxt)
            except OSError:
                return None
            todo = target.split(os.sep) + todo if not os.path.isabs(target) else target.split(os.sep)[1:] + todo
            if os.path.isabs(target):
                cur = os.sep
        return cur

    def inside(self, path: Any) -> bool:
        """`path` reaches the run folder (the view, its links taken as the private copies a write makes of them) or
        the scratch directory, decided on the path the OS would resolve (`resolve`), never on its text."""
        at = self.resolve(path)
        return at is not None and self._under(at)

    def _materialize_one(self, at: str, last: bool) -> None:
        """The view's link `at` made its private copy. A folder's entries are linked to the folder's entries as
        the link names them (its counterpart), never to where the counterpart resolves: so a folder reached through
        the user's own link to elsewhere (`data -> /mnt/shared`) stays the view's, its entries the view's links,
        kept private as the rest of the view is (linked to the resolved folder, each entry was a link of the
        cell's own, followed for real: a new file was private while an existing one was refused)."""
        target = os.path.realpath(at)
        if os.path.isdir(target):
            counterpart = os.readlink(at)
            os.unlink(at)
            os.mkdir(at)
            self._mirror(counterpart, at)
        elif os.path.exists(target):
            if last:
                os.unlink(at)
                shutil.copy2(target, at)
        elif last:
            os.unlink(at)  # a dangling link: the write creates the file

    def unfold(self, path: Any) -> None:
        """A folder of the view is being listed (`os.scandir`/`os.listdir`: `os.walk`, `Path.rglob`, `glob`): its
        entries that are the view's links to folders become real folders (of links), so a walk descends into them as
        it does in the kernel (`followlinks=False` does not follow a link). Files stay links (read through)."""
        at = self.resolve("." if path is None else path)
        if at is None or not self.linked or not _within(at, self.mirror_real) or not os.path.isdir(at):
            return
        try:
            names = os.listdir(at)
        except OSError:
            return
        for name in names:
            p = os.path.join(at, name)
            real = self._view_link(p) if os.path.islink(p) else None
            if real is not None and os.path.isdir(real) and not os.path.islink(real):  # (a walk skips real links)
                self._materialize_one(p, False)

    def materialize_tree(self, path: Any) -> str | None:
        """`materialize(path)`, and when it is a folder, every view link below it too (a writer that fills a folder,
        overwriting files that may be there: none of them may be a link to a real file). Any other link below it
        (the cell's own, or a view link moved there) is materialized along what it resolves to, a folder whole, when
        that is in the run; the first that leads out of the run is returned (the writer, whose files inside the
        folder are not vetted one by one, would write through it: the caller refuses), else None."""
        return self._tree(path, set())

    def _tree(self, path: Any, seen: set[str]) -> str | None:
        at = self.resolve(path, make=True)
        if at is None or not self._under(at) or not os.path.isdir(at) or os.path.islink(at) or at in seen:
            return None
        seen.add(at)
        for top, dirs, files in os.walk(at):
            for name in dirs + files:
                p = os.path.join(top, name)
                if not os.path.islink(p):
                    continue
                if self._view_link(p) is not None:
                    self._materialize_one(p, True)
                    continue
                target = self.resolve(p, make=True)
                if target is None or not self._under(target):
                    return p
                escape = self._tree(target, seen) if os.path.isdir(target) else None
                if escape is not None:
                    return escape
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        return None

    def materialize(self, path: Any, leaf: bool = True) -> None:
        """Replace every view link on the way to `path` (and `path` itself when `leaf`) by a private copy, along
        the components the OS resolves (`resolve`): a directory by a directory of links to its entries, a file by
        a copy."""
        self.resolve(path, make=True, leaf=leaf)

    def translate(self, path: Any, write: bool = True) -> str | None:
        """The view's counterpart of `path` where the OS would reach the REAL working folder (or below) by it: an
        absolute path the kernel computed (`os.path.abspath('out')`, `Path.cwd()`), one through a link to it, one
        whose `..` comes back into it; walked as the OS does (`_real_walk`), the rest of the path kept as it is (it
        is then walked in the view). None: it does not reach the real folder (the normal rules hold). A read
        (`write` False) is sent there only where the view's entry is the run's own (written, removed, made
        private): elsewhere the real file it would read is the same one (worker/abs_paths.py)."""
        if not self.linked:
            return None
        try:
            text = os.fsdecode(path)
            if not os.path.isabs(text) and os.pardir not in text.replace("/", os.sep).split(os.sep):
                return None  # relative, no `..`: in the view already (the worker works there)
            at = self._real_walk(self._abs(text))
        except (TypeError, ValueError, OSError):
            return None
        if at is None or write:
            return at
        return at if self._own_entry(at) else None

    def _real_walk(self, text: str) -> str | None:
        todo = (text.replace("/", os.sep) if os.name == "nt" else text).split(os.sep)
        drive, _ = os.path.splitdrive(todo[0] + os.sep) if os.name == "nt" else ("", "")
        top = (drive + os.sep) if drive else os.sep
        cur, todo, hops = top, todo[1:], 0
        while True:
            if _within(cur, self.mirror_real) or _within(cur, self.scratch):
                return None
            if _within(cur, self.real):
                rel = cur[len(self.real):].lstrip(os.sep)
                return os.path.join(self.root, *([rel] if rel else []), *todo)
            if not todo:
                return None
            comp = todo.pop(0)
            if comp in ("", os.curdir):
                continue
            if comp == os.pardir:
                cur = os.path.dirname(cur)
                continue
            nxt = os.path.join(cur, comp)
            if not os.path.islink(nxt):
                cur = nxt
                continue
            hops += 1
            if hops > 40:
                return None
            target = os.readlink(nxt)
            if os.path.isabs(target):
                tdrive, _ = os.path.splitdrive(target)
                cur = (tdrive + os.sep) if tdrive else os.sep
                todo = target[len(tdrive):].split(os.sep) + todo
            else:
                todo = target.split(os.sep) + todo

    def _own_entry(self, at: str) -> bool:
        """The view path `at` (walked in the view) is the run's own: neither it nor a folder on its way is still one
        of the view's links to the real entry."""
        got = self.resolve(at)
        if got is None or not _within(got, self.mirror_real):
            return False
        p = got
        while _within(p, self.mirror_real) and p != self.mirror_real:
            if os.path.islink(p) and self._view_link(p) is not None:
                return False
            p = os.path.dirname(p)
        return True


def _within(p: str, root: str) -> bool:
    return p == root or p.startswith(root.rstrip(os.sep) + os.sep)


_STAGED_FOR = ".for"  # next to a staged view: the real folder it mirrors


def stage_view(real: str, staged: str, stop: Callable[[], bool] | None = None, used: str | None = None) -> bool:
    """Make the view of `real` (its ancestors' entries as links: `RunFolder`) at `staged`, ahead of the run that
    will take it (a head, between runs: worker/head.py); whatever was at `staged` is removed first. `used`: the last
    run's view, moved out of its folder by the head once every process of that run was gone: where it was a view of
    `real` it is made clean (`_clean_view`: only what that run changed is undone) and brought up to date, instead of
    a link per entry of every ancestor made again. Else a fresh view. Either is made until `stop()` says a request
    waits: the run takes what was made and makes the links still missing itself (`RunFolder._mirror`)."""
    for old in (staged, staged + _STAGED_FOR):
        _remove_entry(old)
    if os.path.lexists(staged):
        return False
    real = os.path.realpath(real)
    if used is not None and _clean_view(used, real):
        os.rename(used, staged)  # (then brought up to date below: the links of entries made since, or it undid)
    elif used is not None:
        _remove_entry(used)
    folder = RunFolder(real, staged, staged, stop=stop)
    if not folder.linked:
        _remove_entry(staged)
        return False
    with open(staged + _STAGED_FOR, "w", encoding="utf-8") as f:
        f.write(real)
    return True


def _remove_entry(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def _clean_view(view: str, real: str) -> bool:
    """Make `view`, a run's view of `real` (that run's processes all gone), what `RunFolder` makes: at every level
    from the top, the links to their counterparts (`RunFolder._view_link`) and the real folder on the way to the
    working folder, nothing else. Whatever the run changed is removed (a private copy, an unfolded folder, a file,
    folder or link of its own, a folder on the way replaced): links are never followed, no folder of the view is
    entered unless it is a real folder (lstat). False where it cannot be made so (the caller then removes it)."""
    drive, rest = os.path.splitdrive(real)
    parts = [p for p in rest.split(os.sep) if p]
    if drive or not os.path.isabs(real):
        return False  # (POSIX heads only)
    real_dir, at = os.sep, view
    try:
        for i in range(len(parts) + 1):
            if not stat.S_ISDIR(os.lstat(at).st_mode):
                return False
            nxt = parts[i] if i < len(parts) else None
            with os.scandir(at) as it:
                entries = list(it)
            for e in entries:
                if e.name == nxt and e.is_dir(follow_symlinks=False):
                    continue  # (the folder on the way: cleaned at the next level)
                if e.name != nxt and e.is_symlink() and os.readlink(e.path) == os.path.join(real_dir, e.name):
                    continue  # a link to its counterpart: as `_mirror` makes it
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path)  # (shutil's own walk: links inside are removed, never followed)
                else:
                    os.unlink(e.path)
            if nxt is None:
                return True
            real_dir, at = os.path.join(real_dir, nxt), os.path.join(at, nxt)
            if not os.path.lexists(at):
                os.mkdir(at, 0o700)
    except (OSError, ValueError):
        return False
    return True


def _adopt(staged: str, real: str, mirror: str) -> bool:
    """Move the view staged for `real` to `mirror` (one rename), if there is one for that folder."""
    try:
        with open(staged + _STAGED_FOR, encoding="utf-8") as f:
            if f.read() != real:
                return False
        os.unlink(staged + _STAGED_FOR)
        if os.path.lexists(mirror) or os.path.islink(staged):
            return False
        os.rename(staged, mirror)
        return True
    except OSError:
        return False


class Portable:
    """What one portable run set up (the guard, the run folder, the audit state)."""

    def __init__(self, ctx: _Ctx, folder: RunFolder) -> None:
        self.ctx = ctx
        self.folder = folder
        # a single run ends with its process tree (the daemon kills it): multiprocessing's fork children may start;
        # a session's worker goes on serving, so none there
        self.guard = CallGuard(lambda what: self.refuse(what, "call guard"), inside=self.folder.inside, prepare=self._prepare_write,
                               fork_children=ctx.args.get("mode") != "session", prepare_tree=self._prepare_tree)
        self.guard.translate = self.translate  # (a writer's path into the real folder: worker/abs_paths.py)
        self.mechanism = ""
        self.t0 = time.perf_counter()

    def _prepare_write(self, path: Any) -> None:
        state = self.ctx.audit_state
        _own_begin(state)
        try:
            self.folder.materialize(path)
        finally:
            _own_end(state)

    def translate(self, path: Any, write: bool = True) -> str | None:
        """`RunFolder.translate`, as CRANE's own operation (its file-system calls are neither vetted nor translated)."""
        state = self.ctx.audit_state
        _own_begin(state)
        try:
            return self.folder.translate(path, write)
        finally:
            _own_end(state)

    def _prepare_tree(self, path: Any) -> None:
        state = self.ctx.audit_state
        _own_begin(state)
        try:
            escape = self.folder.materialize_tree(path)
        finally:
            _own_end(state)
        if escape is not None:
            self.refuse(f"a writer filling a folder that holds a link out of the run ({escape[:200]!r})", "call guard",
                        escape)

    def refuse(self, what: str, layer: str = "audit hook", path: Any = None) -> None:
        """End the run now: `blocked`, naming what was refused (`reason`, and `refusal`: the `layer` that refused it,
        the call, the `path` when there is one); nothing of the cell runs after it. In a session
        (whose worker must go on serving) the refusal is raised instead (`SandboxBlocked`), recorded, and the run's
        verdict is `blocked` all the same; the audit hook stays in force after it."""
        ctx = self.ctx
        state = ctx.audit_state
        if _own_here(state):
            return
        if state.get("ended") or state.get("refusing"):  # the run's end is decided (kernel/audit._guard_process_end,
            # or another thread's refusal being written): what the cell still runs (a finalizer, a thread of its own)
            # is refused all the same, with no second record and no new seal
            raise SandboxBlocked(errno.EPERM, f"crane sandbox: {what} is refused (portable sandbox)")
        if ctx.args.get("mode") == "session":
            msg = f"crane sandbox: {what} is refused (portable sandbox)"
            ctx.denied.append(msg)
            state["unset"] = True  # raised from the profile hook, this unsets it: not the cell's doing
            raise SandboxBlocked(errno.EPERM, msg)
        state["refusing"] = state["bypass"] = True  # (the latter: os._exit below is not the cell's own end)
        _own_begin(state)  # (this thread's alone: the cell's other threads stay judged until the process ends)
        if _NOTICES and os.getpid() != _NOTICES["pid"]:
            _tell_parent(what, layer, path)  # a fork child of the run: the worker ends the run (never returns)
        try:
            self.guard.leave()  # (this thread's alone: the cell's other threads stay guarded until the process ends)
        except Exception:
            pass
        msg = f"crane sandbox: {what} is refused (portable sandbox)"
        ctx.denied.append(msg)
        try:
            _write_json(ctx.result_fd, {
                "verdict": "blocked", "reason": msg, "denied": ctx.denied[:20], "displays": ctx.displays,
                "elapsed_ms": (time.perf_counter() - self.t0) * 1000.0, "confinement": ctx.confinement,
                "refusal": _refusal(layer, what, path)})
        finally:
            if ctx.args.get("sealed") == os.getpid():  # the run's own process, whose parent reads its seal: the
                _seal_other(ctx, SEAL_RECORD)  # record is CRANE's refusal (issue 41; never returns)
            os._exit(0)


def _refusal(layer: str, what: str, path: Any) -> dict:
    """The record's structured refusal (verdict.Refusal)."""
    out: dict = {"layer": layer, "call": what[:300]}
    if isinstance(path, (str, bytes, os.PathLike)):
        try:
            out["path"] = os.fsdecode(path)[:1000]
        except (TypeError, ValueError):
            pass
    return out


# what an exception says when the OS refused the call behind it (EACCES, EPERM, SQLite's and Arrow's wording)
_OS_DENIALS = ("Permission denied", "Operation not permitted", "[Errno 13]", "[Errno 1]", "unable to open database",
               "readonly database", "EACCES", "EPERM")


def _os_refusal(rec: dict, os_layer: dict) -> dict:
    """A crash that the OS layer's refusal may have caused (a PermissionError, or a library's message for one) is not
    the cell's crash: the kernel, unconfined, could have run on. The run is `blocked`, its refusal naming the OS
    layer and the exception; never a crash, never a guess."""
    if rec.get("verdict") != "crash" or not os_layer.get("ran"):
        return rec
    ename, evalue = str(rec.get("ename") or ""), str(rec.get("evalue") or "")
    if ename != "PermissionError" and not any(d in evalue for d in _OS_DENIALS):
        return rec
    layer = str(os_layer.get("layer") or "OS layer")
    call = f"{ename}: {evalue}"[:300]
    path = evalue.rsplit(": ", 1)[-1].strip("'\"") if ": " in evalue else None
    out = dict(rec)
    out.update(verdict="blocked", reason=f"crane sandbox: the OS layer ({layer}) refused a call of the cell ({call}); "
                                         "unconfined, the kernel may have run on (portable sandbox)",
               refusal=_refusal(layer, call, path if path and os.path.isabs(path) else None))
    return out


def _open_channel(ctx: _Ctx, out: int) -> None:
    """The result channel is `out`, the worker's pipe to the daemon (worker/boot.py; a session's commands come down
    its other pipe); the output goes to plain files in the run's private directory; fd 0 reads the null device.
    No FIFO, no socket: crane.sandbox.pipes."""
    if out < 0:
        raise OSError("the worker has no pipe to the daemon")
    ctx.result_fd = out
    _SETUP["result_fd"] = out
    capture_std_streams(ctx, ctx.args["dir"], truncate=False)


# CRANE's own operation under way (a private copy made for a write, the run's limits set, a refusal written): the
# audit hook and the unaudited calls' replacements (guard.shield_unaudited) let through the calls it makes. It is the
# thread's that runs it, never the process's: `state["own"]` maps each such thread to its depth, and a call of any
# other thread — one the cell started, or a pool's or an executor's worker running the cell's function — is judged
# as always meanwhile. (Issue 40: under the guard alone, a thread of the cell's that called `os.kill` or
# `signal.pidfd_send_signal` while the main thread wrote a refusal, or made a private copy, signalled the kernel.)
def _own_begin(state: dict) -> None:
    own, me = state["own"], _THIS_THREAD()
    own[me] = own.get(me, 0) + 1


def _own_end(state: dict) -> None:
    own, me = state["own"], _THIS_THREAD()
    left = own.get(me, 1) - 1
    if left > 0:
        own[me] = left
    else:
        own.pop(me, None)


def _own_here(state: dict) -> bool:
    """This thread is running CRANE's own operation (see `_own_begin`)."""
    own = state.get("own")
    return type(own) is dict and _THIS_THREAD() in own


def _install_portable_hook(run: Portable) -> None:
    ctx, folder, guard = run.ctx, run.folder, run.guard
    # "own": the hook's own operations (making private copies, ending a run); the worker's "bypass" (set while it
    # loads the kernel's state) does not turn this hook off: the notebook's own modules are imported then
    state: dict[str, Any] = {"bypass": False, "own": {}}  # ("own": `_own_begin`)
    ctx.audit_state = state
    mypid = os.getpid()
    _guard_process_end(ctx, state, mypid, _children_refused)
    if guard.fork_children and hasattr(os, "register_at_fork"):
        _listen_to_children(run, mypid)
        os.register_at_fork(after_in_child=lambda: _child_after_fork(guard, mypid, ctx))
    devices = {os.devnull, "/dev/null", "/dev/zero", "/dev/full", "nul", "NUL"}
    refuse = run.refuse
    # the kernel's connection file and Jupyter's runtime folders: hidden by Landlock where it ran, else refused here
    # (round 6: `--sandbox guard` read the file and drove the kernel with jupyter_client)
    hidden = frozenset() if (ctx.confinement or {}).get("os_layer", {}).get("ran") else _hidden_inodes(
        _hidden_paths(ctx.args["dir"]))

    def is_hidden(path: Any) -> bool:
        if not hidden or isinstance(path, int):
            return False
        try:
            st = os.stat(path)
        except (OSError, TypeError, ValueError):
            return False
        return (st.st_dev, st.st_ino) in hidden

    def from_user() -> bool:
        try:
            f = sys._getframe(2)  # 0: this function, 1: the hook, 2: the code that raised the event
        except ValueError:
            return False  # raised with no Python code on the stack (a library's own thread)
        return guard.is_user(f.f_code)

    def writable(path: Any, event: str, leaf: bool) -> bool:
        if isinstance(path, int):
            return event not in _FOLLOWS  # a descriptor: only writable ones exist for the run folder's files
        try:
            if os.fsdecode(path) in devices:
                return True
        except (TypeError, ValueError):
            return False
        if not folder.inside(path):
            return False
        _own_begin(state)
        try:
            folder.materialize(path, leaf=leaf)
        except OSError:
            return False
        finally:
            _own_end(state)
        return True

    def db_ok(name: str) -> bool:
        """A database name SQLite may open or attach: in memory, read-only (`mode=ro` as a URI parameter), or a file
        the run may write (its private copy made first, with its write-ahead log, shared-memory index and rollback
        journal where the view has them: a WAL-mode database the kernel holds open has all three, which SQLite opens
        for writing even to read — through the view's links that was "unable to open database file", round 16 F11)."""
        path, readonly = _sqlite_target(name)
        if path is None or readonly:
            return True
        if not writable(path, "sqlite3.connect", True):
            return False
        try:
            siblings = [os.fsdecode(path) + suffix for suffix in _SQLITE_SIBLINGS]
        except (TypeError, ValueError):
            return True
        return all(writable(p, "sqlite3.connect", True) for p in siblings if os.path.lexists(p))

    def authorize(con: Any) -> None:
        """CRANE's authorizer on every connection the run opens: ATTACH and VACUUM INTO (SQLITE_ATTACH) only of
        databases `db_ok` accepts (SQLite writes them in C, unseen by the audit hook)."""
        def auth(action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
            if action == _SQLITE_ATTACH and not db_ok(str(arg1 or "")):
                refuse(f"attaching a database outside the cell's working folder ({str(arg1)[:200]!r})", path=arg1)
                return _SQLITE_DENY  # (a session: the refusal is recorded, SQLite answers "not authorized")
            return 0
        try:
            con.set_authorizer(auth)
        except Exception:  # noqa: BLE001 - a connection that takes no authorizer: refuse it, never let it write
            refuse("a database connection CRANE cannot authorize")

    def sqlite_connect(orig: Any) -> Any:
        def connect(*args: Any, **kwargs: Any) -> Any:
            state["sqlite"] = state.get("sqlite", 0) + 1
            try:
                con = orig(*args, **kwargs)
            finally:
                state["sqlite"] -= 1
            authorize(con)
            return con
        return connect

    _wrap_sqlite(sqlite_connect)

    # code naming a library's file is a library's only where the import system made it (round 17, F1/F2)
    provenance = guard.provenance = CodeProvenance(is_library, makes_own_code)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if _own_here(state):
            return
        if event in CODE_EVENTS:
            claimed = provenance.claimed(event, args, sys._getframe(1))
            if claimed:
                guard.forged.update(claimed)
            return
        if event == "import":
            guard.dirty = True
            return
        if event == "open":
            if hidden and args and is_hidden(args[0]):
                refuse(f"reading the kernel's connection file or Jupyter's runtime folder ({str(args[0])[:200]!r})",
                       path=args[0])
            flags = args[2] if len(args) > 2 else 0
            writes = bool(isinstance(flags, int) and flags & _WRITE_FLAGS)
            if args and not isinstance(args[0], int):
                entry = other_process_entry(args[0], writes or not isinstance(flags, int))
                if entry is not None:  # (round 7: the guard alone read and wrote the kernel's memory this way)
                    refuse(f"opening another process's {entry!r}", path=entry)
            if writes and not writable(args[0], event, True):
                refuse(f"writing a file outside the cell's working folder ({os.fsdecode(args[0])[:200]!r})"
                       if not isinstance(args[0], int) else "writing a file", path=args[0])
            return
        paths = _PATH_EVENTS.get(event)
        if paths is not None:
            if any(i < len(args) and args[i] not in (None, -1) for i in _DIR_FD.get(event, ())):
                if from_user():  # the cell's own: where the descriptor points cannot be checked
                    refuse(f"{event} relative to a directory descriptor")
                return  # a library's walk below a directory it opened (shutil.rmtree's, already vetted)
            for i in paths:
                if i < len(args) and not writable(args[i], event, event in _FOLLOWS or (i == 0 and event in _MOVES)):
                    if event == "os.mkdir" and _exists(args[i]):
                        # what the call does anyway, changing nothing: a library's makedirs(exist_ok=True) of a
                        # folder that is there (its cache, its config) goes on as in the kernel
                        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), args[i])
                    refuse(f"{event} outside the cell's working folder ({str(args[i])[:200]!r})", path=args[i])
            return
        if event in ("os.scandir", "os.listdir"):
            if args and isinstance(args[0], int):
                return
            if hidden and is_hidden("." if not args or args[0] is None else args[0]):
                refuse(f"listing Jupyter's runtime folder ({str(args[0])[:200]!r})", path=args[0])
            _own_begin(state)
            try:
                folder.unfold(args[0] if args else None)
            except OSError:
                pass
            finally:
                _own_end(state)
            return
        if event == "os.chdir":
            if not args or not folder.inside(args[0]):
                refuse(f"leaving the cell's working folder (os.chdir to {str(args[0] if args else '')[:200]!r})",
                       path=args[0] if args else None)
            return
        what = _DENY_EVENTS.get(event) if event != "urllib.Request" or not args or not _local_file_url(args[0]) \
            else None
        if event in _UNIX_IPC and guard.fork_children and _ipc_in(args, ctx.scratch):
            return  # multiprocessing's own channels between the run's processes (a listener in the run's scratch)
        if event == "os.fork" and guard.fork_children and os.getpid() == mypid and _forked_by_multiprocessing(guard):
            return  # the guard let a fork child of multiprocessing start (guard.forks_a_child): a copy of this one
        if what is not None and not guard.leeway(event):  # (a library's import-time program or bind, worker/imports.py)
            target = args[0] if args and event not in ("os.fork", "os.forkpty") else None
            refuse(f"{what}" + (f" ({str(target)[:200]})" if target is not None else ""))
        if event == "os.kill":
            if len(args) > 1 and args[0] == mypid and os.getpid() == mypid:
                if state.get("running") and "end" in state and _ends_process(args[1]):
                    state["end"](f"sends signal {args[1]} to its own process", 128 + int(args[1]))
                return
            if args and os.getpid() == mypid and _our_child(args[0]):
                return  # multiprocessing ending a fork child it started (a DataLoader's shutdown)
            refuse(f"signalling another process (pid {args[0] if args else '?'})")
        elif event == "signal.pthread_kill" and _NOTICES.get("listener") == threading.get_ident() \
                and os.getpid() == mypid:
            return  # the notices' thread ringing the worker's main thread (`_listen_to_children`)
        elif event in ("signal.pthread_kill", "_winapi.CreateProcess", "_winapi.TerminateProcess", "os.startfile"):
            refuse(event)
        elif event in _FROM_USER_EVENTS:
            if event == "sys.setprofile" and state.pop("unset", False):
                return  # CPython unsetting the guard's profile hook after it refused a call (a session)
            if from_user():
                refuse(_FROM_USER_EVENTS[event])
        elif event == "os.putenv" and len(args) > 1:
            for p in native_env_paths(args[0], args[1]):
                if not writable(p, "open", True):
                    refuse(f"setting {os.fsdecode(args[0])} to have native code write outside the cell's working "
                           f"folder ({p[:200]!r})", path=p)
        elif event == "sqlite3.connect" and args:
            db = args[0]
            name = os.fsdecode(db) if isinstance(db, (str, bytes, os.PathLike)) else ""
            if not db_ok(name):
                refuse(f"opening a database outside the cell's working folder ({name[:200]!r})", path=name)
        elif event == "sqlite3.connect/handle" and args and not state.get("sqlite"):
            refuse("a database connection not made through sqlite3.connect (CRANE's authorizer cannot be set on it)")
        elif event.startswith(_WINREG_WRITES):
            refuse(f"changing the Windows registry ({event})")

    sys.addaudithook(hook)


_SQLITE_ATTACH, _SQLITE_DENY = 24, 1


def _wrap_sqlite(wrap: Any) -> None:
    """`sqlite3.connect` (in `_sqlite3`, `sqlite3.dbapi2` and `sqlite3`) replaced by `wrap(original)`, which sets
    CRANE's authorizer on each connection (the audit event comes before a connection can take one)."""
    import functools
    try:
        import sqlite3
        import sqlite3.dbapi2
    except ImportError:
        return
    orig = sqlite3.dbapi2.__dict__.get("connect")
    if orig is None or getattr(orig, "__crane_shield__", False):
        return
    w = functools.wraps(orig)(wrap(orig))
    del w.__wrapped__
    setattr(w, "__crane_shield__", True)  # noqa: B010
    for name in ("_sqlite3", "sqlite3.dbapi2", "sqlite3"):
        mod = sys.modules.get(name)
        if mod is not None and mod.__dict__.get("connect") is orig:
            mod.__dict__["connect"] = w


_SQLITE_SIBLINGS = ("-wal", "-shm", "-journal")  # the files SQLite keeps beside a database (copied with it)


def _sqlite_target(name: str) -> tuple[str | None, bool]:
    """(the file a database name opens, None for memory; whether it is opened read-only): a `file:` URI is parsed
    (its path, and its `mode` parameter: every value must be `ro` or `memory`), never matched as a substring."""
    if not name or name == ":memory:":
        return None, True
    if not name.startswith("file:"):
        return name, False
    from urllib.parse import parse_qs, unquote, urlsplit
    parts = urlsplit(name)
    modes = parse_qs(parts.query, keep_blank_values=True).get("mode", [])
    if modes and all(m == "memory" for m in modes) or parts.path in ("", ":memory:") and not parts.netloc:
        return None, True
    path = unquote(parts.path)
    return path, bool(modes) and all(m in ("ro", "memory") for m in modes)


_UNIX_IPC = ("socket.bind", "socket.connect", "socket.sendto", "socket.sendmsg")


def _ipc_in(args: tuple[Any, ...], scratch: str) -> bool:
    """A UNIX-domain socket operation within the run: its address a path under the run's scratch folder (where
    multiprocessing makes its listeners: TMPDIR is the scratch), or, for a send, no address (a connected socket:
    its connection was vetted, or a socket pair). Abstract addresses are refused (they reach other programs)."""
    sock = args[0] if args else None
    unix = getattr(sys.modules.get("socket"), "AF_UNIX", None)
    if unix is None or getattr(sock, "family", None) != unix:
        return False
    addr = args[1] if len(args) > 1 else None
    if addr is None:
        return True
    if type(addr) not in (str, bytes) or not addr or addr[:1] in ("\0", b"\0"):
        return False
    path = os.path.realpath(os.fsdecode(addr))  # the whole address: a link in the scratch to another socket is not
    root = os.path.realpath(scratch)
    return path.startswith(root + os.sep)


_CLASS_DICT = type.__dict__["__dict__"]


def _library_attr(module: str, cls: str, name: str) -> Any:
    """`module.cls.__dict__[name]`, read without any attribute lookup the cell could have hooked (None if not there)."""
    m = sys.modules.get(module)
    c = m.__dict__.get(cls) if type(m) is types.ModuleType else None
    if c is None or not issubclass(type(c), type):
        return None
    return _CLASS_DICT.__get__(c, type).get(name)


def _forked_by_multiprocessing(guard: CallGuard) -> bool:
    """The `os.fork` being audited is made by multiprocessing's fork launcher (`popen_fork.Popen._launch`) for a
    `BaseProcess.start` the guard vetted (`guard.forks_a_child`), not by a direct call of the launcher."""
    codes = []
    for mod, cls, fn in (("multiprocessing.popen_fork", "Popen", "_launch"),
                         ("multiprocessing.process", "BaseProcess", "start")):
        f = _library_attr(mod, cls, fn)
        if type(f) is not types.FunctionType:
            return False
        codes.append(guard.code_of(f))  # (its own code, where the lean guard gave it a trampoline)
    frame: types.FrameType | None = sys._getframe(2)  # 0: this function, 1: the audit hook, 2: who called os.fork
    if frame is None or frame.f_code is not codes[0]:
        return False
    for _ in range(6):  # _launch <- Popen.__init__ <- (Fork)Process._Popen [<- context] <- BaseProcess.start
        frame = frame.f_back
        if frame is None:
            return False
        if frame.f_code is codes[1]:
            return True
    return False


def _our_child(pid: Any) -> bool:
    """`pid` is a child of this process that has not been reaped (asked of the OS, not of multiprocessing's
    registry, which the cell could change)."""
    waitid = getattr(os, "waitid", None)
    if type(pid) is not int or pid <= 0 or waitid is None:
        return False
    try:
        waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return True
    except (ChildProcessError, OSError):
        return False


def _child_after_fork(guard: CallGuard, parent: int, ctx: _Ctx) -> None:
    """In a fork child: it goes on only under the guard (a fork from a thread the guard did not see ends at once)
    and only while the worker lives (a watcher ends it when its parent changes: the worker's end, however it
    ended). The run's result channel (and a head's wake-up pipe) is closed in it: what a child has to say (a
    refusal) goes through the worker (`_tell_parent`), so no line of a child ever reaches the channel."""
    if not guard.active or (getattr(sys, "monitoring", None) is None and not guard.lean and sys.getprofile() is None):
        os._exit(70)
    if _NOTICES:
        for fd in (ctx.result_fd, getattr(ctx, "done_fd", -1)):
            if type(fd) is int and fd > 2:
                try:
                    os.close(fd)
                except OSError:
                    pass
        ctx.result_fd = -1

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="crane-fork-child-watch", daemon=True).start()


NOTICES_FORGED = "the cell wrote into CRANE's result channel (the pipe its pools' processes hand refusals on)"
_NOTICES: dict[str, Any] = {}  # the run's channel from its fork children to the worker (`_listen_to_children`)
# the signal a fork child sends the worker with its refusal (a real-time one where there are: no library's)
_NOTICE_SIGNAL = getattr(signal, "SIGRTMIN", 0) + 3 if hasattr(signal, "SIGRTMIN") else getattr(signal, "SIGUSR2", 0)


def _listen_to_children(run: Portable, mypid: int) -> None:
    """A refusal in a fork child of the run (a pool's task, a DataLoader's worker) is the run's: the child writes
    it into a pipe made here (`_tell_parent`); a thread of the worker waits for it and signals the worker's main
    thread (`pthread_kill`: a signal sent to the process could reach another thread and leave the main thread
    waiting on its pool), again every 50 ms while it is unread; the handler there ends the run `blocked` as the
    worker's own refusal would (a pool whose process ended would otherwise wait for it until the deadline).
    Whatever is still in the pipe after the cell is read then (`_end_children`)."""
    if not _NOTICE_SIGNAL or threading.current_thread() is not threading.main_thread():
        return
    import select
    wait, ring, nap, main = select.select, signal.pthread_kill, time.sleep, threading.get_ident()
    try:
        r, w = os.pipe()
        os.set_blocking(r, False)
        signal.signal(_NOTICE_SIGNAL, lambda signum, frame: _children_refused())
    except (OSError, ValueError, AttributeError):
        return

    def listen() -> None:
        while True:
            try:
                if wait([r], [], [])[0]:
                    ring(main, _NOTICE_SIGNAL)
            except (OSError, ValueError):
                return
            nap(0.05)

    _NOTICES.update(pid=mypid, r=r, w=w, refuse=run.refuse, state=run.ctx.audit_state, denied=run.ctx.denied)
    t = threading.Thread(target=listen, name="crane-child-notices", daemon=True)
    t.start()
    _NOTICES["listener"] = t.ident


def _tell_parent(what: str, layer: str, path: Any) -> None:
    """In a fork child of the run: hand the refusal to the worker and end (the child writes nothing else)."""
    import json
    import select
    try:
        where = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else None
        # one write of at most PIPE_BUF bytes is whole, however many children write at once (4096 on Linux, 512 on
        # macOS, the POSIX minimum): a cut or interleaved line is no JSON, which the worker takes for a forged notice
        limit = min(getattr(select, "PIPE_BUF", 512), 4096)
        keep = 1000  # characters of the call and the path: fewer until the line fits (an escape is up to 12 bytes)
        while True:
            line = json.dumps({"what": what[:keep], "layer": layer[:100], "path": where and where[:keep],
                               "pid": os.getpid()}).encode() + b"\n"
            if len(line) <= limit or keep < 4:
                break
            keep //= 2
        os.write(_NOTICES["w"], line)
    except (OSError, TypeError, ValueError):
        pass
    finally:
        os._exit(0)


def _children_refused() -> None:
    """In the worker (its signal handler, and after the cell): a refusal a fork child handed over ends the run
    `blocked`, named as the child's. Nothing while CRANE's own work is under way (read again after the cell)."""
    if not _NOTICES or os.getpid() != _NOTICES["pid"] or _NOTICES["state"].get("own") or _NOTICES["state"].get("ended"):
        return
    import json
    try:
        data = os.read(_NOTICES["r"], 65536)
    except OSError:  # (nothing there)
        return
    got: Any = None
    try:
        got = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        pass
    child = got.get("pid") if isinstance(got, dict) else None
    if not (isinstance(got, dict) and set(got) == {"what", "layer", "path", "pid"} and isinstance(got["what"], str)
            and isinstance(got["layer"], str) and (got["path"] is None or isinstance(got["path"], str))
            and type(child) is int and child != _NOTICES["pid"]):
        # not what `_tell_parent` writes: the cell wrote into this pipe (it holds its write end, for its pools)
        _NOTICES["refuse"](f"{NOTICES_FORGED}: writing there", "audit hook", None)
        return
    what, layer, path = got["what"], got["layer"] or "audit hook", got["path"]
    _NOTICES["denied"].append(f"crane sandbox: a process the cell started (pid {child if type(child) is int else '?'}) "
                              "was refused the call below")
    _NOTICES["refuse"](what or "a call in a process the cell started", layer, path)


def _hidden_paths(run_dir: str) -> list[str]:
    """What the worker must not read (worker/linux.hidden_paths), from the run's env.json."""
    import json
    facts: dict = {}
    try:
        with open(os.path.join(run_dir, "env.json")) as f:
            facts = json.load(f)
    except (OSError, ValueError):
        pass
    return hidden_paths(facts if isinstance(facts, dict) else {})


def _hidden_inodes(paths: list[str]) -> frozenset:
    """(device, inode) of each of `paths` and of each entry of those that are folders: what the audit hook refuses
    to open or list where no OS layer hides them (a link or another name for the same file is the same inode)."""
    out = set()
    for p in paths:
        try:
            st = os.stat(p)
            out.add((st.st_dev, st.st_ino))
            names = os.listdir(p) if os.path.isdir(p) else []
        except OSError:
            continue
        for name in names:
            try:
                st = os.stat(os.path.join(p, name))
            except OSError:
                continue
            out.add((st.st_dev, st.st_ino))
    return frozenset(out)


def _os_layer(args: dict, scratch: str) -> dict:
    """The platform's OS layer under the guard, applied now (before the state is loaded): Linux's Landlock
    (worker/linux.py) for a `portable` run; none for `guard` (the guard alone, asked for) and on other platforms
    (macOS's sandbox-exec is applied by the daemon when it starts the worker: `os_layers`). A `portable` run on
    Linux whose layer cannot be set up ends here (the daemon checked first: never a run passed off as confined)."""
    if args.get("confinement") != "portable" or not sys.platform.startswith("linux"):
        return {"ran": False, "why": "not asked for" if args.get("confinement") != "portable" else sys.platform}
    home = os.path.dirname(os.environ.get("IPYTHONDIR") or "")
    writable = [args["dir"], scratch] + ([home] if os.path.basename(home).startswith("crane-tw-") else [])
    return confine_worker([os.path.realpath(p) for p in writable], _hidden_paths(args["dir"]))


def prepare_portable(args: dict, shell: Any, out: int) -> tuple[_Ctx, Portable]:
    """Everything before the state is loaded, without OS confinement (see the module docstring); `out`: the pipe
    to the daemon."""
    t0 = time.perf_counter()
    for name in ("SIGALRM", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    ctx = _Ctx(args, shell)
    _open_channel(ctx, out)
    _neutralise_kernel_io(ctx)
    sys.dont_write_bytecode = True
    os.environ["TMPDIR"] = ctx.scratch
    try:
        import tempfile
        tempfile.tempdir = ctx.scratch
    except Exception:
        pass
    t_view = time.perf_counter()
    home = os.path.dirname(os.environ.get("IPYTHONDIR") or "")  # (a head's: its view staged for this run)
    staged = os.path.join(home, "view-next") if os.path.basename(home).startswith("crane-tw-") else None
    folder = RunFolder(os.getcwd(), os.path.join(args["dir"], "view"), ctx.scratch, staged)
    os.chdir(folder.root)
    run = Portable(ctx, folder)
    t_layer = time.perf_counter()
    ctx.mode = "portable"
    ctx.mode_reason = args.get("portable_reason")
    ctx.places = [folder.root, ctx.scratch]
    os_layer = _os_layer(args, ctx.scratch)
    t_guard = time.perf_counter()
    layers = list(PORTABLE_LAYERS) + list(args.get("os_layers") or []) + (
        list(os_layer.get("layers") or [LINUX_LAYER]) if os_layer.get("ran") else [])  # the OS layers that ran, in order
    ctx.confinement = {"portable": True, "layers": layers, "redirect": bool(folder.linked), "staged_view": folder.staged,
                       "os_layer": os_layer}
    ctx.confinement.update(os_layer.pop("record", None) or {})  # what the layer adds to the record (its ABI)
    # Landlock holds the worker: the guard keeps only what the OS layer leaves to it, with no per-call hook (no
    # profile hook, no sys.monitoring: worker/guard.py, "the lean guard"); `guard` runs and other platforms keep it
    run.guard.lean = bool(os_layer.get("ran"))
    # ... and its pools' processes inherit it: they run inside the run (worker/pools.py); elsewhere none
    run.guard.pools = bool(os_layer.get("ran")) and run.guard.fork_children
    ctx.confinement["joblib"] = install_joblib(run.guard.pools)
    ctx.confinement["sequential_joblib"] = not run.guard.pools
    run.guard.leeway = import_leeway(bool(os_layer.get("ran") or args.get("os_layers")), run.guard.is_user)
    answer_platform_first(bool(os_layer.get("ran") or args.get("os_layers")))  # (before the hook: `uname -p`)
    answer_physical_cores_first()  # (a loky imported since the worker started: `lscpu`)
    _install_portable_hook(run)
    ctx.confinement["shielded"] = shield_unaudited(run.guard, lambda: _own_here(ctx.audit_state))
    # a path into the REAL working folder (computed in the kernel) handed to the OS as its run-folder counterpart
    install_abs_paths(run.translate, lambda: run.guard.active and not _own_here(ctx.audit_state))
    if run.guard.lean:
        run.guard.arm()  # before the state is loaded and the fence is taken (its replacements are CRANE's own)
    t_end = time.perf_counter()
    ctx.steps.update(start=round((t_view - t0) * 1000.0, 3), view=round((t_layer - t_view) * 1000.0, 3), os_layer=round((t_guard - t_layer) * 1000.0, 3),
                     guard=round((t_end - t_guard) * 1000.0, 3), total=round((t_end - t0) * 1000.0, 3))
    return ctx, run


def apply_limits(run: Portable, args: dict, budget_s: float) -> None:
    """The run's memory, CPU-time and file-size limits (worker/limits.py), set just before the cell (the audit hook
    refuses `resource.setrlimit` to everyone else). Recorded in the record's `confinement.limits`."""
    state = run.ctx.audit_state
    _own_begin(state)
    try:
        cpu = args["cpu_s"] if args["cpu_s"] is not None else float(budget_s) + 1.0
        limits = set_run_limits(int(args["memory_mb"]), float(cpu), int(args["layer_mb"]))
    except Exception as exc:  # noqa: BLE001 - a platform without them: the deadline still bounds the run
        limits = {"failed": [f"{type(exc).__name__}: {exc}"]}
    finally:
        _own_end(state)
    run.ctx.memory_mb = int(limits.get("memory_budget_mb") or 0)
    run.ctx.confinement["limits"] = limits


def lift_limits(run: Portable) -> None:
    """A session's memory limit lifted while it loads more of the kernel's state (set again before the next run)."""
    state = run.ctx.audit_state
    _own_begin(state)
    try:
        lift_memory_limit()
    finally:
        _own_end(state)


class guarded:  # noqa: N801 - (used as the function it was: `with guarded(run):`)
    """The call guard around one session command (nothing when the session is not portable). A class, not a
    `contextlib.contextmanager`: its exit is CRANE's own statements, never the generator protocol, whose
    `except StopIteration` a command that swapped `builtins.StopIteration` for a class of its own turns into an
    exception out of the worker's loop (round 12, h9: the worker ended with 70 and the run came back as a crash)."""

    def __init__(self, run: Portable | None) -> None:
        self.run = run

    def __enter__(self) -> None:
        run = self.run
        if run is not None:
            run.guard.refresh()
            run.ctx.confinement["guard"] = run.guard.install()

    def __exit__(self, *exc: object) -> None:
        if self.run is not None:
            self.run.guard.leave()


def run_portable(run: Portable, source: str) -> dict:
    """Run the cell under the call guard (installed around the cell only)."""
    begin_portable(run)
    try:
        rec = run_source(run.ctx, source)
    finally:
        guard_off(run)
    return finish_portable(run, source, rec)


def begin_portable(run: Portable) -> None:
    """Just before the cell: the call guard installed (around the cell only)."""
    run.t0 = time.perf_counter()
    reach_user_open(getattr(run.ctx.shell, "user_ns", None))  # (worker/abs_paths.py)
    run.guard.refresh()
    run.ctx.confinement["guard"] = run.guard.install()


def guard_off(run: Portable) -> None:
    """Right after the cell: the call guard off for CRANE's thread (`CallGuard.leave`: the threads the cell left
    running stay guarded), the processes its multiprocessing left ended."""
    run.guard.leave()
    _end_children()


def finish_portable(run: Portable, source: str, rec: dict) -> dict:
    """The cell's record as the portable sandbox reports it (a crash near the run's view of the folder, a refusal
    of the OS layer's)."""
    folder = run.folder
    if rec.get("verdict") == "crash" and view_sensitive(source, rec.get("traceback") or [], str(rec.get("evalue") or ""),
                                                       (folder.real, folder.mirror, folder.mirror_real)):
        run.ctx.confinement["view_touched"] = True  # the daemon makes the crash "likely", never certain
    return _os_refusal(rec, run.ctx.confinement.get("os_layer") or {})


def _end_children() -> None:
    """Processes the cell's multiprocessing started and left running end with the cell (the daemon then ends the
    worker's whole tree; these may no longer be in it once the worker is gone). Only what multiprocessing's own
    fork launcher made is touched, read by exact type (the guard is off here). Then, every child gone
    (worker/reaper.py), a refusal one of them handed over is the run's (`_children_refused`)."""
    _stop_pool_handlers()
    _kill_multiprocessing_children()
    if _NOTICES:
        try:
            end_descendants()
        except BaseException:  # noqa: BLE001 - the cell's own signal handler: their parent-death signal ends them
            pass
        _children_refused()


def _stop_pool_handlers() -> None:
    """Each `multiprocessing.Pool` the cell left open stops replacing its workers before they are killed: its worker
    handler thread's state set to TERMINATE, as `Pool.terminate` does first, so the handler leaves its loop when a
    kill wakes it. Else it reaps each killed worker and forks another, which ends at once unguarded
    (`_child_after_fork`) and is replaced again: a fork storm the end chased until its deadline (up to 5 s, twice,
    under load). Only the standard library's handler, read by exact type (the guard is off here; the cell's own
    subclass of Pool may keep its storm: its kills are still by pidfd, `reaper.kill_child`)."""
    pool = sys.modules.get("multiprocessing.pool")
    th = sys.modules.get("threading")
    if type(pool) is not types.ModuleType or type(th) is not types.ModuleType:
        return
    cls, thread_type, active = pool.__dict__.get("Pool"), th.__dict__.get("Thread"), th.__dict__.get("_active")
    handle: Any = cls.__dict__.get("_handle_workers") if type(cls) is type else None
    func = handle.__func__ if type(handle) in (classmethod, staticmethod) else None
    stop = pool.__dict__.get("TERMINATE")
    if func is None or type(stop) not in (str, int) or type(thread_type) is not type or type(active) is not dict:
        return
    for t in list(dict.values(active)):
        if type(t) is not thread_type:
            continue
        d = object.__getattribute__(t, "__dict__")
        target = d.get("_target") if type(d) is dict else None
        if target is func or (type(target) is types.MethodType and object.__getattribute__(target, "__func__") is func):
            d["_state"] = stop


def _kill_multiprocessing_children() -> None:
    pf = sys.modules.get("multiprocessing.popen_fork")
    children = multiprocessing_children()
    popen_type = pf.__dict__.get("Popen") if type(pf) is types.ModuleType else None
    if children is None or popen_type is None or not issubclass(type(popen_type), type):
        return
    ctx = sys.modules.get("multiprocessing.context")
    kinds = [ctx.__dict__.get(k) for k in ("Process", "ForkProcess")] if type(ctx) is types.ModuleType else []
    for p in list(set.__iter__(children)):
        d = object.__getattribute__(p, "__dict__") if any(type(p) is k for k in kinds if k is not None) else {}
        popen = d.get("_popen") if type(d) is dict else None
        pid = popen.__dict__.get("pid") if type(popen) is popen_type else None
        if type(pid) is int:
            kill_child(pid)  # (a pidfd: one its pool's handler reaped meanwhile is never signalled, nor judged)


