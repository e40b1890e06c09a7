"""The server's input stream, which says when it ends: the editor closed the channel, or died, without `exit`.

pygls's reader ends its loop at the end of input, and the loop's end (like the interpreter's) waits for the
threads still working: `on_end` runs first, from the reader's thread, so that none of them waits for what only the
session's end stops (litellm's import, a repair agent's run)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import BinaryIO


class InputEnd:
    """`stream`'s `readline` and `read` (what pygls's stdio reader calls); `on_end` once, at the end of input."""

    def __init__(self, stream: BinaryIO, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end
        self._lock = threading.Lock()
        self._ended = False

    def readline(self, size: int = -1) -> bytes:
        return self._seen(self._stream.readline(size), size)

    def read(self, size: int = -1) -> bytes:
        return self._seen(self._stream.read(size), size)

    def _seen(self, data: bytes, size: int) -> bytes:
        if data or size == 0:  # read(0) is empty without an end
            return data
        with self._lock:
            first, self._ended = not self._ended, True
        if first:
            self._on_end()
        return data
