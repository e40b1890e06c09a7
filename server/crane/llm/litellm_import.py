"""Importing litellm: once, lazily (about 2 s), configured so it stays quiet and offline.

`LITELLM_LOCAL_MODEL_COST_MAP=True` is set before the import so it makes no network request for its price
table (`set_offline_cost_map`, also called at daemon start so any later import obeys it);
`suppress_debug_info` stops its banners; `disable_hf_tokenizer_download` keeps its token counting on the
tokenizer it ships; its log handlers (which write records below WARNING to *stdout*,
fatal for the LSP channel) are removed so its records propagate to the application's stderr logging, at
WARNING unless CRANE's own log level is debug.

The import runs in a daemon thread of its own; callers wait for it. A process that is leaving (the language
server's `shutdown` calls `abandon()`) stops waiting: the waiting callers get `LitellmAbandoned` at once, so the
threads its exit waits for (the event loop's executor, the interpreter's non-daemon threads) end, and the import
itself is left to the process's end (`os._exit`: no interpreter teardown runs beside it).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from crane.llm.errors import LLMError

_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm")
log = logging.getLogger(__name__)
_lock = threading.Lock()
_done = threading.Event()  # set when the import ended (well or not), or when the process is leaving
_leaving = False
_started = False
_litellm: Any = None
_failure: BaseException | None = None


class LitellmAbandoned(LLMError):
    """The process is leaving: the model was not asked (litellm's import was still under way)."""


def set_offline_cost_map(force: bool = False) -> None:
    """litellm reads its price table from the package, never from the network."""
    if force:
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    else:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def load_litellm() -> Any:
    """Import and configure litellm once (about 2 s the first time); raises `LitellmAbandoned` when the process
    leaves (`abandon`) before the import has ended."""
    global _started
    if _litellm is None:
        with _lock:
            if not _started and not _leaving:
                _started = True
                log.info("importing litellm")
                threading.Thread(target=_import, name="crane-litellm-import", daemon=True).start()
        _done.wait()
    if _litellm is not None:
        return _litellm
    if _failure is not None:
        raise _failure
    raise LitellmAbandoned("the server is exiting: the model was not asked")


def abandon() -> None:
    """The process is leaving: no caller waits for litellm's import any more (nor starts one)."""
    global _leaving
    with _lock:
        _leaving = True
    _done.set()


def _import() -> None:
    global _litellm, _failure
    try:
        _litellm = _configured()
    except BaseException as exc:  # an ImportError, or litellm's own failure: each caller gets it
        _failure = exc
    finally:
        _done.set()


def _configured() -> Any:
    set_offline_cost_map(force=True)
    os.environ.setdefault("LITELLM_LOG", "WARNING")
    import litellm

    litellm.suppress_debug_info = True
    litellm.set_verbose = False
    litellm.telemetry = False
    # a streamed reply without a usage event (llama-cpp-python's) is counted by litellm's tokenizer: the
    # bundled tiktoken one, never one downloaded from Hugging Face (it would for "llama-3" model names)
    litellm.disable_hf_tokenizer_download = True
    # litellm's loggers follow CRANE's own level (`crane serve --log-level`, `crane.logLevel`): debug
    # shows litellm's debug lines too, anything else only its warnings
    level = logging.DEBUG if logging.getLogger("crane").isEnabledFor(logging.DEBUG) else logging.WARNING
    for name in _LITELLM_LOGGERS:
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            lg.removeHandler(h)
        lg.setLevel(level)
        lg.propagate = True
    return litellm
