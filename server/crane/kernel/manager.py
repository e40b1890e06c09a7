"""Kernel processes: start a fresh ipykernel for the CLI (in the notebook's folder) and shut it down.

The process side only; talking to a kernel is `client.py`'s job (as jupyter_client keeps
KernelManager and KernelClient apart).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client import KernelManager

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelDead, KernelError

# Environment for kernels CRANE starts itself: a non-interactive matplotlib backend and a stable hash seed.
KERNEL_ENV = {"MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


class OwnedKernel:
    """A kernel process CRANE started and must stop."""

    def __init__(self, manager: KernelManager, connection: KernelConnection, sockets_dir: str | None = None):
        self.manager = manager
        self.connection = connection
        self.sockets_dir = sockets_dir

    def shutdown(self) -> None:
        try:
            self.connection.close()
        finally:
            try:
                self.manager.shutdown_kernel(now=True)
            except Exception:  # already dead: nothing left to stop
                pass
            if self.sockets_dir:
                shutil.rmtree(self.sockets_dir, ignore_errors=True)

    def __enter__(self) -> OwnedKernel:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def start_kernel(
    cwd: str | Path,
    python: str | None = None,
    env: dict[str, str] | None = None,
    startup_timeout: float = 60.0,
) -> OwnedKernel:
    """Start an ipykernel with `python` (default: this interpreter) whose working directory is `cwd`."""
    # a relative interpreter path means the caller's folder: the kernel itself starts in the notebook's
    exe = os.path.abspath(python) if python and os.sep in python else (python or sys.executable)
    # IPC sockets avoid ipykernel's "TCP without encryption" warning; their path must be absolute because
    # the kernel runs in the notebook's folder, not ours.
    sockets = tempfile.mkdtemp(prefix="crane-kernel-")
    km = KernelManager(transport="ipc", ip=os.path.join(sockets, "k"))
    spec = km.kernel_spec  # resolve the default spec, then run it with the chosen interpreter
    if spec is None:  # only with an empty kernel name
        raise KernelError(f"could not start a kernel with {exe}: no kernel spec")
    spec.argv = [exe, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    full_env = dict(os.environ)
    full_env.update(KERNEL_ENV)
    if env:
        full_env.update(env)
    try:
        km.start_kernel(cwd=str(cwd), env=full_env)
    except Exception as exc:
        raise KernelError(f"could not start a kernel with {exe}: {exc}") from exc
    kc = km.blocking_client()
    conn = KernelConnection(kc, owner=km)
    try:
        conn.wait_ready(startup_timeout)
    except KernelError:
        # read before it is stopped: a kernel still running when the wait ran out is slow (a loaded machine, heavy
        # imports), not dead; stopped first, every failed start read "died during startup"
        died = not km.is_alive()
        conn.close()
        try:
            km.shutdown_kernel(now=True)
        except Exception:
            pass
        if died:
            raise KernelDead(
                f"the kernel started with {exe} died during startup (is ipykernel installed there?)"
            ) from None
        raise
    return OwnedKernel(km, conn, sockets)
