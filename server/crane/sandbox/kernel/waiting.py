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

import _thread
import select
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from crane.kernel_common.ipython_shell import instance_dict  # kernel: strip
from crane.sandbox.kernel.library import is_library  # kernel: strip

WATCH_SHELL = "the kernel's shell queue"  # what stops the export when the user sends a request
# bound at install: nothing is looked up on a shared module, and nothing of the kernel's objects is reached through
# attribute lookup (a class the notebook patched would run its code): instance dicts and trait values only
_W_MODULES = sys.modules
_W_GET = object.__getattribute__
_W_MRO = type.__dict__["__mro__"]
_W_DICT = type.__dict__["__dict__"]
_W_NAME = type.__dict__["__name__"]
_W_IDENT = _thread.get_ident
_W_POLL = getattr(select, "poll", None)
_W_SELECT = select.select
_W_POLLIN = getattr(select, "POLLIN", 1)
_W_GETSET = type(type.__dict__["__dict__"])
_W_DEQUE = deque


def own_dict(obj: Any) -> dict:
    """The object's instance dict (kernel_common/ipython_shell.instance_dict: the C `__dict__` descriptor, class
    dicts scanned by exact `str` keys); {} when it has none or it cannot be read so."""
    try:
        d = instance_dict(obj)
    except Exception:
        return {}
    return d if type(d) is dict else {}


class OddKeyError(Exception):
    """An instance dict (or trait values) holds a key that is not an exact `str`: a lookup there would compare the
    name asked for with it, running its `__eq__` in the kernel, so what it holds is unknown (review M1)."""


def str_get(d: Any, name: str, default: Any = None) -> Any:
    """`d[name]` (`default` when absent or when `d` is not an exact dict), read only once every key of `d` is
    proven an exact `str` by its type (nothing of a key's is called: a planted key's `__eq__` never runs), else OddKeyError.
    Instance dicts and traitlets' `_trait_values` are open to the notebook (`obj.__dict__[Evil()] = ...`), unlike
    the module namespaces kernel/lookups.odd_key proves before the export reads them."""
    if type(d) is not dict:
        return default
    for k in list(dict.keys(d)):
        if type(k) is not str:
            raise OddKeyError
    return dict.get(d, name, default)


def str_scan(d: Any, name: str, default: Any = None) -> Any:
    """`d[name]` read by a scan where `d` may hold keys of any type (`str_get` refused it): each key compared with
    `name` only once its type is proven exact `str` (then `str`'s own equality: no key's code runs); a key of
    another type is passed over, never hashed or compared. `default` when no exact `str` key is `name` or `d` is
    not an exact dict. (Where a planted key answers equal to `name`, a lookup of the kernel's own may find its value
    instead: what is read so is only "likely" the kernel's; the caller says so.)"""
    if type(d) is not dict:
        return default
    for k, v in list(dict.items(d)):
        if type(k) is str and k == name:
            return v
    return default


_W_ABSENT = object()


def _w_field(obj: Any, name: str) -> Any:
    """An attribute as stored: a traitlets trait's value, else the instance dict's entry (None when absent;
    OddKeyError where a dict read holds a key that is not an exact `str`)."""
    d = own_dict(obj)
    values = str_get(d, "_trait_values")
    v = str_get(values, name, _W_ABSENT)
    return v if v is not _W_ABSENT else str_get(d, name)


def _w_class_attr(cls: Any, name: str) -> Any:
    """`name` as the class's MRO defines it, read from each class's dict once its keys are proven exact `str` (else
    OddKeyError: a planted key's `__eq__` never runs)."""
    for k in _W_MRO.__get__(cls, type):
        kd = _W_DICT.__get__(k, type)
        for key in list(kd):
            if type(key) is not str:
                raise OddKeyError
        if name in kd:
            return kd[name]
    return None


def _w_library_callable(fn: Any) -> bool:
    """A Python function of a library's file, or a Cython function compiled into a library's module."""
    t = type(fn)
    if t is type(_w_field):
        return is_library(fn.__code__.co_filename)
    if _W_NAME.__get__(t, type) != "cython_function_or_method":
        return False
    mod = _W_GET(fn, "__module__")
    m = dict.get(_W_MODULES, mod) if type(mod) is str else None
    path = dict.get(_W_GET(m, "__dict__"), "__file__") if type(m) is type(sys) else None
    return type(path) is str and is_library(path)


def shell_watch(shell: Any) -> tuple[Callable[[], bool] | None, str]:
    """(a check, cheap and read-only, that a shell request waits for the main thread; what it watches), or
    (None, why there is no watch). Call on the kernel's main thread: the one that runs the export."""
    zmq = dict.get(_W_MODULES, "zmq")
    if type(zmq) is not type(sys):
        return None, "not a ZeroMQ kernel"
    try:
        kernel = _w_field(shell, "kernel")
        sct = _w_field(kernel, "shell_channel_thread") if kernel is not None else None
        if sct is None:
            return None, "the kernel has no shell-channel thread (ipykernel before 7, or not ipykernel)"
        parent = _w_field(sct, "parent_thread")
        if parent is None or _w_field(parent, "_ident") != _W_IDENT():
            return None, "the export does not run on the kernel's main shell thread"
        manager = _w_field(sct, "_manager")  # never the `manager` property: it would create one
        pair = _w_field(manager, "_shell_channel_to_main") if manager is not None else None
        sock = _w_field(pair, "to_socket") if pair is not None else None
        stream = _w_field(pair, "to_stream") if pair is not None else None
        socket_cls = dict.get(_W_GET(zmq, "__dict__"), "Socket")
        known = sock is not None and type(sock) is socket_cls and _w_field(stream, "socket") is sock
        if not known:
            return None, "the kernel's main shell queue is not the one ipykernel 7 builds"
        closed, getsockopt = _w_class_attr(socket_cls, "closed"), _w_class_attr(socket_cls, "getsockopt")
        fd_opt = dict.get(_W_GET(zmq, "__dict__"), "FD")
        if type(closed) is not _W_GETSET or not _w_library_callable(getsockopt) or not issubclass(type(fd_opt), int):
            return None, "the kernel's shell queue cannot be watched (its socket class was changed)"
        if closed.__get__(sock, socket_cls):
            return None, "the kernel's main shell queue is closed"
        fd = getsockopt(sock, fd_opt)  # the mailbox's descriptor: reading it processes nothing
        lock = _w_field(kernel, "_main_asyncio_lock")
        lock_state = own_dict(lock) if lock is not None else None
        lock_state = (lock_state if lock_state and str_get(lock_state, "_waiters", _W_ABSENT) is not _W_ABSENT
                      else None)
    except Exception as exc:  # noqa: BLE001 - an unknown structure: no watch
        return None, f"the kernel's shell queue cannot be watched ({type(exc).__name__})"
    if type(fd) is not int or fd < 0:
        return None, "the kernel's main shell queue has no descriptor"
    if _W_POLL is not None:
        poller = _W_POLL()
        poller.register(fd, _W_POLLIN)
        ready: Callable[[], bool] = lambda: bool(poller.poll(0))  # noqa: E731
    else:  # Windows: the descriptor is a socket, which select takes
        ready = lambda: bool(_W_SELECT([fd], [], [], 0)[0])  # noqa: E731

    def waiting() -> bool:
        """A request reached the main shell's queue since the main thread last looked, or waits on its lock."""
        try:
            if ready():
                return True
        except (OSError, ValueError):
            return False
        try:  # (proven again: a thread of the notebook's may have planted a key since)
            waiters = str_get(lock_state, "_waiters") if lock_state is not None else None
        except OddKeyError:
            return False
        return type(waiters) is _W_DEQUE and len(waiters) > 0

    return waiting, WATCH_SHELL
