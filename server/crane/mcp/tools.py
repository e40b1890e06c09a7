"""The MCP tool table: name, description, argument and result Structs, read-only hint, and the backend call.

Schemas are generated from the Structs (`crane.mcp.schemas`); `decode_args` is the one place arguments are
validated (strictly: unknown fields refused, types and bounds checked).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from crane.mcp.backend import KernelTools
from crane.mcp.schemas import (
    CheckCellArgs,
    CheckCodeArgs,
    FactsArgs,
    Fixes,
    FixesArgs,
    KernelFacts,
    Prediction,
    SandboxRun,
    TryCodeArgs,
)

_GUARANTEE = " Nothing runs in the user's live kernel: its namespace, execution count, history and outputs are " \
             "unchanged."


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    args: type[msgspec.Struct]
    result: type[msgspec.Struct]
    call: Callable[[KernelTools, Any], msgspec.Struct]
    read_only: bool = True  # it never changes anything outside CRANE (all of them: the sandbox is a copy)


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "crane_kernel_facts", "Kernel facts",
        "Facts about the live kernel's variables, read privately without running any code: type, shape, dtype, "
        "DataFrame columns with dtypes and NaN counts, value ranges, fitted-model attributes, library versions. "
        "`names` omitted: every user variable. Use it instead of running `df.head()` or `print(x)` in the "
        "kernel." + _GUARANTEE,
        FactsArgs, KernelFacts, lambda t, a: t.facts(a),
    ),
    ToolSpec(
        "crane_check_code", "Will this code crash?",
        "Predict whether `code` crashes if run now against the live kernel's state, with the evidence (the facts "
        "each finding used) and how it was reached: mode 'static' runs CRANE's rules on the kernel's facts; "
        "'auto' (default) also runs the code in a confined copy-on-write fork of the kernel, whose real exception "
        "(or clean run) decides. `prediction` is crash, no-crash or unknown (neither the facts nor a run decided: the "
        "run timed out or was blocked, the kernel was busy); never treat unknown as safe." + _GUARANTEE,
        CheckCodeArgs, Prediction, lambda t, a: t.check_code(a),
    ),
    ToolSpec(
        "crane_check_cell", "Will this notebook cell crash?",
        "Predict whether cell `cell` (1-based) of the notebook file crashes if run now against the live kernel, "
        "with the evidence and how it was reached (see crane_check_code; the notebook's other cells explain names "
        "that are defined later or never run)." + _GUARANTEE,
        CheckCellArgs, Prediction, lambda t, a: t.check_cell(a),
    ),
    ToolSpec(
        "crane_try_code", "Try code in a sandbox",
        "Run `code` against a confined copy-on-write fork of the live kernel (the sandbox) within `budget_s` "
        "seconds: outcome (crash, no-crash, timeout, blocked, unavailable), the exception with its traceback, "
        "stdout and stderr (bounded), and the side effects the sandbox refused (file writes outside a private "
        "layer, network, programs). Nothing it does reaches the kernel, the disk or the network. Use it to test "
        "code before proposing it for the user's kernel." + _GUARANTEE,
        TryCodeArgs, SandboxRun, lambda t, a: t.try_code(a),
    ),
    ToolSpec(
        "crane_fixes", "Verified fixes for a crashing cell",
        "Search repairs for notebook cell `cell` (1-based) that crashes against the live kernel: each candidate "
        "runs in the sandbox from the live state; only those that run clean are returned (at most three, "
        "smallest change first), as edits (new source, cells to run first, a unified diff). Nothing is written "
        "to the notebook." + _GUARANTEE,
        FixesArgs, Fixes, lambda t, a: t.fixes(a),
    ),
)
BY_NAME = {t.name: t for t in TOOLS}


def object_schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON Schema of a Struct as one object schema (MCP wants `type: object` at the top), with `$defs`.

    An optional property (`X | None = None`) is described as X alone, with its `type` at the top: clients that
    build arguments from a schema (the MCP Inspector's CLI) read `anyOf` as "a string" and would send a list as
    text; omitting the property is how a caller says "none" (null is still accepted)."""
    (_ref,), defs = msgspec.json.schema_components([struct], ref_template="#/$defs/{name}")
    top = dict(defs.pop(struct.__name__))
    if "properties" in top:
        top["properties"] = {name: _typed(_without_null(prop)) for name, prop in top["properties"].items()}
    if defs:
        top["$defs"] = defs
    return top


def _typed(prop: dict[str, Any]) -> dict[str, Any]:
    """An enum of strings says `type: string` too (some clients want a `type` on every property)."""
    if "enum" in prop and "type" not in prop and all(isinstance(v, str) for v in prop["enum"]):
        return {"type": "string", **prop}
    return prop


def _without_null(prop: dict[str, Any]) -> dict[str, Any]:
    options = prop.get("anyOf")
    if not options or len(options) != 2 or {"type": "null"} not in options:
        return prop
    (kept,) = [o for o in options if o != {"type": "null"}]
    if "$ref" in kept:
        return prop
    out = {**kept, **{k: v for k, v in prop.items() if k not in ("anyOf", "default")}}
    if prop.get("default") is not None:
        out["default"] = prop["default"]
    return out


class ArgumentError(ValueError):
    """Arguments that do not match a tool's input schema."""


def decode_args(spec: ToolSpec, arguments: dict[str, Any] | None) -> msgspec.Struct:
    try:
        return msgspec.convert(arguments or {}, spec.args, strict=True)
    except msgspec.ValidationError as exc:
        raise ArgumentError(f"{spec.name}: invalid arguments: {exc}") from None


def encode_result(value: msgspec.Struct) -> dict[str, Any]:
    out = msgspec.to_builtins(value)
    assert isinstance(out, dict)
    return out
