"""On-disk response cache: the same question to the same model is paid for once.

Key: sha256 over (cache format version, model, api_base, response-format kind, temperature, max_tokens,
messages). One JSON file per entry under `<cache_dir>/llm/<key[:2]>/<key>.json`, written atomically; an
unreadable or invalid entry is ignored (and overwritten by the next answer), never an error.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from crane.llm.schema import LLMAnswer, Usage

log = logging.getLogger(__name__)

CACHE_VERSION = 1


class CacheEntry(msgspec.Struct, kw_only=True):
    version: int
    model: str
    answer: LLMAnswer
    usage: Usage
    created: float
    repaired: bool = False


_entry_decoder = msgspec.json.Decoder(CacheEntry)


def cache_key(model: str, api_base: str | None, messages: list[dict[str, Any]], **params: Any) -> str:
    payload = {"v": CACHE_VERSION, "model": model, "api_base": api_base or "", "params": params, "messages": messages}
    return hashlib.sha256(msgspec.json.encode(payload, order="sorted")).hexdigest()


class ResponseCache:
    def __init__(self, directory: str | Path):
        self.root = Path(directory) / "llm"

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> CacheEntry | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            entry = _entry_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("ignoring an invalid LLM cache entry: %s", path)
            return None
        return entry if entry.version == CACHE_VERSION else None

    def put(self, key: str, model: str, answer: LLMAnswer, usage: Usage, repaired: bool = False) -> None:
        path = self._path(key)
        entry = CacheEntry(
            version=CACHE_VERSION, model=model, answer=answer, usage=usage, created=time.time(), repaired=repaired
        )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "wb") as f:
                f.write(msgspec.json.encode(entry))
            os.replace(tmp, path)
        except OSError as exc:  # a read-only or full disk costs the cache, not the answer
            log.warning("cannot write the LLM cache entry %s: %s", path, exc)
