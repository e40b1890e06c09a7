"""The last runtime facts read from a kernel: to answer without waiting when the kernel is busy, and without
asking at all while nothing ran.

Every live probe result is merged in. When the kernel is running a user cell (or the probe timed out),
`lookup(request)` answers from here: what is known about the requested names, attributes, keys, modules and
paths, and nothing about the rest (unknown, never "undefined"). Those answers are stale by definition: the
caller marks them so.

`reuse(request, state)` answers a request identical to one already answered live, while the kernel's `state`
(the caller's token: which attachment, what its iopub watcher saw other clients do, the session's generation)
is the same as then: facts cannot have changed without an execution, so the answer is still live. Paths and
module availability can change without one (files, installs): an answer that holds them is reused for
FS_REUSE_S at most. Results cut by the probe's time budget, partial ones (`resumable`: a later request goes on
with their exact passes) and those with errors are not kept. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import msgspec

from crane.probe.facts import AttrCheck, Facts, KeyCheck, ProbeRequest, ProbeResult

FS_REUSE_S = 2.0  # how long an answer about paths or module availability is reused
REUSE_SIZE = 256  # identical requests remembered per kernel state


def _key_id(expr: str, key: Any, axis: str) -> tuple[str, str, str]:
    return (expr, repr(key), axis)


class FactsCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._reset()

    def clear(self) -> None:
        with self._lock:
            self._reset()

    def _reset(self) -> None:
        self._state: Hashable = None
        self._answers: OrderedDict[bytes, tuple[float, ProbeResult]] = OrderedDict()
        self.facts: dict[str, Facts] = {}
        self.undefined: set[str] = set()
        self.attrs: dict[str, AttrCheck] = {}
        self.keys: dict[tuple[str, str, str], KeyCheck] = {}
        self.modules: dict[str, bool] = {}
        self.imported: set[str] = set()
        self.paths: dict[str, bool] = {}
        self.cwd: str | None = None
        self.libraries: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.facts) + len(self.undefined)

    def store(self, request: ProbeRequest, result: ProbeResult) -> None:
        with self._lock:
            for name in request.names:
                if name in result.facts:
                    self.facts[name] = result.facts[name]
                    self.undefined.discard(name)
                elif name in result.undefined:
                    self.undefined.add(name)
                    self.facts.pop(name, None)
            for name, facts in result.facts.items():
                self.facts[name] = facts
            for a in result.attrs:
                self.attrs[a.expr] = a
            for k in result.keys:
                self.keys[_key_id(k.expr, k.key, k.axis)] = k
            self.modules.update(result.modules)
            for m in request.modules:
                if m in result.imported_modules:
                    self.imported.add(m)
                else:
                    self.imported.discard(m)
            self.paths.update(result.paths)
            self.cwd = result.cwd or self.cwd
            self.libraries.update(result.libraries)

    def lookup(self, request: ProbeRequest) -> ProbeResult | None:
        """What is known about `request`, or None when nothing is."""
        with self._lock:
            facts = {n: self.facts[n] for n in request.names if n in self.facts}
            undefined = [n for n in request.names if n in self.undefined]
            attrs = [self.attrs[a] for a in request.attrs if a in self.attrs]
            keys = []
            for item in request.keys:
                if len(item) == 3:
                    k = self.keys.get(_key_id(item[0], item[1], item[2]))
                    if k is not None:
                        keys.append(k)
            modules = {m: self.modules[m] for m in request.modules if m in self.modules}
            imported = [m for m in request.modules if m in self.imported]
            paths = {p: self.paths[p] for p in request.paths if p in self.paths}
            if not (facts or undefined or attrs or keys or modules or paths):
                return None
            return ProbeResult(
                facts=facts,
                undefined=undefined,
                attrs=attrs,
                keys=keys,
                modules=modules,
                imported_modules=imported,
                paths=paths,
                cwd=self.cwd,
                libraries=dict(self.libraries),
            )

    # -- live answers for an unchanged kernel ---------------------------------------------------------------
    def reuse(self, request: ProbeRequest, state: Hashable) -> ProbeResult | None:
        """The live answer to this very request, when the kernel's state is still `state`; else None."""
        key = _request_key(request)
        with self._lock:
            if state != self._state:
                return None
            got = self._answers.get(key)
            if got is None:
                return None
            read_at, result = got
            if (request.paths or request.modules) and self._clock() - read_at > FS_REUSE_S:
                return None
            self._answers.move_to_end(key)
        return _copy(result)  # a copy: consumers annotate what they get (Facts.defined_in)

    def remember(self, request: ProbeRequest, state: Hashable, result: ProbeResult) -> None:
        """Keep a live answer read while the kernel's state was `state` (read BEFORE the request was sent)."""
        if result.time_capped or result.resumable or result.errors:
            return
        key = _request_key(request)
        with self._lock:
            if state != self._state:
                self._state = state
                self._answers.clear()
            self._answers[key] = (self._clock(), result)
            self._answers.move_to_end(key)
            while len(self._answers) > REUSE_SIZE:
                self._answers.popitem(last=False)


def _copy(result: ProbeResult) -> ProbeResult:
    return msgspec.json.decode(msgspec.json.encode(result), type=ProbeResult)


def _request_key(request: ProbeRequest) -> bytes:
    return msgspec.json.encode(msgspec.structs.replace(request, epoch=None))
