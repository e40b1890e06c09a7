"""Typed server settings (the integration contract's `crane` section) and the daemon's tuning knobs.

Settings come from `initializationOptions` and `workspace/didChangeConfiguration`, as `{"crane": {...}}` or
the section itself, camelCase:

    mode: "static" | "auto" | "llm"                     (default "auto")
    speculative: {enabled: true, budgetSeconds: 10}
    llm: {model: null | str, apiBase: null | str, ...}  (other keys of docs/llm.md pass through)
    agent: {maxSteps: 10, budgetUsd: null | float, stepMode: false}
    kernel: {connectionFile: null | str}
    jupyterServer: {url: null | str}                    (kernels behind a Jupyter Server; token: $JUPYTER_TOKEN)
    hover: true
    logLevel: "error" | "warn" | "info" | "debug"      (default "info")

Every value is validated on its own: an invalid one falls back to the default of that key only, and the
problems are reported together (the caller shows one warning). Unknown keys are ignored; `null` means unset.

Tuning knobs that are not user settings (debounce, probe and attach timeouts, discovery interval) come from
`CRANE_LSP_*` environment variables (`Tuning.from_env`), read once at start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

Mode = Literal["static", "auto", "llm"]
LogLevel = Literal["error", "warn", "info", "debug"]

# crane.llm keys the LLM layer understands besides model/apiBase (docs/llm.md), passed to resolve_settings
LLM_EXTRA_KEYS = ("timeout", "maxTokens", "temperature", "retries", "budgetUsd", "cache", "cacheDir")


class SpeculativeSettings(msgspec.Struct, rename="camel", frozen=True):
    enabled: bool = True
    budget_seconds: float = 10.0


class LLMSection(msgspec.Struct, rename="camel", frozen=True):
    model: str | None = None
    api_base: str | None = None
    extra: dict[str, Any] = {}  # the other documented crane.llm keys, already validated


class AgentSettings(msgspec.Struct, rename="camel", frozen=True):
    max_steps: int = 10
    budget_usd: float | None = None
    step_mode: bool = False


class KernelSettings(msgspec.Struct, rename="camel", frozen=True):
    connection_file: str | None = None


class JupyterServerSettings(msgspec.Struct, rename="camel", frozen=True):
    url: str | None = None  # remote kernels attach through this server (crane.kernel.target.ServerSpec)

    def spec(self) -> Any:
        """The `ServerSpec` (token from $JUPYTER_TOKEN, which the editor fills from its secret storage), or None."""
        if not self.url:
            return None
        from crane.kernel.target import ServerSpec

        return ServerSpec.parse(self.url)


class Settings(msgspec.Struct, rename="camel", frozen=True):
    mode: Mode = "auto"
    speculative: SpeculativeSettings = SpeculativeSettings()
    llm: LLMSection = LLMSection()
    agent: AgentSettings = AgentSettings()
    kernel: KernelSettings = KernelSettings()
    jupyter_server: JupyterServerSettings = JupyterServerSettings()
    hover: bool = True
    log_level: LogLevel = "info"

    def llm_section(self) -> dict[str, Any]:
        """The `crane.llm` section for `crane.llm.settings.resolve_settings(lsp=...)`."""
        out: dict[str, Any] = dict(self.llm.extra)
        if self.llm.model is not None:
            out["model"] = self.llm.model
        if self.llm.api_base is not None:
            out["apiBase"] = self.llm.api_base
        return {"llm": out}

    def llm_settings(self) -> Any:
        """The resolved `crane.llm.settings.LLMSettings` (LSP settings over the environment)."""
        from crane.llm.settings import resolve_settings

        return resolve_settings(lsp=self.llm_section())

    @property
    def speculative_on(self) -> bool:
        return self.mode in ("auto", "llm") and self.speculative.enabled


# -- validation, one key at a time ------------------------------------------------------------------------------
def _check_float(lo: float, hi: float, allow_none: bool = False):
    def check(v: Any) -> Any:
        if v is None and allow_none:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"expected a number, got {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"expected a number in [{lo:g}, {hi:g}], got {v!r}")
        return float(v)

    return check


def _check_int(lo: int, hi: int):
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, float) and v.is_integer()):
            raise ValueError(f"expected an integer, got {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"expected an integer in [{lo}, {hi}], got {v!r}")
        return int(v)

    return check


def _check_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {v!r}")
    return v


def _check_choice(*choices: str):
    def check(v: Any) -> str:
        if v not in choices:
            raise ValueError(f"expected {' | '.join(repr(c) for c in choices)}, got {v!r}")
        return v

    return check


def _check_str(v: Any) -> str | None:
    if not isinstance(v, str):
        raise ValueError(f"expected a string or null, got {v!r}")
    return v.strip() or None


def _check_url(v: Any) -> str | None:
    s = _check_str(v)
    if s is not None and not s.startswith(("http://", "https://")):
        raise ValueError(f"expected an http(s) URL or null, got {v!r}")
    return s


def _check_server_url(v: Any) -> str | None:
    s = _check_url(v)
    if s is not None:
        from crane.kernel.target import ServerSpec, ServerSpecError

        try:
            ServerSpec.parse(s, env={})
        except ServerSpecError as exc:
            raise ValueError(str(exc)) from None
    return s


def _check_log_level(v: Any) -> str:
    if v == "warning":  # the older spelling
        return "warn"
    return _check_choice("error", "warn", "info", "debug")(v)


# section -> key -> (field name, checker)
_SCHEMA: dict[str | None, dict[str, tuple[str, Any]]] = {
    None: {
        "mode": ("mode", _check_choice("static", "auto", "llm")),
        "hover": ("hover", _check_bool),
        "logLevel": ("log_level", _check_log_level),
    },
    "speculative": {
        "enabled": ("enabled", _check_bool),
        "budgetSeconds": ("budget_seconds", _check_float(0.1, 600.0)),
    },
    "llm": {"model": ("model", _check_str), "apiBase": ("api_base", _check_url)},
    "agent": {
        "maxSteps": ("max_steps", _check_int(1, 100)),
        "budgetUsd": ("budget_usd", _check_float(0.0, 1e6)),
        "stepMode": ("step_mode", _check_bool),
    },
    "kernel": {"connectionFile": ("connection_file", _check_str)},
    "jupyterServer": {"url": ("url", _check_server_url)},
}
_SECTION_TYPES = {
    "speculative": SpeculativeSettings,
    "llm": LLMSection,
    "agent": AgentSettings,
    "kernel": KernelSettings,
    "jupyterServer": JupyterServerSettings,
}


def _crane_section(raw: Any) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"settings must be a JSON object, got {type(raw).__name__}")
    inner = raw.get("crane")
    return inner if isinstance(inner, Mapping) else raw


def _check_llm_extra(key: str, value: Any) -> Any:
    from crane.llm.settings import SettingsError, resolve_settings

    try:
        resolve_settings(lsp={"llm": {key: value}}, env={})
    except SettingsError as exc:
        raise ValueError(str(exc)) from None
    return value


def parse_settings(raw: Any) -> tuple[Settings, list[str]]:
    """The settings, and the problems found (each names the key and says which default was used)."""
    problems: list[str] = []
    try:
        section = _crane_section(raw)
    except TypeError as exc:
        return Settings(), [f"{exc}; using the defaults"]
    defaults = Settings()
    top: dict[str, Any] = {}
    for name, spec in _SCHEMA.items():
        if name is None:
            values, where, default_obj = section, "crane", defaults
        else:
            values = section.get(name)
            if values is None:
                continue
            where, default_obj = f"crane.{name}", getattr(defaults, _field_of(name))
            if not isinstance(values, Mapping):
                problems.append(f"{where}: expected an object, got {values!r}; using its defaults")
                continue
        fields: dict[str, Any] = {}
        for key, (field, check) in spec.items():
            value = values.get(key)
            if value is None:
                continue  # null means unset
            try:
                fields[field] = check(value)
            except ValueError as exc:
                problems.append(f"{where}.{key}: {exc}; using {msgspec.json.encode(getattr(default_obj, field)).decode()}")
        if name == "llm":
            extra = {}
            for key in LLM_EXTRA_KEYS:
                if values.get(key) is None:
                    continue
                try:
                    extra[key] = _check_llm_extra(key, values[key])
                except ValueError as exc:
                    problems.append(f"crane.llm.{key}: {exc}; using its default")
            fields["extra"] = extra
        if name is None:
            top.update(fields)
        else:
            top[_field_of(name)] = _SECTION_TYPES[name](**fields)
    return Settings(**top), problems


def _field_of(section: str) -> str:
    """The Settings field of a camelCase section name ("jupyterServer" -> "jupyter_server")."""
    return "".join("_" + c.lower() if c.isupper() else c for c in section)


# -- tuning (environment) -----------------------------------------------------------------------------------------
class Tuning(msgspec.Struct, frozen=True):
    debounce_ms: int = 15  # per-cell debounce of the rules' diagnostics
    probe_timeout_ms: int = 1000  # a probe never waits longer behind a running cell (then: stale facts)
    attach_timeout_ms: int = 3000
    discovery_interval_ms: int = 3000  # look again for the notebook's kernel this often while none is attached
    speculate_delay_ms: int = 400  # a cell's text must be stable this long before it is run speculatively
    llm_delay_ms: int = 2000  # llm mode: the model is asked this long after a cell's last edit

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tuning:
        env = os.environ if env is None else env
        values = {}
        for field in cls.__struct_fields__:
            var = "CRANE_LSP_" + field.upper()
            if env.get(var):
                try:
                    values[field] = max(0, int(env[var]))
                except ValueError:
                    pass
        return cls(**values)
