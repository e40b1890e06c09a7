"""Which kernel `crane mcp` serves, found again on every tool call: a server configured once keeps working when
the kernel restarts, starts later than the agent, or gets a new connection file.

A `Locator` names the kernel the user meant and lists where it may be now, best first:

- `FileLocator`: one connection file, re-read on every call (a kernel restarted under the same name, a file
  written after the server started);
- `GlobLocator`: a connection-file glob (`~/.local/share/jupyter/runtime/kernel-*.json`), newest file first;
- `NewestLocator`: the newest kernel in the Jupyter runtime folders (`crane.lsp.discovery.runtime_dirs`: where
  `jupyter lab`, `jupyter console` and VS Code's Jupyter extension write connection files);
- `NotebookLocator`: the kernel of one notebook: through a Jupyter Server's sessions API (`--server URL`), or, on
  this machine, the runtime folders' kernel that VS Code's Jupyter extension told the notebook's path
  (`__vsc_ipynb_file__`, `crane.lsp.discovery.Discovery`);
- `FixedLocator`: a kernel id on a Jupyter Server.

`KernelFollower.connection()` returns a live connection to the first candidate that answers, keeping the one it
has while that is still the best candidate and alive; a candidate that did not answer is skipped for a while
(its file unchanged) unless it is the best one. When none answers it raises `KernelUnavailable`, whose message names the problem and what
to do; the MCP tools turn it into a result with `isError`. Each connection it keeps is watched
(`crane.mcp.busy.BusyWatch`): `KernelFollower.busy()` says another client's cell is running, so a tool answers at
once instead of queueing a private request behind the user's cell until its timeout.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from crane.errors import CraneError
from crane.kernel.target import KernelTarget, ServerSpec

log = logging.getLogger(__name__)

ATTACH_TIMEOUT_S = 5.0  # one candidate's chance to answer
SILENT_RETRY_S = 20.0  # a candidate that did not answer (same file, same mtime) is skipped this long
MAX_CANDIDATES = 8
_AGAIN = "CRANE looks for the kernel again on every call, so the next call can succeed without restarting " \
         "`crane mcp`."


class KernelUnavailable(CraneError):
    """No kernel to serve right now; the message says why and what to do."""


@dataclass(frozen=True)
class Candidate:
    """A place the kernel may be: a target, and a key that changes when the kernel behind it may have changed
    (a connection file's path and mtime)."""

    target: KernelTarget
    key: tuple[str, int]


class Locator(Protocol):
    describe: str

    def candidates(self) -> list[Candidate]:
        """Where the kernel may be now, best first; empty (or raises KernelUnavailable) when nowhere."""

    def missing(self) -> str:
        """Why there is no candidate, and what to do."""


def _file_candidate(path: str) -> Candidate | None:
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return Candidate(KernelTarget.local(path), (os.path.abspath(path), mtime))


def _newest_first(paths: list[str]) -> list[Candidate]:
    found = [c for c in (_file_candidate(p) for p in paths) if c is not None]
    return sorted(found, key=lambda c: c.key[1], reverse=True)[:MAX_CANDIDATES]


@dataclass
class FileLocator:
    path: str
    describe: str = ""

    def __post_init__(self) -> None:
        self.path = os.path.abspath(os.path.expanduser(self.path))
        self.describe = self.describe or f"kernel {self.path}"

    def candidates(self) -> list[Candidate]:
        c = _file_candidate(self.path)
        return [c] if c is not None else []

    def missing(self) -> str:
        return (f"no kernel: the connection file {self.path} does not exist (yet). Start the kernel, or name one "
                f"that outlives restarts: --newest-kernel, --kernel-of NOTEBOOK, or a glob such as "
                f"--connection-file '{os.path.join(os.path.dirname(self.path), 'kernel-*.json')}'. " + _AGAIN)


@dataclass
class GlobLocator:
    pattern: str
    describe: str = ""

    def __post_init__(self) -> None:
        self.pattern = os.path.expanduser(self.pattern)
        self.describe = self.describe or f"the newest kernel matching {self.pattern}"

    def candidates(self) -> list[Candidate]:
        return _newest_first(glob.glob(self.pattern))

    def missing(self) -> str:
        return f"no kernel: no connection file matches {self.pattern}. Start a kernel. " + _AGAIN


@dataclass
class NewestLocator:
    """The newest kernel in the Jupyter runtime folders `dirs()` lists (the command passes
    `crane.lsp.discovery.runtime_dirs`)."""

    dirs: Callable[[], list[str]]
    describe: str = "the newest kernel in the Jupyter runtime folder"

    def candidates(self) -> list[Candidate]:
        paths = [p for d in self.dirs() for p in glob.glob(os.path.join(glob.escape(d), "kernel-*.json"))]
        return _newest_first(paths)

    def missing(self) -> str:
        return (f"no kernel: no kernel-*.json in the Jupyter runtime folders ({', '.join(self.dirs())}). Start "
                "a kernel (open the notebook and run a cell, or `jupyter lab`); set $JUPYTER_RUNTIME_DIR if your "
                "kernels write their connection files elsewhere. " + _AGAIN)


def _session_matches(session_path: str, notebook: str) -> bool:
    """A Jupyter Server session's path (relative to the server's root) names `notebook` (as the user gave it:
    relative to that root, or a local absolute path ending with it)."""
    s = session_path.strip("/").replace("\\", "/")
    n = notebook.replace("\\", "/")
    return bool(s) and (n.strip("/") == s or n.endswith("/" + s))


@dataclass
class NotebookLocator:
    """The kernel of `notebook`: a Jupyter Server's session for it (`server`), else the local kernel
    `find_local(notebook)` names by its connection file (the command passes `crane.lsp.discovery.Discovery.find`
    over the runtime folders: the kernel VS Code's Jupyter extension told the notebook's path)."""

    notebook: str
    server: ServerSpec | None = None
    find_local: Callable[[str], str | None] | None = None
    describe: str = ""

    def __post_init__(self) -> None:
        if self.server is None:
            self.notebook = os.path.abspath(os.path.expanduser(self.notebook))
        where = f" on {self.server.display}" if self.server else ""
        self.describe = self.describe or f"the kernel of {self.notebook}{where}"

    def candidates(self) -> list[Candidate]:
        if self.server is not None:
            return self._from_server(self.server)
        found = self.find_local(self.notebook) if self.find_local is not None else None
        c = _file_candidate(found) if found else None
        return [c] if c is not None else []

    def _from_server(self, server: ServerSpec) -> list[Candidate]:
        from crane.kernel.errors import ServerError
        from crane.kernel.rest import ServerAPI

        try:
            sessions = ServerAPI(server, timeout=10.0).sessions()
        except ServerError as exc:
            raise KernelUnavailable(f"cannot list the sessions of {server.display}: {exc}. " + _AGAIN) from None
        return [Candidate(KernelTarget.remote(server, s.kernel.id), (s.kernel.id, 0))
                for s in sessions if s.path and _session_matches(s.path, self.notebook)]

    def missing(self) -> str:
        if self.server is not None:
            return (f"no kernel: {self.server.display} has no session for {self.notebook} (open the notebook "
                    "there and start its kernel; the path is relative to the server's root). " + _AGAIN)
        return (f"no kernel: no running kernel says it belongs to {self.notebook} (VS Code's Jupyter extension "
                "tells its kernels their notebook; open the notebook there and run a cell). For a kernel started "
                "elsewhere use --connection-file or --newest-kernel. " + _AGAIN)


@dataclass
class FixedLocator:
    target: KernelTarget
    describe: str = ""

    def __post_init__(self) -> None:
        self.describe = self.describe or self.target.short()

    def candidates(self) -> list[Candidate]:
        return [Candidate(self.target, (self.target.short(), 0))]

    def missing(self) -> str:  # never: there is always the one candidate
        return f"no kernel {self.describe}"


Attach = Callable[[KernelTarget, float], object]


def _attach(target: KernelTarget, timeout: float) -> object:
    from crane.kernel.client import KernelConnection

    return KernelConnection.attach(target, timeout=timeout)


class Watch(Protocol):
    @property
    def busy(self) -> bool: ...

    def stop(self) -> None: ...


def _watch(target: KernelTarget, conn: Any) -> Watch:
    """Follow the kernel's iopub on a client of its own; `conn`'s own requests are not the user's cells."""
    from crane.mcp.busy import BusyWatch

    return BusyWatch(target, conn.client.session.session)


class KernelFollower:
    """A live connection to the kernel a `Locator` names, found again on each `connection()` (thread-safe)."""

    def __init__(self, locator: Locator, attach: Attach = _attach, timeout: float = ATTACH_TIMEOUT_S,
                 watch: Callable[[KernelTarget, Any], Watch | None] = _watch):
        self.locator = locator
        self._attach = attach
        self._start_watch = watch
        self._watch: Watch | None = None
        self.timeout = timeout
        self._lock = threading.Lock()
        self._conn: Any = None
        self._key: tuple[str, int] | None = None
        self._target: KernelTarget | None = None
        self._silent: dict[tuple[str, int], float] = {}  # key -> skip until (monotonic)

    @property
    def describe(self) -> str:
        if self._target is not None:
            return f"{self.locator.describe} (now {self._target.describe()})"
        return self.locator.describe

    def connection(self) -> Any:  # a KernelConnection
        """The live connection to use for one call. Raises `KernelUnavailable`."""
        with self._lock:
            cands = self.locator.candidates()
            if not cands:
                self._drop()
                raise KernelUnavailable(self.locator.missing())
            now = time.monotonic()
            tried: list[str] = []
            for i, c in enumerate(cands):
                if c.key == self._key and self._conn is not None:
                    if self._conn.is_alive():
                        return self._conn
                    self._drop()
                if i > 0 and self._silent.get(c.key, 0.0) > now:  # the best one is always asked
                    tried.append(f"{c.target.describe()}: did not answer recently")
                    continue
                try:
                    conn = self._attach(c.target, self.timeout)
                except Exception as exc:  # KernelError, ServerError, OSError: this candidate is not there
                    log.info("kernel candidate %s: %s", c.target.describe(), exc)
                    self._silent[c.key] = now + SILENT_RETRY_S
                    tried.append(f"{c.target.describe()}: {exc}")
                    continue
                self._drop()
                self._conn, self._key, self._target = conn, c.key, c.target
                try:
                    self._watch = self._start_watch(c.target, conn)
                except Exception:  # no watch: a busy kernel is found out by the requests' timeouts, as before
                    log.info("cannot watch %s", c.target.describe(), exc_info=True)
                log.info("serving %s", c.target.describe())
                return conn
            self._drop()
            raise KernelUnavailable(f"no kernel answers ({self.locator.describe}): " + "; ".join(tried)
                                    + ". Start or restart the kernel. " + _AGAIN)

    def busy(self) -> bool:
        """Another client's cell runs in the kernel served now (as far as its iopub has shown)."""
        watch = self._watch
        return watch is not None and bool(watch.busy)

    def _drop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # a dead kernel's sockets
                log.debug("closing the old connection failed", exc_info=True)
        self._conn, self._key, self._target = None, None, None

    def close(self) -> None:
        with self._lock:
            self._drop()
