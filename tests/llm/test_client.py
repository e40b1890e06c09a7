"""The litellm client over real HTTP to the fake server: verdicts, retries, errors, accounting, cache, keys."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

from crane.llm import client as llm_client
from crane.llm.client import (
    LLMBadAnswer,
    LLMBudgetExceeded,
    LLMNotConfigured,
    LLMRequestRejected,
    LLMTimeout,
    LLMUnavailable,
)
from crane.llm.cost import CostLedger
from crane.llm.predictor import apredict_with_llm, predict_with_llm
from crane.llm.prompt import Prompt
from crane.llm.settings import LLMSettings

from .conftest import SECRET
from .fake_llm_server import FakeLLMServer, Reply

PRICED = "openai/gpt-4o-mini"  # in litellm 1.106.2's bundled price table: $0.15 / $0.60 per 1M tokens
UNPRICED = "openai/crane-local-test-model"
IN_PRICE, OUT_PRICE, CACHED_PRICE = 0.15e-6, 0.60e-6, 0.075e-6


def make_prompt(text: str = "will df['Age'] crash?") -> Prompt:
    messages = [{"role": "system", "content": "You are CRANE."}, {"role": "user", "content": text}]
    return Prompt(messages=messages, chars=len(text) + 14, user_chars=len(text), sections={})


def settings(server, model: str = PRICED, **kw) -> LLMSettings:
    base: dict[str, Any] = {"timeout_s": 5.0, "retries": 1, "retry_backoff_s": 0.01, "cache": False}
    base.update(kw)
    return LLMSettings(model=model, api_base=server.api_base, **base)


def test_valid_json_is_decoded_and_priced(llm_server):
    ledger = CostLedger()
    v = predict_with_llm(make_prompt(), settings(llm_server), ledger=ledger)
    assert v.answer.crash is True and v.answer.exception == "KeyError" and v.answer.line == 2
    assert v.answer.root_cause == "data confusion" and v.answer.confidence == 0.9
    assert not v.cached and not v.repaired
    assert v.usage.prompt_tokens == 1000 and v.usage.completion_tokens == 100 and v.usage.cached_tokens == 0
    assert v.usage.cost_usd == pytest.approx(1000 * IN_PRICE + 100 * OUT_PRICE)
    assert v.usage.model == PRICED
    (req,) = llm_server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == f"Bearer {SECRET}"  # the key came from OPENAI_API_KEY
    body = req["body"]
    assert body["model"] == "gpt-4o-mini" and body["messages"][1]["content"] == "will df['Age'] crash?"
    assert body["response_format"]["type"] == "json_schema"  # structured output where supported
    assert body["response_format"]["json_schema"]["schema"]["required"][0] == "explanation"
    t = ledger.totals()
    assert (t.requests, t.prompt_tokens, t.completion_tokens) == (1, 1000, 100)
    assert t.cost_usd == pytest.approx(v.usage.cost_usd) and t.unpriced_requests == 0


def test_cached_prompt_tokens_are_priced_at_the_cache_rate(llm_server):
    llm_server.reset(Reply(usage={"prompt_tokens": 1000, "completion_tokens": 100, "cached_tokens": 600}))
    v = predict_with_llm(make_prompt(), settings(llm_server), ledger=CostLedger())
    assert v.usage.cached_tokens == 600
    assert v.usage.cost_usd == pytest.approx(400 * IN_PRICE + 600 * CACHED_PRICE + 100 * OUT_PRICE)


def test_unknown_model_counts_tokens_only_and_asks_for_a_json_object(llm_server):
    ledger = CostLedger()
    v = predict_with_llm(make_prompt(), settings(llm_server, model=UNPRICED), ledger=ledger)
    assert v.answer.crash is True
    assert v.usage.cost_usd is None and v.usage.prompt_tokens == 1000
    assert llm_server.requests[0]["body"]["response_format"] == {"type": "json_object"}
    t = ledger.totals()
    assert t.unpriced_requests == 1 and t.cost_usd == 0.0 and t.prompt_tokens == 1000


def test_invalid_json_then_valid_is_repaired_once(llm_server):
    llm_server.reset(Reply(content='{"crash": tru'), Reply.answer(crash=False, exception=None, line=None,
                                                                  explanation="df has the column: no error."))
    ledger = CostLedger()
    v = predict_with_llm(make_prompt(), settings(llm_server), ledger=ledger)
    assert v.repaired and v.answer.crash is False
    assert len(llm_server.requests) == 2
    repair = llm_server.requests[1]["body"]["messages"]
    assert repair[-2] == {"role": "assistant", "content": '{"crash": tru'}
    assert "not valid JSON" in repair[-1]["content"]
    assert v.usage.prompt_tokens == 2000 and v.usage.completion_tokens == 200  # both requests are paid
    assert ledger.totals().requests == 2


def test_schema_violation_is_repaired_too(llm_server):
    llm_server.reset(Reply.answer(confidence=7), Reply.answer())
    v = predict_with_llm(make_prompt(), settings(llm_server), ledger=CostLedger())
    assert v.repaired and v.answer.confidence == 0.9
    assert "confidence" in llm_server.requests[1]["body"]["messages"][-1]["content"]


def test_invalid_twice_is_a_clear_error(llm_server):
    llm_server.reset(Reply(content="I think it crashes."), Reply(content="```json\n{oops}\n```"))
    ledger = CostLedger()
    with pytest.raises(LLMBadAnswer, match="did not return a valid verdict, even after a repair request"):
        predict_with_llm(make_prompt(), settings(llm_server), ledger=ledger)
    assert len(llm_server.requests) == 2
    assert ledger.totals().requests == 2 and ledger.totals().prompt_tokens == 2000


@pytest.mark.parametrize("status, message", [(429, "rate limited"), (500, "HTTP 500")])
def test_transient_http_errors_are_retried(llm_server, status, message):
    llm_server.reset(Reply.error(status), Reply.answer())
    v = predict_with_llm(make_prompt(), settings(llm_server), ledger=CostLedger())
    assert v.answer.crash is True and len(llm_server.requests) == 2
    # and when they persist, a clear error after retries + 1 attempts
    llm_server.reset(Reply.error(status), Reply.error(status), Reply.error(status))
    with pytest.raises(LLMUnavailable, match=message) as exc:
        predict_with_llm(make_prompt(), settings(llm_server, retries=2), ledger=CostLedger())
    assert len(llm_server.requests) == 3 and "3 attempts" in str(exc.value)


def test_retry_after_header_is_honoured(llm_server):
    llm_server.reset(Reply.error(429, headers={"Retry-After": "0.4"}), Reply.answer())
    start = time.monotonic()
    predict_with_llm(make_prompt(), settings(llm_server), ledger=CostLedger())
    assert time.monotonic() - start >= 0.4


def test_client_errors_are_not_retried(llm_server):
    llm_server.reset(Reply.error(401, "Incorrect API key provided"), Reply.answer())
    with pytest.raises(LLMRequestRejected, match="refused the credentials"):
        predict_with_llm(make_prompt(), settings(llm_server, retries=3), ledger=CostLedger())
    assert len(llm_server.requests) == 1


def test_slow_reply_past_the_timeout(llm_server):
    # never answered while the test runs: the 0.5 s timeout (the message says it) is what ends the call, with no
    # wall-clock bound (a 3 s reply and a 2.5 s bound measured the machine's load)
    llm_server.reset(Reply(stream="silent"))
    with pytest.raises(LLMTimeout, match=r"timed out after 0\.5 s \(1 attempt\)"):
        predict_with_llm(make_prompt(), settings(llm_server, timeout_s=0.5, retries=0), ledger=CostLedger())


def test_dropped_connection(llm_server):
    llm_server.reset(Reply(drop=True), Reply(drop=True))
    with pytest.raises(LLMUnavailable, match="dropped the connection"):
        predict_with_llm(make_prompt(), settings(llm_server), ledger=CostLedger())
    assert len(llm_server.requests) == 2  # retried once


def test_dropped_connection_then_answer(llm_server):
    llm_server.reset(Reply(drop=True), Reply.answer())
    v = predict_with_llm(make_prompt(), settings(llm_server), ledger=CostLedger())
    assert v.answer.exception == "KeyError"


def test_server_down_is_a_clear_error(llm_server):
    s = LLMSettings(model=UNPRICED, api_base="http://127.0.0.1:9/v1", retries=0, timeout_s=2, cache=False)
    with pytest.raises(LLMUnavailable, match="could not be reached"):
        predict_with_llm(make_prompt(), s, ledger=CostLedger())


def test_response_format_rejected_falls_back_to_json_object(llm_server):
    llm_server.reset(Reply.error(400, "response_format json_schema is not supported by this server"), Reply.answer())
    s = settings(llm_server, model="openai/gpt-4o-mini-2024-07-18")
    v = predict_with_llm(make_prompt(), s, ledger=CostLedger())
    assert v.answer.crash
    kinds = [r["body"]["response_format"]["type"] for r in llm_server.requests]
    assert kinds == ["json_schema", "json_object"]
    llm_client._format_downgrades.clear()


def test_cache_answers_the_same_question_without_a_request(llm_server, tmp_path):
    ledger = CostLedger()
    s = settings(llm_server, cache=True, cache_dir=str(tmp_path / "c"))
    first = predict_with_llm(make_prompt(), s, ledger=ledger)
    second = predict_with_llm(make_prompt(), s, ledger=ledger)
    assert len(llm_server.requests) == 1
    assert second.cached and not first.cached and second.answer == first.answer
    assert second.usage == first.usage  # what the answer cost when it was paid for
    t = ledger.totals()
    assert t.requests == 1 and t.cache_hits == 1 and t.cost_usd == pytest.approx(first.usage.cost_usd)
    # another prompt or another model is another question
    predict_with_llm(make_prompt("other"), s, ledger=ledger)
    predict_with_llm(make_prompt(), settings(llm_server, model=UNPRICED, cache=True, cache_dir=s.cache_dir),
                     ledger=ledger)
    assert len(llm_server.requests) == 3
    files = list((tmp_path / "c" / "llm").rglob("*.json"))
    assert len(files) == 3 and json.loads(files[0].read_text())["version"] == 1


def test_corrupt_cache_entry_is_ignored(llm_server, tmp_path):
    s = settings(llm_server, cache=True, cache_dir=str(tmp_path / "c"))
    predict_with_llm(make_prompt(), s, ledger=CostLedger())
    (entry,) = (tmp_path / "c" / "llm").rglob("*.json")
    entry.write_text("{not json")
    v = predict_with_llm(make_prompt(), s, ledger=CostLedger())
    assert not v.cached and len(llm_server.requests) == 2


def test_budget_stops_requests(llm_server):
    ledger = CostLedger()
    s = settings(llm_server, budget_usd=0.0001)  # one request costs $0.00021
    predict_with_llm(make_prompt(), s, ledger=ledger)
    with pytest.raises(LLMBudgetExceeded, match="budget"):
        predict_with_llm(make_prompt("again"), s, ledger=ledger)
    assert len(llm_server.requests) == 1


def test_no_model_configured(llm_server):
    with pytest.raises(LLMNotConfigured, match="no model is configured"):
        predict_with_llm(make_prompt(), LLMSettings(), ledger=CostLedger())
    assert llm_server.requests == []


def test_keys_never_reach_logs_or_output(llm_server, caplog, capfd):
    llm_client.load_litellm()  # first, so its logger set-up does not undo the DEBUG levels below
    caplog.set_level(logging.DEBUG)  # everything, litellm's loggers included
    for name in ("LiteLLM", "litellm", "httpx", "httpcore", "openai"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    echo = f"Incorrect API key provided: {SECRET}"  # a server that echoes the key in its error
    llm_server.reset(Reply.error(500, echo), Reply.error(401, echo), Reply(content="nope"), Reply(content="nope"))
    errors = []
    for _ in range(2):
        try:
            predict_with_llm(make_prompt(), settings(llm_server), ledger=CostLedger())
        except Exception as exc:  # noqa: BLE001
            errors.append(str(exc))
    out, err = capfd.readouterr()
    assert len(errors) == 2 and "***" in errors[0]
    assert caplog.records, "logging was captured"
    for text in (caplog.text, out, err, *errors):
        assert SECRET not in text
    assert out == ""  # nothing on stdout (the daemon's LSP channel)
    for name in ("LiteLLM", "litellm", "httpx", "httpcore", "openai"):
        logging.getLogger(name).setLevel(logging.WARNING)


def test_only_loopback_is_contacted(loopback_only):
    server = FakeLLMServer().start()  # a new port: a new connection (pooled ones make no connect event)
    try:
        predict_with_llm(make_prompt(), settings(server), ledger=CostLedger())
    finally:
        server.stop()
    connects = [h for e, h in loopback_only if e == "socket.connect"]
    assert connects and set(connects) == {"127.0.0.1"}  # the guard saw the real connection


async def test_async_wrapper(llm_server):
    v = await apredict_with_llm(make_prompt(), settings(llm_server), ledger=CostLedger())
    assert v.answer.exception == "KeyError"
