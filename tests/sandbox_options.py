"""Tests choose sandbox options as an entry point does (`crane.sandbox.options.configure`), undone after the test."""

from __future__ import annotations

import pytest

from crane.sandbox import options
from crane.sandbox.options import SandboxOptions


def use_options(monkeypatch: pytest.MonkeyPatch, **fields) -> SandboxOptions:
    """Install `SandboxOptions(**fields)` for this test (fields not named keep their defaults)."""
    chosen = SandboxOptions(**fields)
    monkeypatch.setattr(options, "_active", chosen)
    return chosen
