"""CRANE kernel probe: reuse of facts while the kernel's state is unchanged (standard library only).

Facts about a value can only change when code runs in the kernel, so a repeated request is answered from memory
as long as no code ran since the facts were computed. `begin(epoch)` names the kernel's state by an execution
marker, and empties the memory when the marker differs from the one the memory was filled under:

- a counter bumped by IPython's `pre_execute` event, which fires for EVERY execution of non-empty code — the
  user's cells, another client's silent requests, `%run`, the agent's approved runs — but not for the probe's own
  requests, whose code is empty (IPython returns before the event for empty code; their `user_expressions` are
  evaluated after it). The callback is the `__next__` of an `itertools.count`, appended to
  `shell.events.callbacks['pre_execute']` (no `register`, whose `in` test would compare the user's callbacks with
  `==`): C code that only adds 1, so it cannot print, raise or touch the namespace, execution count, history or
  outputs, and no Python frame of CRANE's runs in the user's cells (a Python callback's was one a notebook's trace
  or profile function saw, and could rewrite, at every execution); read by `count`'s own C `repr`;
- the shell's execution count and the process id (a forked sandbox child has its own memory);
- `epoch`, the daemon's view of the requests it saw other clients send (comm messages, expression-only requests:
  kernel activity that runs no cell code). An empty epoch (the CLI, the benchmarks) adds nothing.

Entries are keyed on the identity (`id`) and type of the values they describe: objects bound in the namespace
(or reached from it through instance dicts) stay alive, and so keep their ids, while the marker is unchanged.
The memory holds JSON text, small dicts and the state of unfinished exact passes (kernel/scan.run_pass: counts,
copied samples and a weak reference to the memory's owner), never a strong reference to the user's objects.
Without an IPython shell (or when the callback cannot be installed) nothing is reused.
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any

from crane.kernel_common.ipython_shell import ipython_shell  # kernel: strip
from crane.probe.kernel.common import class_dict, short_tname, tmodule  # kernel: strip

MAX_ENTRIES = 4096  # entries kept per marker (each is at most a variable's facts, about 4 KiB): then emptied


_COUNT = itertools.count
_COUNT_REPR = itertools.count.__repr__  # (C: reads the count without advancing it)
_WRAPPER = type(itertools.count().__next__)  # method-wrapper: calling it runs no Python frame
_WRAPPER_SELF = _WRAPPER.__dict__["__self__"].__get__
_memory: dict = {"marker": None, "entries": {}}
STATS = {"calls": 0, "reused": 0}  # probe calls served in this kernel, and facts/checks reused (for tests)


_MODULE_TYPE = type(sys)
_MODULE_DICT: Any = class_dict(_MODULE_TYPE)["__dict__"]  # (a module's own namespace, C getter)


def _counter(ip: Any) -> tuple[Any, bool]:
    """The `count` of our counter in the shell's `pre_execute` callbacks (installed on first use): (count, newly
    installed). Any install's counter is reused (the same C object whatever CRANE's version); an older version's
    Python `ExecCounter` is removed."""
    try:
        callbacks = getattr(getattr(ip, "events", None), "callbacks", None)
        lst = callbacks.get("pre_execute") if type(callbacks) is dict else None
    except Exception:
        return None, False
    if type(lst) is not list:
        return None, False
    stale = []
    for i, cb in enumerate(lst):
        t = type(cb)
        if t is _WRAPPER and type(c := _WRAPPER_SELF(cb)) is _COUNT:
            return c, False
        if short_tname(t) == "ExecCounter" and tmodule(t) == __name__:
            stale.append(i)  # the counter of an older version of this module (a Python frame at each execution)
    for i in reversed(stale):
        del lst[i]
    c = _COUNT()
    lst.append(c.__next__)
    return c, True


def begin(epoch: Any) -> tuple[Any, ...] | None:
    """Start a probe call: the marker of the kernel's execution state (None: nothing may be reused)."""
    STATS["calls"] += 1
    ip = ipython_shell()
    if ip is None:
        _memory["marker"] = None
        return None
    c, fresh = _counter(ip)
    if c is None:
        _memory["marker"] = None
        return None
    try:
        count = ip.execution_count
    except Exception:
        count = None
    marker = (os.getpid(), id(ip), id(c), _COUNT_REPR(c), count if type(count) is int else None,
              epoch if type(epoch) is str else None)  # fmt: skip
    if fresh or marker != _memory["marker"] or len(_memory["entries"]) > MAX_ENTRIES:
        _memory["entries"] = {}
        _memory["marker"] = marker
    return marker


def active() -> bool:
    """Does this call's memory last until the next execution (a marker is set)? Else nothing is kept."""
    return _memory["marker"] is not None


def recall(key: tuple[Any, ...], counted: bool = True) -> Any:
    """What was stored under `key` for the current marker, or None (`counted`: a reuse of facts, in STATS)."""
    if _memory["marker"] is None:
        return None
    v = _memory["entries"].get(key)
    if v is not None and counted:
        STATS["reused"] += 1
    return v


def remember(key: tuple[Any, ...], value: Any) -> None:
    entries = _memory["entries"]
    if _memory["marker"] is not None and len(entries) < 4 * MAX_ENTRIES:  # a huge request stops adding, not fails
        entries[key] = value


def forget() -> None:
    """Drop everything (the next call starts afresh)."""
    _memory["entries"] = {}
    _memory["marker"] = None
