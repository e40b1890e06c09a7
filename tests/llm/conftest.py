"""Fixtures for the LLM-layer tests: the fake OpenAI-compatible server on 127.0.0.1, a secret API key in the
environment, and a guard that every network connection the test process makes goes to loopback."""

from __future__ import annotations

import socket
import sys

import pytest

from .fake_llm_server import FakeLLMServer

SECRET = "sk-crane-test-SECRET-9f8e7d6c5b4a"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

# socket audit events of the whole test process, recorded while a test of this folder runs
_events: list[tuple[str, object]] = []
_recording = False


def _audit(event: str, args) -> None:
    if not _recording:
        return
    if event == "socket.connect":
        sock, address = args
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _events.append((event, address[0]))
    elif event == "socket.getaddrinfo":
        _events.append((event, args[0]))


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def loopback_only():
    """Fail the test if anything but loopback was resolved or connected to."""
    global _recording
    _events.clear()
    _recording = True
    yield _events
    _recording = False
    hosts = {h.decode() if isinstance(h, bytes) else str(h) for _e, h in _events if h is not None}
    assert hosts <= LOOPBACK, f"non-loopback network use: {sorted(hosts - LOOPBACK)}"


@pytest.fixture(scope="session")
def fake_server():
    server = FakeLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def llm_server(fake_server):
    fake_server.reset()
    yield fake_server
    fake_server.reset()


@pytest.fixture(autouse=True)
def llm_env(monkeypatch, tmp_path):
    """A secret key in the provider's usual variable, a private cache dir, no CRANE_* leaking in."""
    for var in ("CRANE_MODEL", "CRANE_API_BASE", "CRANE_LLM_BUDGET_USD", "CRANE_LLM_CACHE", "CRANE_LLM_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("CRANE_CACHE_DIR", str(tmp_path / "cache"))
    # litellm must never be asked to fetch anything
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    yield


@pytest.fixture(autouse=True)
def fresh_detection():
    """What the LLM layer learns about a server in this process (its kind, that it cannot stream, a format it
    refused) is forgotten around each test, so that no test's server changes another's requests."""
    from crane.llm import client, local_server

    local_server.forget()
    client._format_downgrades.clear()
    yield
    local_server.forget()
    client._format_downgrades.clear()
