"""Kernels CRANE starts on a Jupyter Server for the CLI (`--server URL`), and the promise to shut them down.

`start_server_kernel(spec, notebook)` starts a kernel through the server's sessions API with the notebook's
path relative to the current folder as the session path (so the kernel's working directory is the notebook's
folder when the server serves the current folder, as in CI), connects to it over the kernel channels websocket
and waits until it answers. A session the server already had for that path (the user's own notebook open in
JupyterLab) is never reused: CRANE then names its session `<notebook>.crane-<id>.ipynb` in the same folder.
Gateways without a sessions API (Enterprise Gateway) get a bare `POST /api/kernels`.

`ServerKernel` has `OwnedKernel`'s surface (`connection`, `shutdown()`, context manager). Every started kernel
is registered until it is shut down; `shutdown_all()` (also run at interpreter exit) deletes what is left, so
an error, Ctrl-C or SIGTERM leaves no kernel on the server.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import uuid
from pathlib import Path, PurePosixPath

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelError, ServerError, ServerNotFound
from crane.kernel.rest import ServerAPI
from crane.kernel.target import KernelTarget, ServerSpec

log = logging.getLogger(__name__)

_LIVE: set[ServerKernel] = set()
_LIVE_LOCK = threading.Lock()
_CLOSED = threading.Event()  # set by shutdown_all(final=True): no new kernel may start (Ctrl-C, exit)


class ServerKernel:
    """A kernel CRANE started on a Jupyter Server and must shut down."""

    def __init__(self, api: ServerAPI, kernel_id: str, session_id: str | None, path: str):
        self.api = api
        self.kernel_id = kernel_id
        self.session_id = session_id
        self.path = path  # the session path on the server
        self.target = KernelTarget.remote(api.spec, kernel_id)
        self.connection: KernelConnection | None = None
        self._done = False
        with _LIVE_LOCK:
            _LIVE.add(self)

    def is_alive(self) -> bool:
        conn = self.connection
        return conn is not None and bool(conn.client.is_alive())

    def shutdown(self) -> None:
        """Close the websocket, delete the session and the kernel (idempotent; never raises)."""
        if self._done:
            return
        self._done = True
        try:
            if self.connection is not None:
                self.connection.close()
        finally:
            try:
                if self.session_id is not None:
                    self.api.delete_session(self.session_id)  # shuts its kernel down too
            except ServerNotFound:
                pass
            except ServerError as exc:
                log.warning("could not delete session %s: %s", self.session_id, exc)
            try:
                self.api.shutdown_kernel(self.kernel_id)
            except ServerNotFound:
                pass  # already gone with its session
            except ServerError as exc:
                log.warning("could not shut kernel %s down on %s: %s", self.kernel_id, self.api.spec.display, exc)
            with _LIVE_LOCK:
                _LIVE.discard(self)

    def __enter__(self) -> ServerKernel:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def session_path(notebook: str | Path, root: str | Path | None = None) -> str:
    """The notebook's path relative to `root` (default: the current folder), '/'-separated."""
    nb = Path(os.path.abspath(notebook))
    base = Path(os.path.abspath(root if root is not None else os.getcwd()))
    try:
        rel = nb.relative_to(base)
    except ValueError:
        raise KernelError(
            f"{nb} is not inside the current folder {base}: run crane from the folder the Jupyter server "
            "serves, so the kernel starts in the notebook's folder") from None
    return PurePosixPath(*rel.parts).as_posix()


def start_server_kernel(spec: ServerSpec, notebook: str | Path, kernel_name: str | None = None,
                        startup_timeout: float = 60.0, root: str | Path | None = None) -> ServerKernel:
    """Start a kernel for `notebook` on the server, connected and answering (see the module docstring)."""
    if _CLOSED.is_set():
        raise KernelError("interrupted: no new kernel is started on the server")
    api = ServerAPI(spec)
    path = session_path(notebook, root)
    if api.has_file(path) is False:  # None: no contents API (a gateway): nothing to check
        raise KernelError(
            f"the Jupyter server at {spec.display} has no {path}: run crane from the folder the Jupyter server "
            "serves (the kernel would start in another folder than the notebook's)")
    existing = {s.id for s in _sessions_or_none(api) or []}
    kernel = _start(api, path, kernel_name, existing)
    try:
        if _CLOSED.is_set():
            raise KernelError("interrupted: no new kernel is started on the server")
        from crane.kernel.ws_client import WebSocketKernelClient

        ws = WebSocketKernelClient(spec, kernel.kernel_id, connect_timeout=startup_timeout)
        conn = KernelConnection(ws, owner=kernel)
        conn.target = kernel.target
        kernel.connection = conn
        conn.wait_ready(startup_timeout)
    except BaseException:
        kernel.shutdown()
        raise
    log.info("started kernel %s on %s for %s", kernel.kernel_id, spec.display, path)
    return kernel


def _sessions_or_none(api: ServerAPI) -> list | None:
    try:
        return api.sessions()
    except ServerNotFound:  # no sessions API (Enterprise Gateway): checked by the kernels API instead
        api.check()
        return None


def _start(api: ServerAPI, path: str, kernel_name: str | None, existing: set[str]) -> ServerKernel:
    try:
        model = api.start_session(path, kernel_name)
    except ServerNotFound:
        folder = str(PurePosixPath(path).parent)
        k = api.start_kernel(path="" if folder == "." else folder, kernel_name=kernel_name)
        return ServerKernel(api, k.id, None, path)
    if model.id not in existing:
        return ServerKernel(api, model.kernel.id, model.id, path)
    # the server handed back a session it already had (someone has this notebook open): never use that kernel
    p = PurePosixPath(path)
    unique = str(p.with_name(f"{p.stem}.crane-{uuid.uuid4().hex[:8]}{p.suffix or '.ipynb'}"))
    model = api.start_session(unique, kernel_name)
    if model.id in existing:
        raise KernelError(f"the Jupyter server at {api.spec.display} returned an existing session for {unique}")
    return ServerKernel(api, model.kernel.id, model.id, unique)


def shutdown_all(final: bool = False) -> None:
    """Shut down every kernel this process started on a server and has not shut down yet; `final`: and start
    no new one (the command was interrupted, or the process exits)."""
    if final:
        _CLOSED.set()
    with _LIVE_LOCK:
        live = list(_LIVE)
    for kernel in live:
        kernel.shutdown()


def live_kernels() -> list[ServerKernel]:
    with _LIVE_LOCK:
        return list(_LIVE)


atexit.register(shutdown_all, True)
