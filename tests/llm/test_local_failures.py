"""Issue 32: a local model server that fails costs seconds and says why: one that accepts the request and never
answers (hung) is abandoned once it stops answering GET /health too; an API base without /v1, an HTML page
instead of JSON and a missing API key are each named as what they are (not "HTTP 500" / "unknown model")."""

from __future__ import annotations

import socket
import time

import pytest

from crane.llm import local_call
from crane.llm.client import LLMRequestRejected, LLMUnavailable, call_model
from crane.llm.cost import CostLedger
from crane.llm.settings import LLMSettings

from .fake_llm_server import Reply

MESSAGES = [{"role": "system", "content": "Reply with JSON."}, {"role": "user", "content": "hi"}]



def test_a_hung_server_is_abandoned_in_seconds_not_at_the_timeout(monkeypatch):
    monkeypatch.setattr(local_call, "LIVENESS_AFTER_S", 0.5)
    monkeypatch.setattr(local_call, "LIVENESS_TIMEOUT_S", 0.5)
    with socket.socket() as hung:  # accepts connections (the backlog) and never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        base = f"http://127.0.0.1:{hung.getsockname()[1]}/v1"
        s = LLMSettings(model="openai/qwen2.5-coder-0.5b", api_base=base, timeout_s=240.0, retries=2, cache=False,
                        structured="object")
        ledger = CostLedger()
        start = time.monotonic()
        with pytest.raises(LLMUnavailable, match="does not answer .*GET /health.*is it running, or hung"):
            call_model(s, MESSAGES, ledger)
        assert time.monotonic() - start < 120.0  # not the 240 s timeout (and not sent again)
        assert ledger.totals().failed_requests == 1


def test_a_busy_server_that_answers_get_is_waited_for(llm_server, monkeypatch):
    monkeypatch.setattr(local_call, "LIVENESS_AFTER_S", 0.2)
    llm_server.reset(Reply(delay_s=1.0))  # computing: the chat reply is late, GET /health is answered (404)
    text, _ = call_model(LLMSettings(model="openai/m", api_base=llm_server.api_base, timeout_s=30.0, cache=False,
                                     structured="object"), MESSAGES, CostLedger())
    assert "KeyError" in text and "/health" in llm_server.gets


def test_a_busy_llama_cpp_python_server_is_waited_for(llm_server, monkeypatch):
    """llama-cpp-python serves GET /v1/models under its model lock: while it computes a reply that request
    waits (and, waiting, makes it cut a streamed reply short). The liveness check must not ask it."""
    monkeypatch.setattr(local_call, "LIVENESS_AFTER_S", 0.2)
    monkeypatch.setattr(local_call, "LIVENESS_TIMEOUT_S", 0.3)
    llm_server.reset(Reply(delay_s=2.0))
    llm_server.model_lock = True
    text, _ = call_model(LLMSettings(model="openai/m", api_base=llm_server.api_base, timeout_s=60.0, cache=False,
                                     retries=0, structured="object"), MESSAGES, CostLedger())
    assert "KeyError" in text and "/v1/models" not in llm_server.gets


def test_an_api_base_without_v1_is_named(llm_server):
    llm_server.require_v1 = True
    llm_server.get_routes["/v1/models"] = {"data": [{"id": "qwen"}]}
    base = llm_server.api_base.removesuffix("/v1")
    s = LLMSettings(model="openai/qwen", api_base=base, cache=False, structured="object")
    with pytest.raises(LLMRequestRejected, match=r"the API base has no /v1 \(use --api-base .*:\d+/v1\)") as e:
        call_model(s, MESSAGES, CostLedger())
    assert "does not know this model" not in str(e.value)


def test_an_html_page_is_named(llm_server):
    llm_server.reset(Reply(raw=b"<!DOCTYPE html><html><body>Open WebUI</body></html>", content_type="text/html"))
    s = LLMSettings(model="openai/qwen", api_base=llm_server.api_base, cache=False, retries=0, structured="object")
    with pytest.raises(LLMRequestRejected, match="answered with an HTML page, not JSON"):
        call_model(s, MESSAGES, CostLedger())
    assert len(llm_server.requests) == 1  # not retried: it will not change


def test_a_missing_key_is_named(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    s = LLMSettings(model="openai/gpt-4o-mini", cache=False, retries=0)
    with pytest.raises(LLMRequestRejected, match="needs an API key, and none is set \\(set OPENAI_API_KEY") as e:
        call_model(s, MESSAGES, CostLedger())
    assert "HTTP 500" not in str(e.value)
