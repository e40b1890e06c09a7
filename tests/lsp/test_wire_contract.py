"""The wire contract is written once: the msgspec Structs. The client's TypeScript types are generated from
them (committed, and regenerated here to compare), and docs/protocol.md names every type and field."""

from __future__ import annotations

from crane.lsp.wire_schema import OUTPUT, generate, wire_names

from .conftest import REPO


def test_generated_typescript_is_up_to_date():
    assert OUTPUT.read_text(encoding="utf-8") == generate(), "run `python -m crane.lsp.wire_schema --write`"


def test_protocol_page_names_every_type_and_field():
    doc = (REPO / "docs" / "protocol.md").read_text(encoding="utf-8")
    missing = []
    for name, fields in wire_names().items():
        if f"`{name}`" not in doc and f"{name} " not in doc:
            missing.append(name)
        missing += [f"{name}.{f}" for f in fields if f not in doc]
    assert not missing, f"docs/protocol.md does not mention: {missing}"


def test_client_reexports_every_generated_type():
    ts = (REPO / "vscode-client" / "src" / "common" / "protocol.ts").read_text(encoding="utf-8")
    missing = [name for name in wire_names() if name not in ts]
    assert not missing, f"protocol.ts does not re-export: {missing}"
