"""Finding the kernel a notebook runs on, from the connection files in the Jupyter runtime dirs.

Where VS Code's Jupyter extension writes them (vscode-jupyter `jupyterPaths.node.ts` `getRuntimeDir`,
`temp.ts`; ../shared/notes/vscode-lsp-kernel.md §3.3): `$JUPYTER_RUNTIME_DIR`; else on Linux
`$XDG_RUNTIME_DIR/jupyter/runtime` when that is set, else the classic `~/.local/share/jupyter/runtime`
(whatever `JUPYTER_DATA_DIR`/`XDG_DATA_HOME` say), `~/Library/Jupyter/runtime` on macOS,
`%APPDATA%/jupyter/runtime` on Windows; and when that dir is not writable, its fallback
`<its global storage>/version-<v>/jupyter/runtime` (the client passes the storage folder as
`$CRANE_JUPYTER_STORAGE`). Plus jupyter_core's runtime dir (`$JUPYTER_DATA_DIR/runtime`,
`$XDG_DATA_HOME/jupyter/runtime`: where `jupyter console`/`lab` kernels are). Each `kernel-*.json` candidate,
newest first, is asked privately for `__vsc_ipynb_file__`; the one naming the notebook wins. What each file's
kernel said is remembered (per file and mtime) for a while, so looking again every few seconds costs nothing
while no new kernel appears.
"""

from __future__ import annotations

import glob
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from crane.lsp.kernel_attach import KernelIdentity, connect, identify
from crane.lsp.notebook_map import same_path

log = logging.getLogger(__name__)

MAX_CANDIDATES = 32
OTHER_TTL_S = 30.0  # re-ask a kernel that named another (or no) notebook after this long
SILENT_RETRY_S = (2.0, 60.0)  # a file whose kernel does not answer: retry after 2 s, doubling up to 60 s
YOUNG_S = 120.0  # ... unless the file is this recent: a kernel still starting or busy with its first cells


def runtime_dirs(env: dict[str, str] | None = None, platform: str | None = None) -> list[str]:
    """The dirs to look for connection files in, in that order (this process's environment by default)."""
    ours = env is None
    env = dict(os.environ) if env is None else env
    platform = sys.platform if platform is None else platform
    home = env.get("HOME") or os.path.expanduser("~")
    dirs: list[str] = []
    if env.get("JUPYTER_RUNTIME_DIR"):
        dirs.append(env["JUPYTER_RUNTIME_DIR"])
    if platform == "darwin":
        dirs.append(os.path.join(home, "Library", "Jupyter", "runtime"))
    elif platform == "win32":
        if env.get("APPDATA"):
            dirs.append(os.path.join(env["APPDATA"], "jupyter", "runtime"))
    else:
        if env.get("XDG_RUNTIME_DIR"):
            dirs.append(os.path.join(env["XDG_RUNTIME_DIR"], "jupyter", "runtime"))
        dirs.append(os.path.join(home, ".local", "share", "jupyter", "runtime"))
    if env.get("CRANE_JUPYTER_STORAGE"):  # the Jupyter extension's fallback, in its global storage
        storage = env["CRANE_JUPYTER_STORAGE"]
        dirs.extend(sorted(glob.glob(os.path.join(glob.escape(storage), "version-*", "jupyter", "runtime"))))
    if env.get("JUPYTER_DATA_DIR"):
        dirs.append(os.path.join(env["JUPYTER_DATA_DIR"], "runtime"))
    elif env.get("XDG_DATA_HOME") and platform not in ("darwin", "win32"):
        dirs.append(os.path.join(env["XDG_DATA_HOME"], "jupyter", "runtime"))
    if ours:  # jupyter_core reads this process's environment (and its platformdirs option)
        try:
            from jupyter_core.paths import jupyter_runtime_dir

            dirs.append(jupyter_runtime_dir())
        except Exception:  # jupyter_core missing or broken: the other dirs still count
            pass
    seen: set[str] = set()
    out = []
    for d in dirs:
        real = os.path.realpath(os.path.expanduser(d))
        if real not in seen:
            seen.add(real)
            out.append(real)
    return out


def candidates(dirs: list[str]) -> list[str]:
    """`kernel-*.json` files in `dirs`, most recently modified first."""
    found: dict[str, float] = {}
    for d in dirs:
        for path in glob.glob(os.path.join(glob.escape(d), "kernel-*.json")):
            try:
                found[path] = os.stat(path).st_mtime
            except OSError:
                continue
    return sorted(found, key=found.__getitem__, reverse=True)[:MAX_CANDIDATES]


@dataclass
class Match:
    connection_file: str
    identity: KernelIdentity


class Discovery:
    """Matches notebooks to kernels; thread-safe; remembers what each connection file's kernel said."""

    def __init__(self, timeout: float = 1.0):
        self.timeout = timeout
        self._said: dict[tuple[str, int], tuple[str | None, float]] = {}  # (file, mtime_ns) -> (nb path, when)
        self._silent: dict[tuple[str, int], tuple[float, float]] = {}  # no answer: (retry at, backoff)
        self._lock = threading.Lock()

    def find(self, notebook_path: str, exclude: set[str] | None = None, dirs: list[str] | None = None) -> Match | None:
        files = [f for f in candidates(dirs if dirs is not None else runtime_dirs()) if f not in (exclude or set())]
        todo = []
        now = time.monotonic()
        for f in files:
            key = self._key(f)
            if key is None:
                continue
            with self._lock:
                said = self._said.get(key)
                silent = self._silent.get(key)
            if silent is not None and now < silent[0]:
                continue  # did not answer recently
            if said is not None and now - said[1] < OTHER_TTL_S and not same_path(said[0], notebook_path):
                continue  # it told us recently about another notebook
            todo.append((f, key))
        if not todo:
            return None
        with ThreadPoolExecutor(max_workers=min(4, len(todo)), thread_name_prefix="crane-discovery") as pool:
            results = list(pool.map(lambda fk: self._ask(fk[0], fk[1], notebook_path), todo))
        return next((r for r in results if r is not None), None)

    def _key(self, path: str) -> tuple[str, int] | None:
        try:
            return (path, os.stat(path).st_mtime_ns)
        except OSError:
            return None

    def _no_answer(self, key: tuple[str, int]) -> None:
        """Back off from a file whose kernel did not answer: stale files of dead kernels are common, but a
        young file's kernel is likely alive and busy (starting, importing, running the user's first cell:
        the moment CRANE is declined access through the Jupyter extension), so it is asked again soon."""
        young = time.time() - key[1] / 1e9 < YOUNG_S
        with self._lock:
            prev = self._silent.get(key)
            backoff = min(prev[1] * 2, SILENT_RETRY_S[1]) if prev and not young else SILENT_RETRY_S[0]
            self._silent[key] = (time.monotonic() + backoff, backoff)

    def _ask(self, path: str, key: tuple[str, int], notebook_path: str) -> Match | None:
        try:
            conn = connect(path, self.timeout)
        except Exception as exc:
            log.debug("discovery: %s does not answer: %s", path, exc)
            self._no_answer(key)
            return None
        try:
            ident = identify(conn, self.timeout)
        except Exception as exc:
            log.debug("discovery: %s cannot be identified: %s", path, exc)
            conn.close()
            self._no_answer(key)
            return None
        conn.close()  # the attachment reconnects on its own I/O thread
        with self._lock:
            self._silent.pop(key, None)
            self._said[key] = (ident.notebook_path, time.monotonic())
        return Match(path, ident) if same_path(ident.notebook_path, notebook_path) else None
