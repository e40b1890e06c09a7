"""Typed server settings, from `initializationOptions` and `workspace/didChangeConfiguration`.

Accepted shapes: `{"crane": {...}}` (what a VS Code client sends for the `crane` section) or the section
itself. Each section is validated on its own: an invalid section is reported and falls back to its
defaults, the valid ones are kept. `llm` is passed through to `crane.llm.settings` (which validates it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

Millis = Annotated[int, msgspec.Meta(ge=0, le=600_000)]


class KernelSettings(msgspec.Struct, rename="camel"):
    connection_file: str | None = None  # (c) in the attach order: an explicit kernel connection file
    discovery: bool = True  # (b): look for the notebook's kernel among the runtime dirs' connection files
    discovery_interval_ms: Millis = 3000  # how often to look again while no kernel is attached
    probe_timeout_ms: Annotated[int, msgspec.Meta(ge=50, le=60_000)] = 1000  # never wait long behind a user cell
    attach_timeout_ms: Annotated[int, msgspec.Meta(ge=100, le=60_000)] = 3000


class DiagnosticsSettings(msgspec.Struct, rename="camel"):
    enabled: bool = True
    mode: Literal["live", "static"] = "live"  # static: never probe the kernel
    debounce_ms: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 15
    min_confidence: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0


class HoverSettings(msgspec.Struct, rename="camel"):
    enabled: bool = True


class Settings(msgspec.Struct, rename="camel"):
    kernel: KernelSettings = msgspec.field(default_factory=KernelSettings)
    diagnostics: DiagnosticsSettings = msgspec.field(default_factory=DiagnosticsSettings)
    hover: HoverSettings = msgspec.field(default_factory=HoverSettings)
    log_level: Literal["error", "warning", "info", "debug"] = "info"
    llm: dict[str, Any] = {}  # raw `crane.llm` section, resolved by crane.llm.settings.resolve_settings


_SECTIONS: dict[str, type] = {
    "kernel": KernelSettings,
    "diagnostics": DiagnosticsSettings,
    "hover": HoverSettings,
}


def _crane_section(raw: Any) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"settings must be a JSON object, got {type(raw).__name__}")
    inner = raw.get("crane")
    return inner if isinstance(inner, Mapping) else raw


def parse_settings(raw: Any) -> tuple[Settings, list[str]]:
    """Return the settings and a list of problems (each names the setting and says what was used)."""
    problems: list[str] = []
    try:
        section = _crane_section(raw)
    except TypeError as exc:
        return Settings(), [f"crane settings ignored: {exc}; using defaults"]
    values: dict[str, Any] = {}
    for name, typ in _SECTIONS.items():
        if name not in section or section[name] is None:
            continue
        try:
            values[name] = msgspec.convert(section[name], typ)
        except msgspec.ValidationError as exc:
            problems.append(f"crane.{name}: {exc}; using the defaults for crane.{name}")
            continue
        known = set(typ.__struct_encode_fields__)
        unknown = sorted(k for k in section[name] if k not in known)
        if unknown:
            problems.append(f"crane.{name}: unknown setting(s) {', '.join(unknown)} ignored")
    level = section.get("logLevel")
    if level is not None:
        if level in ("error", "warning", "info", "debug"):
            values["log_level"] = level
        else:
            problems.append(f"crane.logLevel: expected error|warning|info|debug, got {level!r}; using 'info'")
    llm = section.get("llm")
    if llm is not None:
        if isinstance(llm, Mapping):
            try:
                from crane.llm.settings import SettingsError, resolve_settings

                resolve_settings(lsp={"llm": dict(llm)}, env={})
                values["llm"] = dict(llm)
            except SettingsError as exc:
                problems.append(f"crane.llm: {exc}; LLM settings ignored")
            except ImportError:  # the LLM layer is not installed: keep the raw section for later
                values["llm"] = dict(llm)
        else:
            problems.append("crane.llm: expected an object; LLM settings ignored")
    return Settings(**values), problems
