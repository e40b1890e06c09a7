"""Where the CLI starts the kernels it owns: on this machine (ZeroMQ), or on a Jupyter Server (`--server`).

A `KernelLauncher` starts a fresh kernel for a notebook and returns an object with `connection` and
`shutdown()` (a context manager): `LocalLauncher` runs `crane.kernel.manager.start_kernel` in the notebook's
folder; `ServerLauncher` starts it through the server's sessions API (`crane.kernel.server_kernel`). The
replay, the probe, the fork sandbox and the agent's replay sandbox use whichever they are given.

`server_session(launcher)` wraps a CLI command that uses a server: it checks the server and the token first
(a clear `ServerError` before any work), turns SIGTERM into KeyboardInterrupt so that `finally` blocks run, and
shuts down every kernel still on the server at the end, whatever happened (error, Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from crane.kernel.errors import KernelError, ServerError
from crane.kernel.target import ServerSpec, ServerSpecError


class KernelLauncher(Protocol):
    @property
    def where(self) -> str:  # for messages: "a fresh local kernel", "a fresh kernel on <server>"
        ...

    def start(self, notebook: str | Path, python: str | None = None) -> Any:  # OwnedKernel | ServerKernel
        ...


@dataclass(frozen=True)
class LocalLauncher:
    where: str = "a fresh local kernel"

    def start(self, notebook: str | Path, python: str | None = None) -> Any:
        from crane.kernel.manager import start_kernel

        return start_kernel(Path(notebook).resolve().parent, python=python)


@dataclass(frozen=True)
class ServerLauncher:
    spec: ServerSpec
    kernel_name: str | None = None
    root: str = field(default_factory=os.getcwd)  # session paths are relative to it (the folder served)

    @property
    def where(self) -> str:
        return f"a fresh kernel on {self.spec.display}"

    def start(self, notebook: str | Path, python: str | None = None) -> Any:
        from crane.kernel.server_kernel import start_server_kernel

        if python:
            raise KernelError("--python cannot be used with --server: the server runs its own interpreter "
                              "(--kernel-name picks one of its kernelspecs)")
        return start_server_kernel(self.spec, notebook, kernel_name=self.kernel_name, root=self.root)


LOCAL = LocalLauncher()


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("kernels on a Jupyter Server (JupyterHub, Enterprise Gateway, a remote server)")
    g.add_argument("--server", metavar="URL",
                   help="start the kernels on this Jupyter Server (e.g. https://hub.example.org/user/me/); "
                   "run crane from the folder the server serves")
    g.add_argument("--token", metavar="T", help="the server's token (default: $JUPYTER_TOKEN, or ?token= in the URL)")
    g.add_argument("--kernel-name", dest="kernel_name", metavar="NAME",
                   help="the server's kernelspec to start (default: the server's default)")


def launcher_from_args(args: argparse.Namespace) -> KernelLauncher:
    """`ServerLauncher` when `--server` was given, else the local one. Raises `ServerSpecError` (a ValueError)
    for a bad URL, and `KernelError` for server options without `--server` or with `--python`."""
    url = getattr(args, "server", None)
    if not url:
        if getattr(args, "token", None) or getattr(args, "kernel_name", None):
            raise KernelError("--token and --kernel-name go with --server URL")
        return LOCAL
    if getattr(args, "python", None):
        raise KernelError("--python cannot be used with --server: the server runs its own interpreter "
                          "(--kernel-name picks one of its kernelspecs)")
    return ServerLauncher(ServerSpec.parse(url, token=getattr(args, "token", None)),
                          kernel_name=getattr(args, "kernel_name", None))


@contextlib.contextmanager
def server_session(launcher: KernelLauncher) -> Iterator[None]:
    """Around a CLI command: check the server first, and leave no kernel on it (see the module docstring)."""
    if not isinstance(launcher, ServerLauncher):
        yield
        return
    from crane.kernel.rest import ServerAPI
    from crane.kernel.server_kernel import shutdown_all

    try:
        ServerAPI(launcher.spec).check()
    except ServerSpecError as exc:
        raise ServerError(str(exc)) from None
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        yield
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            shutdown_all(final=interrupted)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
