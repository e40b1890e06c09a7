"""The `crane` settings, declared once, and the daemon's tuning knobs.

Each setting is one annotated field below: its type, default, bounds and description. From that one
definition come
- the per-key validation of what the client sends (`parse_settings`): `initializationOptions` and
  `workspace/didChangeConfiguration`, as `{"crane": {...}}` or the section itself, camelCase; every value is
  checked on its own, an invalid one falls back to that key's default, and the problems are reported together
  (the caller shows one warning); unknown keys are ignored; `null` (or an empty string) means unset;
- the VS Code extension's `contributes.configuration` (`settings_schema.package_json_properties`, written
  into vscode-client/package.json and checked by a test), so defaults and bounds are never repeated by hand.

The LLM section is the LLM layer's own typed struct (`crane.llm.settings.LLMOptions`): `llm_settings()` hands
it to `resolve_settings` as it is.

Tuning knobs that are not user settings (debounce, probe and attach timeouts, discovery interval) come from
`CRANE_LSP_*` environment variables (`Tuning.from_env`), read once at start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args, get_origin

import msgspec
from msgspec import Meta

from crane.llm.settings import LLMOptions, LLMSettings
from crane.policy import Mode
from crane.sandbox.options import ConfinementSetting, RunOptions, SandboxOptions, sandbox_options

LogLevel = Literal["error", "warn", "info", "debug"]


class SpeculativeSettings(RunOptions, rename="camel", frozen=True, kw_only=True):
    """`crane.speculative`: how sandbox runs are made (`crane.sandbox.options.RunOptions`, declared there once)
    and when the editor runs cells speculatively."""

    enabled: Annotated[
        bool, Meta(description="Allow speculative runs of a cell in a sandboxed copy of the kernel (never in the kernel itself).")
    ] = True
    budget_seconds: Annotated[
        float,
        Meta(ge=0.1, le=600,
             description="Time limit of one speculative run, in seconds; a run that takes longer is inconclusive."),
    ] = 10.0
    background_seconds: Annotated[
        float,
        Meta(ge=0, le=3600,
             description="Time limit of a full-size background run of a long cell (judged only in miniature or not "
                         "at all), in seconds; it runs at idle priority while the kernel is idle and stops when you "
                         "edit the cell or run any cell. 0: no background runs."),
    ] = 120.0


class AgentSettings(msgspec.Struct, rename="camel", frozen=True):
    max_steps: Annotated[
        int, Meta(ge=1, le=100, description="Maximum number of actions of the repair agent per run.")
    ] = 10
    budget_usd: Annotated[
        float,
        Meta(ge=0, description="Maximum model cost of one repair agent run, in US dollars. Unset: the LLM settings' "
                               "budget, if any."),
    ] | None = None
    step_mode: Annotated[
        bool,
        Meta(description="Start agent runs in step mode: every action the agent proposes waits for Step in the "
                         "agent panel."),
    ] = False


class KernelSettings(msgspec.Struct, rename="camel", frozen=True):
    connection_file: Annotated[
        str,
        Meta(extra_json_schema={"markdownDescription": (
            "Kernel connection file to attach the open notebooks to (a change attaches them at once). Unset: ask "
            "the notebook's kernel through the Jupyter extension, else the server's discovery in the Jupyter "
            "runtime directories. Supports `~`, `${workspaceFolder}`, `${userHome}` and `${env:NAME}`."
        )}),
    ] | None = None


class JupyterServerSettings(msgspec.Struct, rename="camel", frozen=True):
    url: Annotated[
        str,
        Meta(pattern=r"^https?://[^/?#\s]+", extra_json_schema={"markdownDescription": (
            "Base URL of the Jupyter Server your notebooks' kernels run on (JupyterHub: `https://HUB/user/NAME/`; a "
            "remote server; Enterprise Gateway). A remote kernel the Jupyter extension reports is attached through "
            "it. Store its token with **CRANE: Set Jupyter server token** (kept in VS Code's secret storage)."
        )}),
    ] | None = None

    def spec(self) -> Any:
        """The `crane.kernel.target.ServerSpec` (token: $JUPYTER_TOKEN, which the editor fills from its secret
        storage), or None when unset."""
        if not self.url:
            return None
        from crane.kernel.target import ServerSpec

        return ServerSpec.parse(self.url)


class Settings(msgspec.Struct, rename="camel", frozen=True):
    mode: Annotated[
        Mode,
        Meta(extra_json_schema={
            "markdownDescription": "How CRANE decides whether a cell will crash. Changing it takes effect at once "
                                   "(no restart).",
            "enumDescriptions": [
                "Rules on the live kernel's facts (static analysis only without a kernel). Never runs code, never "
                "calls a model.",
                "Rules first; then, when a kernel is attached and idle, a sandboxed speculative run of the cell "
                "confirms or clears their findings (needs crane.speculative.enabled).",
                "Auto, plus model-backed diagnostics for cells the rules and the sandbox leave undecided (needs "
                "crane.llm.model; costs tokens).",
            ],
        }),
    ] = "auto"
    speculative: SpeculativeSettings = SpeculativeSettings()
    sandbox: ConfinementSetting = "auto"
    llm: LLMOptions = LLMOptions()
    agent: AgentSettings = AgentSettings()
    kernel: KernelSettings = KernelSettings()
    jupyter_server: JupyterServerSettings = JupyterServerSettings()
    hover: Annotated[
        bool,
        Meta(description="Show the runtime facts of names (type, shape, dtypes, columns, ...) from the live kernel "
                         "on hover."),
    ] = True
    log_level: Annotated[LogLevel, Meta(description="Level of the server's log in the CRANE output channel.")] = "info"

    def llm_settings(self) -> LLMSettings:
        """The resolved LLM settings (these settings over the environment; raises SettingsError)."""
        from crane.llm.settings import resolve_settings

        return resolve_settings(lsp=self.llm)

    def sandbox_options(self) -> SandboxOptions:
        """The sandbox's options these settings say (passed to every speculative run)."""
        return sandbox_options(self.speculative, self.sandbox)

    @property
    def speculative_on(self) -> bool:
        return self.mode in ("auto", "llm") and self.speculative.enabled


# Older spellings still accepted: (key, value) -> value.
_ALIASES: dict[tuple[str, Any], Any] = {("logLevel", "warning"): "warn"}


def _crane_section(raw: Any) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"settings must be a JSON object, got {type(raw).__name__}")
    inner = raw.get("crane")
    return inner if isinstance(inner, Mapping) else raw


def _check_fields(
    struct_type: type[msgspec.Struct], values: Mapping[str, Any], where: str, problems: list[str]
) -> dict[str, Any]:
    """The valid scalar fields of `values` (by wire name) for `struct_type`; a problem per invalid one."""
    defaults = struct_type()
    out: dict[str, Any] = {}
    for f in msgspec.structs.fields(struct_type):
        if isinstance(f.default, msgspec.Struct):
            continue  # a section: checked on its own
        value = values.get(f.encode_name)
        if isinstance(value, str):
            value = value.strip() or None
        value = _ALIASES.get((f.encode_name, value), value)
        if value is None:
            continue  # null means unset
        try:
            out[f.name] = msgspec.convert(value, f.type)
        except msgspec.ValidationError as exc:
            default = msgspec.json.encode(getattr(defaults, f.name)).decode()
            problems.append(f"{where}.{f.encode_name}: {_problem(exc, f.type, value)}; using {default}")
    return out


def _problem(exc: msgspec.ValidationError, typ: Any, value: Any) -> str:
    """msgspec's reason, told with the value the user wrote ("expected `int` >= 1, got -1")."""
    choices = literal_choices(typ)
    if choices:
        return f"expected {' | '.join(repr(c) for c in choices)}, got {value!r}"
    text = str(exc).split(" - at `", 1)[0]
    text = text[:1].lower() + text[1:]
    return re.sub(r"got `[^`]*`", f"got {value!r}", text) if "got `" in text else f"{text}, got {value!r}"


def literal_choices(typ: Any) -> tuple[Any, ...]:
    """The values of a Literal type (through Annotated), in declaration order; () for other types."""
    while get_origin(typ) is Annotated:
        typ = get_args(typ)[0]
    return get_args(typ) if get_origin(typ) is Literal else ()


def parse_settings(raw: Any) -> tuple[Settings, list[str]]:
    """The settings, and the problems found (each names the key and says which default was used)."""
    problems: list[str] = []
    try:
        section = _crane_section(raw)
    except TypeError as exc:
        return Settings(), [f"{exc}; using the defaults"]
    top = _check_fields(Settings, section, "crane", problems)
    for f in msgspec.structs.fields(Settings):
        if not isinstance(f.default, msgspec.Struct):
            continue
        values = section.get(f.encode_name)
        if values is None:
            continue
        where = f"crane.{f.encode_name}"
        if not isinstance(values, Mapping):
            problems.append(f"{where}: expected an object, got {values!r}; using its defaults")
            continue
        top[f.name] = type(f.default)(**_check_fields(type(f.default), values, where, problems))
    return Settings(**top), problems


# -- tuning (environment) -----------------------------------------------------------------------------------------
class Tuning(msgspec.Struct, frozen=True):
    debounce_ms: int = 15  # per-cell debounce of the rules' diagnostics
    probe_timeout_ms: int = 1000  # a probe never waits longer behind a running cell (then: stale facts)
    attach_timeout_ms: int = 3000
    discovery_interval_ms: int = 3000  # look again for the notebook's kernel this often while none is attached
    speculate_delay_ms: int = 400  # a cell's text must be stable this long before it is run speculatively
    llm_delay_ms: int = 2000  # llm mode: the model is asked this long after a cell's last edit
    background_idle: int = 1  # background full-size runs at idle CPU priority (0: normal, for loaded test machines)

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
