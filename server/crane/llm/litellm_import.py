"""Importing litellm: once, lazily (about 2 s), configured so it stays quiet and offline.

`LITELLM_LOCAL_MODEL_COST_MAP=True` is set before the import so it makes no network request for its price
table (`set_offline_cost_map`, also called at daemon start so any later import obeys it);
`suppress_debug_info` stops its banners; `disable_hf_tokenizer_download` keeps its token counting on the
tokenizer it ships; its log handlers (which write records below WARNING to *stdout*,
fatal for the LSP channel) are removed so its records propagate to the application's stderr logging, at
WARNING unless CRANE's own log level is debug.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm")
_lock = threading.Lock()
_litellm: Any = None


def set_offline_cost_map(force: bool = False) -> None:
    """litellm reads its price table from the package, never from the network."""
    if force:
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    else:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def load_litellm() -> Any:
    """Import and configure litellm once (about 2 s the first time)."""
    global _litellm
    with _lock:
        if _litellm is None:
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
            _litellm = litellm
    return _litellm
