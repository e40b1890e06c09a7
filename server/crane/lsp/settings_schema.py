"""The VS Code extension's settings, derived from the one declaration in `crane.lsp.settings`.

    python -m crane.lsp.settings_schema            # print the `contributes.configuration.properties` entries
    python -m crane.lsp.settings_schema --write    # write them into vscode-client/package.json

Every server setting (`crane.<key>` or `crane.<section>.<key>`) becomes one property with its JSON type(s),
default, bounds, enum and description, all read from the msgspec fields (their `Meta`). The extension's own
settings (`CLIENT_KEYS`: the interpreter, the trace level, ...) stay written by hand in package.json. A test
checks that package.json holds exactly what this module derives, so the two cannot drift.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, get_args

import msgspec

from crane.lsp.settings import Settings, literal_choices

PACKAGE_JSON = Path(__file__).resolve().parents[3] / "vscode-client" / "package.json"
# Settings of the extension itself (not sent to the server), declared by hand in package.json.
CLIENT_KEYS = ("crane.python", "crane.trace.server")


def _leaf_schema(field: msgspec.structs.FieldInfo) -> dict[str, Any]:
    schema = msgspec.json.schema(field.type)
    schema.pop("$defs", None)
    choices: tuple[Any, ...] = literal_choices(field.type)
    if "anyOf" in schema:  # Optional[X]: one entry with a list of types
        types: list[str] = []
        for part in schema.pop("anyOf"):
            types.append(part.pop("type", "string"))  # a Literal of strings has only an enum
            schema.update(part)
        schema["type"] = types
        # Optional[Literal[...]]: its values, then null (unset)
        choices = next((c + (None,) for c in map(literal_choices, get_args(field.type)) if c), ())
    if choices:  # msgspec sorts enums; the declaration's order is the one the descriptions follow
        schema["enum"] = list(choices)
        schema.setdefault("type", "string")
    out: dict[str, Any] = {"type": schema.pop("type")}
    if "enum" in schema:
        out["enum"] = schema.pop("enum")
    out["default"] = msgspec.to_builtins(field.default)
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern"):
        if key in schema:
            out[key] = schema.pop(key)
    out.update(schema)  # description / markdownDescription / enumDescriptions
    return out


def package_json_properties() -> dict[str, dict[str, Any]]:
    """`crane.*` property -> its package.json declaration, for every server setting, in declaration order."""
    out: dict[str, dict[str, Any]] = {}
    for f in msgspec.structs.fields(Settings):
        if isinstance(f.default, msgspec.Struct):
            for sub in msgspec.structs.fields(type(f.default)):
                out[f"crane.{f.encode_name}.{sub.encode_name}"] = _leaf_schema(sub)
        else:
            out[f"crane.{f.encode_name}"] = _leaf_schema(f)
    return out


def merged_properties(current: dict[str, Any]) -> dict[str, Any]:
    """package.json's properties with the server settings replaced by the derived ones: derived keys first (in
    declaration order), then the client's own keys as they are."""
    derived = package_json_properties()
    client = {k: v for k, v in current.items() if k not in derived}
    return {**derived, **client}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crane.lsp.settings_schema")
    parser.add_argument("--write", action="store_true", help=f"update {PACKAGE_JSON}")
    args = parser.parse_args(argv)
    if not args.write:
        json.dump(package_json_properties(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    pkg = json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))
    cfg = pkg["contributes"]["configuration"]
    cfg["properties"] = merged_properties(cfg["properties"])
    PACKAGE_JSON.write_text(json.dumps(pkg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
