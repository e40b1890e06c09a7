"""Attaching to a running kernel — from its connection file, or on a Jupyter Server by kernel id (a
`crane.kernel.target.KernelTarget`) — : connect, identify, watch.

Blocking (call from a worker thread). All of an attachment's kernel I/O runs on one thread of its own
(`Attachment.run`): jupyter_client's blocking client drives per-thread asyncio loops, and a connection used
from several threads fails now and then ("This event loop is already running"). Identification is one private
request (`silent`, no history; kernel/identity.py: its expressions read no name of the notebook's):
`__vsc_ipynb_file__` (the notebook VS Code started the kernel for), the kernel's pid (to notice a restart behind a
connection file that did not change) and its execution count (the reply's). `jupyter_client` is imported here lazily, never at server
start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from crane.lsp.kernel_watch import KernelWatch, WatchEvent, process_exists
from crane.lsp.messages import KernelInfo, KernelSource

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class KernelIdentity:
    notebook_path: str | None
    pid: int | None
    execution_count: int | None = None  # the count the next user cell will get


def connect(where: Any, timeout: float) -> Any:
    """A `KernelConnection` to the kernel behind `where` (a connection file path or a KernelTarget; raises
    KernelError)."""
    from crane.kernel.client import KernelConnection
    from crane.kernel.target import KernelTarget

    if not isinstance(where, KernelTarget):
        where = os.path.expanduser(where)
    return KernelConnection.attach(where, timeout=timeout)


def identify(conn: Any, timeout: float) -> KernelIdentity:
    """Read `__vsc_ipynb_file__`, the pid and the execution count privately, by expressions that read no name of the
    notebook's (kernel/identity.py; raises KernelError)."""
    from crane.kernel.client import literal_value
    from crane.kernel.errors import KernelError
    from crane.kernel.identity import identity_expressions

    reply = conn.private(identity_expressions(), timeout=timeout)
    if reply.status != "ok":
        raise KernelError(f"could not identify the kernel: {reply.ename}: {reply.evalue}")
    values: dict[str, Any] = {}
    for key in ("nb", "pid"):
        try:
            values[key] = literal_value(reply.user_expressions.get(key), "identifying the kernel")
        except KernelError as exc:
            log.debug("identifying the kernel: %s", exc)
            values[key] = None
    nb = values["nb"] if isinstance(values["nb"], str) else None
    pid = values["pid"] if isinstance(values["pid"], int) else None
    count = reply.execution_count + 1 if reply.execution_count is not None else None  # the shell's: the reply's + 1
    return KernelIdentity(notebook_path=nb, pid=pid, execution_count=count)


def session_id(conn: Any) -> str:
    return conn.client.session.session


@dataclass
class Attachment:
    """One attached kernel: the probe connection (used on its own I/O thread), its watcher, how it was found."""

    info: KernelInfo
    target: Any  # crane.kernel.target.KernelTarget: what to reconnect to
    conn: Any  # crane.kernel.client.KernelConnection
    watch: KernelWatch
    io: ThreadPoolExecutor
    probe: Any = None  # crane.probe.collect.ProbeClient, created on first use
    last_count: int | None = None  # one less than the least execution count the kernel can show unrestarted
    closed: bool = field(default=False)

    @property
    def busy(self) -> bool:
        return self.watch.busy

    @property
    def alive(self) -> bool:
        return self.watch.alive and not self.closed

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking kernel I/O on this attachment's thread and wait for it."""
        return self.io.submit(fn, *args).result()

    def probe_client(self) -> Any:
        if self.probe is None:
            from crane.probe.collect import ProbeClient

            self.probe = ProbeClient(self.conn)
        return self.probe

    def identify(self, timeout: float) -> KernelIdentity:
        """The kernel's identity and execution count now (one private request on this attachment's thread)."""
        return self.run(identify, self.conn, timeout)

    def check_identity(self, timeout: float) -> bool:
        """True when the kernel is still the one we attached to (same pid); False after a restart."""
        ident = self.identify(timeout)
        return ident.pid is None or self.info.pid is None or ident.pid == self.info.pid

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.watch.stop()
        try:
            self.io.submit(self.conn.close).result(timeout=5)
        except Exception:
            pass
        self.io.shutdown(wait=False)


def attach(
    where: Any,
    source: KernelSource,
    on_event: Callable[[WatchEvent], None],
    timeout: float = 3.0,
) -> Attachment:
    """Connect to the kernel behind `where` (a connection file path or a KernelTarget), identify it and start
    watching it."""
    from crane.kernel.target import as_target

    target = as_target(where)
    io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crane-kernel-io")
    try:
        conn = io.submit(connect, target, timeout).result()
    except BaseException:
        io.shutdown(wait=False)
        raise
    try:
        ident = io.submit(identify, conn, timeout).result()
        watch = KernelWatch(target, on_event, ignore_sessions={session_id(conn)},
                            local_pid=None if target.is_remote else _local_pid(conn, ident.pid))
        watch.start()
    except BaseException:
        io.submit(conn.close)
        io.shutdown(wait=False)
        raise
    info = KernelInfo(connection_file=target.connection_file, source=source, notebook_path=ident.notebook_path,
                      pid=ident.pid, server_url=target.server.display if target.server else None,
                      kernel_id=target.kernel_id, description=target.describe())
    log.info("attached to %s (%s, pid %s, notebook %s)", target.short(), source, ident.pid, ident.notebook_path)
    last = ident.execution_count - 1 if ident.execution_count else None
    return Attachment(info=info, target=target, conn=conn, watch=watch, io=io, last_count=last)


def _local_pid(conn: Any, pid: int | None) -> int | None:
    """The kernel's pid when the kernel runs on this machine (a loopback or IPC address and a live process)."""
    client = conn.client
    local = client.transport == "ipc" or client.ip in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "")
    return pid if pid and local and process_exists(pid) else None
