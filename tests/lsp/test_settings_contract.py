"""Each setting is declared once (crane.lsp.settings): the extension's package.json holds exactly what is derived
from that declaration, and the client's list of its own keys matches the server's."""

from __future__ import annotations

import json
import re

import msgspec

from crane.lsp.settings import Settings, parse_settings
from crane.lsp.settings_schema import CLIENT_KEYS, PACKAGE_JSON, package_json_properties

from .conftest import REPO


def _declared() -> dict:
    return json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))["contributes"]["configuration"]["properties"]


def test_package_json_declares_exactly_the_server_settings():
    derived = package_json_properties()
    declared = _declared()
    stale = {k: (declared.get(k), v) for k, v in derived.items() if declared.get(k) != v}
    assert not stale, "run `python -m crane.lsp.settings_schema --write`: " + repr(stale)
    extra = set(declared) - set(derived) - set(CLIENT_KEYS)
    assert not extra, f"settings declared in package.json but not by the server: {extra}"
    assert set(CLIENT_KEYS) <= set(declared)


def test_client_keys_agree_with_the_extension():
    ts = (REPO / "vscode-client" / "src" / "common" / "settings.ts").read_text(encoding="utf-8")
    match = re.search(r"export const CLIENT_KEYS = \[([^\]]*)\]", ts)
    assert match, "settings.ts must declare CLIENT_KEYS"
    assert tuple(re.findall(r"'([^']+)'", match.group(1))) == CLIENT_KEYS


def test_declared_defaults_are_the_settings_defaults() -> None:
    """The defaults VS Code sends when nothing is set parse, without a problem, into the default settings."""
    declared = _declared()
    nested: dict = {}
    for key, spec in declared.items():
        if key in CLIENT_KEYS:
            continue
        parts = key.split(".")[1:]
        node = nested
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = spec["default"]
    settings, problems = parse_settings({"crane": nested})
    assert problems == []
    assert settings == Settings()
    assert msgspec.to_builtins(Settings()) == {k: v for k, v in nested.items()}
