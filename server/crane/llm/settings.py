"""LLM settings: which model, where, and the limits of a request, from CLI args, LSP settings and env.

Precedence: explicit values (CLI flags) > the LSP settings (`crane.llm.*`) > environment (`CRANE_MODEL`,
`CRANE_API_BASE`, ...) > defaults. No model configured is not an error: `settings.enabled` is False and
callers use the offline modes. API keys are never part of the settings: litellm reads them from the
provider's usual environment variables (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
from msgspec import Meta

from crane.envflag import parse_bool
from crane.errors import CraneError


class SettingsError(CraneError, ValueError):
    """A setting has a value CRANE cannot use (the message names the setting)."""


def default_cache_dir(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    if env.get("CRANE_CACHE_DIR"):
        return env["CRANE_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "crane")


HOSTED_TIMEOUT_S = 60.0
LOCAL_TIMEOUT_S = 300.0  # a first agent turn took 52-137 s on 2 CPU cores (docs/llm.md, local models)
# A local server's streamed reply must start within this (crane.llm.local_call). The first token waits for the
# prompt's evaluation: CRANE's longest prompt (the agent's first turn, ~1,700 tokens) needs 30 s at 57 tokens/s
# (the best rate measured for a 0.5B model on one loaded CPU thread) and 113 s at 15 tokens/s (docs/llm.md,
# "Local models"); a server that sends nothing for longer is stuck, busy with another request, or too slow for
# the default (the setting raises it).
FIRST_TOKEN_S = 120.0
Structured = Literal["auto", "schema", "object", "none"]
STRUCTURED: tuple[str, ...] = get_args(Structured)
# litellm providers that always run on the user's machine (or network) when no api_base says otherwise
LOCAL_PROVIDERS = ("ollama/", "ollama_chat/", "lm_studio/", "llamafile/", "hosted_vllm/", "llama_cpp/")


def is_local_server(api_base: str | None, model: str | None = None) -> bool:
    """Whether requests go to a loopback, private or link-local host (or `.local` / `localhost` name)."""
    if not api_base:
        return bool(model) and str(model).startswith(LOCAL_PROVIDERS)
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(api_base).hostname or "").lower()
    except ValueError:
        return False
    if host in ("localhost", "host.docker.internal") or host.endswith((".localhost", ".local", ".internal")):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


class LLMSettings(msgspec.Struct, kw_only=True, omit_defaults=True):
    model: str | None = None  # litellm model string, e.g. "openai/gpt-4o-mini", "ollama/qwen2.5", "anthropic/..."
    api_base: str | None = None  # e.g. "http://127.0.0.1:11434" for a local server
    timeout_s: float | None = None  # per attempt; None: HOSTED_TIMEOUT_S, or LOCAL_TIMEOUT_S for a local server
    # a local server's streamed reply must start within this (None: FIRST_TOKEN_S); the attempt's timeout
    # still bounds the whole reply
    first_token_s: float | None = None
    max_tokens: int = 800  # completion budget per request
    temperature: float | None = 0.0  # dropped automatically for models that refuse it
    retries: int = 2  # extra attempts on 429 / 5xx / timeouts / connection errors
    retry_backoff_s: float = 1.0  # first back-off; doubles per attempt (Retry-After wins when sent)
    budget_usd: float | None = None  # stop sending requests once the session's cost reaches this
    cache: bool = True
    cache_dir: str | None = None  # None: default_cache_dir()
    # response_format: "auto" (json_schema where the server enforces it: litellm's table, or a known local
    # server: llama.cpp, Ollama, vLLM, LM Studio), "schema", "object" (json_object) or "none"
    structured: str = "auto"

    @property
    def enabled(self) -> bool:
        return bool(self.model)

    @property
    def local(self) -> bool:
        """The model server is on this machine or the private network (a loopback or private `api_base`, or an
        Ollama / LM Studio / llama.cpp model without one): one slot, CPU latency, nothing billed."""
        return is_local_server(self.api_base, self.model)

    @property
    def request_timeout_s(self) -> float:
        """Seconds per attempt: the setting, else a default that fits the server (CPU inference is slow)."""
        if self.timeout_s is not None:
            return self.timeout_s
        return LOCAL_TIMEOUT_S if self.local else HOSTED_TIMEOUT_S

    @property
    def first_token_timeout_s(self) -> float:
        """Seconds a local server's streamed reply may take to start: the setting, else FIRST_TOKEN_S."""
        return self.first_token_s if self.first_token_s is not None else FIRST_TOKEN_S

    def require_model(self) -> str:
        """`model`, for the code that runs only when `enabled` (request building, pricing); SettingsError if unset."""
        if not self.model:
            raise SettingsError("no model is configured")
        return self.model

    def resolved_cache_dir(self) -> Path:
        return Path(self.cache_dir or default_cache_dir())

    def validate(self) -> LLMSettings:
        if self.structured not in STRUCTURED:
            raise SettingsError(f"structured output must be one of {', '.join(STRUCTURED)}, got {self.structured!r}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise SettingsError(f"timeout must be positive, got {self.timeout_s}")
        if self.first_token_s is not None and self.first_token_s <= 0:
            raise SettingsError(f"first-token timeout must be positive, got {self.first_token_s}")
        if self.max_tokens <= 0:
            raise SettingsError(f"max tokens must be positive, got {self.max_tokens}")
        if self.retries < 0:
            raise SettingsError(f"retries must be 0 or more, got {self.retries}")
        if self.budget_usd is not None and self.budget_usd < 0:
            raise SettingsError(f"budget must be 0 or more, got {self.budget_usd}")
        if self.api_base and not self.api_base.startswith(("http://", "https://")):
            raise SettingsError(f"api base must be an http(s) URL, got {self.api_base!r}")
        return self


class LLMOptions(msgspec.Struct, rename="camel", frozen=True):
    """The `crane.llm` section of the editor's settings: every key optional (unset: the environment's value,
    then the default). The one declaration of these settings (crane.lsp.settings embeds it): the editor's keys
    (camelCase), the environment variables (`Meta.extra["env"]`), the types and bounds every source is checked
    against, and the field names of `LLMSettings` all come from here."""

    model: Annotated[
        str,
        Meta(extra={"env": "CRANE_MODEL"}, extra_json_schema={"markdownDescription": (
            "Model for diagnoses and the repair agent, as a LiteLLM model name (e.g. `openai/gpt-4o-mini`). Unset: "
            "no model (the agent and `llm` mode need one). API keys are set with **CRANE: Set API key**, never here."
        )}),
    ] | None = None
    api_base: Annotated[
        str,
        Meta(extra={"env": "CRANE_API_BASE"}, pattern=r"^https?://", extra_json_schema={"markdownDescription": (
            "Base URL of an OpenAI-compatible endpoint (e.g. `http://127.0.0.1:8000/v1`). Unset: the provider's "
            "default."
        )}),
    ] | None = None
    timeout_s: Annotated[
        float,
        Meta(gt=0, description="Seconds per model request attempt. Unset: 60, or 300 for a model server on this "
                               "machine or the private network (CPU inference is slow).",
             extra={"env": "CRANE_LLM_TIMEOUT"}),
    ] | None = msgspec.field(default=None, name="timeout")
    first_token_s: Annotated[
        float,
        Meta(gt=0, description="Seconds a model server on this machine or the private network may take to start "
                               "its reply (CRANE streams from such servers): a server that is alive but sends "
                               "nothing for this long is given up. The whole reply is still bounded by the "
                               "timeout. Unset: 120.",
             extra={"env": "CRANE_LLM_FIRST_TOKEN_TIMEOUT"}),
    ] | None = msgspec.field(default=None, name="firstTokenTimeout")
    max_tokens: Annotated[int, Meta(extra={"env": "CRANE_LLM_MAX_TOKENS"}, gt=0, description="Completion token limit per request. Unset: 800.")] | None = None
    temperature: Annotated[
        float, Meta(ge=0, le=2, description="Sampling temperature (dropped for models that refuse it). Unset: 0.")
    ] | None = None
    retries: Annotated[
        int,
        Meta(extra={"env": "CRANE_LLM_RETRIES"}, ge=0, le=10, description="Extra attempts after a rate limit, a server error, a timeout or a dropped "
                                      "connection. Unset: 2."),
    ] | None = None
    budget_usd: Annotated[
        float,
        Meta(extra={"env": "CRANE_LLM_BUDGET_USD"}, ge=0, description="Stop sending model requests once this session has cost this much, in US dollars. "
                               "Unset: no limit."),
    ] | None = None
    cache: Annotated[
        bool, Meta(extra={"env": "CRANE_LLM_CACHE"}, description="Keep model answers in an on-disk cache, so the same question is not paid twice. "
                               "Unset: on.")
    ] | None = None
    cache_dir: Annotated[
        str, Meta(extra={"env": "CRANE_CACHE_DIR"}, description="Folder of the answer cache. Unset: $XDG_CACHE_HOME/crane or ~/.cache/crane.")
    ] | None = None
    structured: Annotated[
        Structured,
        Meta(extra={"env": "CRANE_LLM_STRUCTURED"}, extra_json_schema={
            "markdownDescription": (
                "How the model is held to CRANE's JSON verdict (`response_format`). Unset: `auto`. Set `schema` "
                "for a server that enforces a JSON schema but is not recognised, `object` or `none` for one that "
                "rejects or mishandles schemas (CRANE also falls back by itself when a server's error names "
                "`response_format`)."),
            "enumDescriptions": [
                "json_schema where the server enforces it (LiteLLM's table for hosted models; llama.cpp's "
                "llama-server, Ollama, vLLM and LM Studio detected at `apiBase`), json_object otherwise.",
                "Always json_schema (the verdict's schema, enforced by the server's grammar or decoder).",
                "Always json_object (any JSON object; the reply is checked against the schema by CRANE).",
                "No response_format: the prompt alone asks for the JSON object.",
                "Unset: the CRANE_LLM_STRUCTURED environment variable, else auto.",
            ],
        }),
    ] | None = None


def _meta_extra(typ: Any) -> dict[str, Any]:
    """The `Meta(extra=...)` of an (optional) Annotated field type."""
    for arg in (typ, *get_args(typ)):
        if get_origin(arg) is Annotated:
            for meta in get_args(arg)[1:]:
                if isinstance(meta, Meta) and meta.extra:
                    return dict(meta.extra)
    return {}


def _base_type(typ: Any) -> Any:
    """bool, int, float or str (or a Literal type) under Optional / Annotated."""
    while True:
        if get_origin(typ) is Annotated:
            typ = get_args(typ)[0]
            continue
        args = [a for a in get_args(typ) if a is not type(None)] if get_origin(typ) in (Union, UnionType) else None
        if args and len(args) == 1:
            typ = args[0]
            continue
        return typ


_FIELDS = {f.name: f for f in msgspec.structs.fields(LLMOptions)}
# the editor's key (camelCase, under crane.llm) -> field, and environment variable -> field: derived
_LSP_KEYS = {f.encode_name: f.name for f in _FIELDS.values()}
_ENV_KEYS = {env: name for name, f in _FIELDS.items() if (env := _meta_extra(f.type).get("env"))}


def _coerce(field: str, value: Any, where: str) -> Any:
    """`value` (from the CLI, the editor or the environment's text) as the field's declared type, checked
    against its bounds; None for unset. SettingsError names `where`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    typ = _FIELDS[field].type
    if isinstance(value, str):
        value = value.strip()
        if _base_type(typ) is bool:
            flag = parse_bool(value)
            if flag is None:
                raise SettingsError(f"{where} must be on or off, got {value!r}")
            return flag
    try:
        return msgspec.convert(value, typ, strict=False)
    except msgspec.ValidationError as exc:
        base = _base_type(typ)
        if get_origin(base) is Literal:
            raise SettingsError(f"{where} must be one of {', '.join(map(str, get_args(base)))}, got {value!r}") from None
        kind = {float: "a number", int: "a whole number", str: "a string"}.get(base)
        try:
            msgspec.convert(value, base, strict=False)
        except msgspec.ValidationError:
            raise SettingsError(f"{where} must be {kind or base}, got {value!r}") from None
        reason = str(exc).split(" - at ", 1)[0]  # within the type, outside the declared bounds
        raise SettingsError(f"{where} must be {reason.split(' ', 2)[-1]}, got {value!r}") from None


def _lsp_llm_section(lsp: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """Accept {"crane": {"llm": {...}}}, {"llm": {...}}, {...} or flat {"crane.llm.model": ...}."""
    if not lsp:
        return {}
    if isinstance(lsp.get("crane"), Mapping):
        lsp = lsp["crane"]
    if isinstance(lsp.get("llm"), Mapping):
        return lsp["llm"]
    flat = {k.rsplit(".", 1)[-1]: v for k, v in lsp.items() if k.startswith(("crane.llm.", "llm."))}
    return flat or {k: v for k, v in lsp.items() if k in _LSP_KEYS}


def resolve_settings(
    explicit: Mapping[str, Any] | None = None,
    lsp: LLMOptions | Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> LLMSettings:
    """Merge the three sources (explicit > lsp > env > defaults) and validate. `lsp` is the editor's typed
    `crane.llm` section, or a raw mapping of it (`{"crane": {"llm": {...}}}`, `{"llm": {...}}`, flat keys)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for var, field in _ENV_KEYS.items():
        if var in env:
            v = _coerce(field, env[var], var)
            if v is not None:
                values[field] = v
    if isinstance(lsp, LLMOptions):  # the editor's typed section: checked when it was parsed
        values.update({name: v for name in _FIELDS if (v := getattr(lsp, name)) is not None})
    else:
        for key, raw in _lsp_llm_section(lsp).items():
            lsp_field = _LSP_KEYS.get(key)
            if lsp_field is not None:
                v = _coerce(lsp_field, raw, f"crane.llm.{key}")
                if v is not None:
                    values[lsp_field] = v
    for field, raw in (explicit or {}).items():
        if field not in LLMSettings.__struct_fields__:
            raise SettingsError(f"unknown LLM setting {field!r}")
        v = raw  # typed by the caller (the CLI's flags); `validate` checks them
        if v is not None:
            values[field] = v
    return LLMSettings(**values).validate()


def add_llm_arguments(parser) -> None:
    """The LLM flags shared by `crane diagnose`, `crane check --mode llm` and `crane bench --mode llm`."""
    g = parser.add_argument_group("LLM (also CRANE_MODEL, CRANE_API_BASE, provider keys from their usual env vars)")
    g.add_argument("--model", help="litellm model, e.g. openai/gpt-4o-mini, anthropic/claude-..., ollama/qwen2.5")
    g.add_argument("--api-base", dest="api_base", help="base URL of the model server (local servers, proxies)")
    g.add_argument("--llm-timeout", dest="llm_timeout", type=float, help="seconds per request attempt (default 60; 300 for a local server)")
    g.add_argument("--llm-first-token-timeout", dest="llm_first_token_timeout", type=float,
                   help="seconds a local server may take to start its streamed reply (default 120)")
    g.add_argument("--llm-structured", dest="llm_structured", choices=STRUCTURED,
                   help="response_format: auto (default), schema (json_schema), object (json_object) or none")
    g.add_argument("--max-tokens", dest="max_tokens", type=int, help="completion token limit (default 800)")
    g.add_argument("--budget-usd", dest="budget_usd", type=float, help="stop once this session has cost this much")
    g.add_argument("--no-cache", dest="no_cache", action="store_true", help="do not read or write the response cache")


def settings_from_args(args, env: Mapping[str, str] | None = None) -> LLMSettings:
    explicit = {
        "model": getattr(args, "model", None),
        "api_base": getattr(args, "api_base", None),
        "timeout_s": getattr(args, "llm_timeout", None),
        "first_token_s": getattr(args, "llm_first_token_timeout", None),
        "max_tokens": getattr(args, "max_tokens", None),
        "budget_usd": getattr(args, "budget_usd", None),
        "structured": getattr(args, "llm_structured", None),
    }
    if getattr(args, "no_cache", False):
        explicit["cache"] = False
    return resolve_settings({k: v for k, v in explicit.items() if v is not None}, env=env)
