"""The VS Code language-model tools (package.json `languageModelTools`) are the MCP tools: same names, same
arguments (plus `notebook`, which picks the open notebook), same required ones, same enums and bounds."""

from __future__ import annotations

import json
from pathlib import Path

from crane.mcp.tools import TOOLS, object_schema

PACKAGE = Path(__file__).resolve().parents[2] / "vscode-client" / "package.json"


def _plain(prop: dict) -> dict:
    """A property schema without descriptions and defaults, `anyOf [X, null]` read as X."""
    if "anyOf" in prop:
        prop = next(p for p in prop["anyOf"] if p.get("type") != "null")
    return {k: v for k, v in prop.items() if k not in ("description", "default", "title")}


def test_language_model_tools_match_the_mcp_tools():
    declared = {t["name"]: t for t in json.loads(PACKAGE.read_text())["contributes"]["languageModelTools"]}
    assert list(declared) == [t.name for t in TOOLS]
    for spec in TOOLS:
        lm = declared[spec.name]["inputSchema"]
        mcp = object_schema(spec.args)
        assert set(lm["properties"]) - {"notebook"} == set(mcp["properties"]) - {"notebook"}, spec.name
        assert sorted(lm.get("required", [])) == sorted(mcp.get("required", [])), spec.name
        for name, prop in mcp["properties"].items():
            if name == "notebook":
                continue
            want, got = _plain(prop), _plain(lm["properties"][name])
            if "enum" in want:
                assert sorted(got["enum"]) == sorted(want["enum"]), (spec.name, name)
            for bound in ("minimum", "maximum", "exclusiveMinimum", "maxItems", "maxLength"):
                assert got.get(bound) == want.get(bound), (spec.name, name, bound, got, want)
        assert declared[spec.name]["modelDescription"]
