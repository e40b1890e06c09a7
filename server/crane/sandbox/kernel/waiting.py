"""Kernel side: is a request waiting for the kernel's main thread? Asked by the export (kernel/export.py) while it
holds the main thread, so that it stops as soon as the user's cell (or any other shell request) is queued.

Only what the main thread itself owns is looked at, and nothing is read or consumed:
- ipykernel 7 (`Kernel.shell_channel_thread`): a thread of its own reads the shell socket and forwards each request
  for the main shell to an inproc PAIR socket the main thread reads (its IOLoop, through a ZMQStream). A request
  forwarded while the main thread is busy signals that socket's mailbox file descriptor (`zmq.FD`): the descriptor
  is polled with `select.poll` (no zmq call, so no command is processed and no edge the stream waits on is
  taken). `zmq.EVENTS` is never read: it would process the mailbox, and a stream waiting on its descriptor would
  then miss the request. Requests the main loop already took from the socket wait on the main shell's asyncio
  lock (`Kernel._main_asyncio_lock`): its waiters are counted too. Control messages (interrupts, shutdown) and
  subshells' requests never reach that socket.
- anything else (ipykernel 6, whose main thread reads the shell socket itself and queues requests together with
  its event-loop ticks; xeus and other kernels; a structure that does not look exactly as expected): no watch,
  and the export's kernel-time cap alone bounds how long the user's cell waits. `shell_watch` then says why.

What is not seen: a request the main loop took from the socket in the same instant as CRANE's own (it is then in
an asyncio task not yet started, neither in the socket nor on the lock); the time cap still bounds that wait.
"""

from __future__ import annotations

import select
import sys
import threading
from collections.abc import Callable
from typing import Any

WATCH_SHELL = "the kernel's shell queue"  # what stops the export when the user sends a request


def shell_watch(shell: Any) -> tuple[Callable[[], bool] | None, str]:
    """(a check, cheap and read-only, that a shell request waits for the main thread; what it watches), or
    (None, why there is no watch). Call on the kernel's main thread: the one that runs the export."""
    zmq = sys.modules.get("zmq")
    if zmq is None:
        return None, "not a ZeroMQ kernel"
    try:
        kernel = getattr(shell, "kernel", None)
        sct = getattr(kernel, "shell_channel_thread", None) if kernel is not None else None
        if sct is None:
            return None, "the kernel has no shell-channel thread (ipykernel before 7, or not ipykernel)"
        if getattr(sct, "parent_thread", None) is not threading.current_thread():
            return None, "the export does not run on the kernel's main shell thread"
        manager = getattr(sct, "_manager", None)  # never the `manager` property: it would create one
        pair = getattr(manager, "_shell_channel_to_main", None) if manager is not None else None
        sock = getattr(pair, "to_socket", None)
        stream = getattr(pair, "to_stream", None)
        known = type(sock) is zmq.Socket and getattr(stream, "socket", None) is sock  # read by the main loop's stream
        if sock is None or not known:
            return None, "the kernel's main shell queue is not the one ipykernel 7 builds"
        if sock.closed:
            return None, "the kernel's main shell queue is closed"
        fd = sock.getsockopt(zmq.FD)  # the mailbox's descriptor: reading it processes nothing
        lock = getattr(kernel, "_main_asyncio_lock", None)
        lock_state = vars(lock) if lock is not None and "_waiters" in vars(lock) else None
    except Exception as exc:  # noqa: BLE001 - an unknown structure: no watch
        return None, f"the kernel's shell queue cannot be watched ({type(exc).__name__})"
    if type(fd) is not int or fd < 0:
        return None, "the kernel's main shell queue has no descriptor"
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        ready: Callable[[], bool] = lambda: bool(poller.poll(0))  # noqa: E731
    else:  # Windows: the descriptor is a socket, which select takes
        ready = lambda: bool(select.select([fd], [], [], 0)[0])  # noqa: E731

    def waiting() -> bool:
        """A request reached the main shell's queue since the main thread last looked, or waits on its lock."""
        try:
            if ready():
                return True
        except (OSError, ValueError):
            return False
        waiters = lock_state.get("_waiters") if lock_state is not None else None
        return waiters is not None and len(waiters) > 0

    return waiting, WATCH_SHELL
