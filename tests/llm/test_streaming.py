"""Issue 32: a local model server's reply is streamed, so the time to its first token and the time of the whole
reply are bounded apart (crane.llm.local_call). A server that accepts the request and never starts its reply
fails at the first-token timeout, not at the request timeout; one that starts and then stalls fails at the
request timeout; a server that cannot stream is asked again without streaming. Real HTTP through litellm to the
test server on 127.0.0.1 (fake_llm_server.py, which answers `stream: true` with server-sent events)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crane.agent.model_call import request_turn
from crane.llm import client, local_call
from crane.llm.client import LLMTimeout, call_model
from crane.llm.cost import CostLedger
from crane.llm.settings import FIRST_TOKEN_S, LLMSettings, SettingsError, resolve_settings

from ..agent.fake_agent_server import FakeAgentServer, Turn
from .fake_llm_server import VALID_ANSWER, Reply

MESSAGES = [{"role": "system", "content": "Reply with JSON."}, {"role": "user", "content": "hi"}]



def local(server, **kw) -> LLMSettings:
    base: dict[str, Any] = {"cache": False, "structured": "object", "retries": 2}
    base.update(kw)
    return LLMSettings(model="openai/qwen2.5-coder-0.5b", api_base=server.api_base, **base)


def test_a_streamed_reply_is_put_back_together_with_its_usage(llm_server):
    ledger = CostLedger()
    text, usage = call_model(local(llm_server), MESSAGES, ledger)
    assert json.loads(text) == VALID_ANSWER  # sent in 12-character pieces
    body = llm_server.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (usage.prompt_tokens, usage.completion_tokens) == (1000, 100)  # the server's usage event
    assert ledger.totals().requests == 1 and ledger.totals().failed_requests == 0


def test_a_streamed_reply_without_usage_is_counted_offline(llm_server):
    """llama-cpp-python sends no usage event: litellm counts the tokens, with its bundled tokenizer (for a
    "llama-3" name it would download one from Hugging Face; the loopback guard fails the test if it tries)."""
    llm_server.reset(Reply(stream_usage=False))
    s = LLMSettings(model="openai/llama-3-8b-instruct", api_base=llm_server.api_base, cache=False,
                    structured="object")
    text, usage = call_model(s, MESSAGES, CostLedger())
    assert json.loads(text) == VALID_ANSWER and llm_server.requests[0]["body"]["stream"] is True
    assert usage.prompt_tokens > 0 and 20 < usage.completion_tokens < 200  # counted here, not the server's


def test_a_server_that_never_sends_a_token_fails_at_the_first_token_timeout(llm_server):
    llm_server.reset(Reply(stream="silent"))  # accepts the request, answers GET: alive, and sends nothing
    ledger = CostLedger()
    with pytest.raises(LLMTimeout, match=r"sent no token within 1 s \(the first-token timeout: "
                                         r"--llm-first-token-timeout") as e:
        call_model(local(llm_server, first_token_s=1.0, timeout_s=300.0), MESSAGES, ledger)
    assert "300" not in str(e.value)  # not the request timeout
    assert len(llm_server.requests) == 1  # not sent again: its one slot may still be busy with it
    assert ledger.totals().failed_requests == 1


def test_the_role_alone_is_not_a_first_token(llm_server):
    llm_server.reset(Reply(stream="stall", stall_after=0))  # headers and the role, then nothing
    with pytest.raises(LLMTimeout, match="sent no token within 1 s"):
        call_model(local(llm_server, first_token_s=1.0, timeout_s=300.0), MESSAGES, CostLedger())


def test_a_reply_that_stalls_after_its_first_piece_is_bounded_by_the_request_timeout(llm_server):
    llm_server.reset(Reply(stream="stall", stall_after=1))
    ledger = CostLedger()
    with pytest.raises(LLMTimeout, match=r"the reply stopped after 1 piece of the reply; abandoned at the 2 s "
                                         r"total timeout \(the request timeout: --llm-timeout") as e:
        call_model(local(llm_server, first_token_s=1.0, timeout_s=2.0), MESSAGES, ledger)
    assert "first-token" not in str(e.value)
    assert len(llm_server.requests) == 1 and ledger.totals().failed_requests == 1


def test_a_server_that_ignores_stream_has_answered_with_its_whole_reply(llm_server):
    """Its plain JSON chat completion is the reply: asking again would cost a second generation (and a scripted
    server's next turn), the old code's behaviour."""
    llm_server.reset(Reply(stream="json"), Reply(stream="json"))
    s = local(llm_server)
    ledger = CostLedger()
    text, _ = call_model(s, MESSAGES, ledger)
    assert json.loads(text) == VALID_ANSWER
    assert [r["body"].get("stream") for r in llm_server.requests] == [True]
    call_model(s, MESSAGES, ledger)
    assert len(llm_server.requests) == 2
    assert ledger.totals().failed_requests == 0


def test_a_server_that_refuses_stream_is_asked_again_without_it(llm_server):
    llm_server.reset(Reply(stream="reject"), Reply(stream="reject"))
    ledger = CostLedger()
    text, _ = call_model(local(llm_server, retries=0), MESSAGES, ledger)
    assert json.loads(text) == VALID_ANSWER
    assert [r["body"].get("stream") for r in llm_server.requests] == [True, None]
    assert ledger.totals().failed_requests == 0


def test_a_stream_that_breaks_before_any_piece_is_asked_once_more_without_streaming(llm_server):
    """llama-cpp-python 0.3.36 sent the headers of its event stream, then its chat template raised and it closed
    the connection (5 agent turns of a real run came back empty that way); the same request unstreamed was
    answered. The next request streams again: the server can stream."""
    llm_server.reset(Reply(stream="broken"), Reply(), Reply())
    ledger = CostLedger()
    s = local(llm_server, retries=0)
    text, _ = call_model(s, MESSAGES, ledger)
    assert json.loads(text) == VALID_ANSWER
    call_model(s, MESSAGES, ledger)
    assert [r["body"].get("stream") for r in llm_server.requests] == [True, None, True]
    assert ledger.totals().failed_requests == 0


def test_the_liveness_check_still_catches_a_dead_server_while_streaming(monkeypatch):
    import socket

    monkeypatch.setattr(local_call, "LIVENESS_AFTER_S", 0.5)
    monkeypatch.setattr(local_call, "LIVENESS_TIMEOUT_S", 0.5)
    with socket.socket() as hung:  # accepts connections and never answers, not even GET /health
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        s = LLMSettings(model="openai/m", api_base=f"http://127.0.0.1:{hung.getsockname()[1]}/v1", cache=False,
                        structured="object", first_token_s=200.0, timeout_s=300.0)
        with pytest.raises(client.LLMUnavailable, match="does not answer .*is it running, or hung"):
            call_model(s, MESSAGES, CostLedger())


@pytest.fixture
def agent_server():
    server = FakeAgentServer().start()
    yield server
    server.stop()


def test_an_agent_turn_is_streamed_and_its_tool_calls_put_back_together(agent_server, monkeypatch):
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    source = "df = pd.read_csv('data.csv')\nprint(df['age'].mean())  # a comment, {braces} and \"quotes\""
    agent_server.reset(Turn(calls=[("edit_cell", {"reflection": "the column is lower case", "cell": 3,
                                                  "source": source}),
                                   ("run_cell", {"reflection": "check it", "cell": 3})], text="Fixing it."))
    s = LLMSettings(model="openai/qwen2.5-coder-0.5b", api_base=agent_server.api_base, cache=False, retries=0)
    turn = request_turn(s, MESSAGES, CostLedger())
    assert agent_server.requests[0]["stream"] is True
    assert [c.name for c in turn.tool_calls] == ["edit_cell", "run_cell"] and not turn.text_calls
    assert json.loads(turn.tool_calls[0].arguments)["source"] == source
    assert json.loads(turn.tool_calls[1].arguments) == {"reflection": "check it", "cell": 3}
    assert turn.content == "Fixing it."
    assert (turn.usage.prompt_tokens, turn.usage.completion_tokens) == (1200, 80)


def test_the_first_token_timeout_is_one_declared_setting():
    assert LLMSettings().first_token_timeout_s == FIRST_TOKEN_S
    assert resolve_settings(env={"CRANE_LLM_FIRST_TOKEN_TIMEOUT": "45"}).first_token_s == 45.0
    assert resolve_settings(lsp={"crane": {"llm": {"firstTokenTimeout": 30}}}, env={}).first_token_s == 30.0
    with pytest.raises(SettingsError, match="CRANE_LLM_FIRST_TOKEN_TIMEOUT must be a number"):
        resolve_settings(env={"CRANE_LLM_FIRST_TOKEN_TIMEOUT": "soon"})
    with pytest.raises(SettingsError, match="first-token timeout must be positive"):
        resolve_settings({"first_token_s": 0}, env={})
    import argparse

    from crane.llm.settings import add_llm_arguments, settings_from_args

    parser = argparse.ArgumentParser()
    add_llm_arguments(parser)
    args = parser.parse_args(["--model", "openai/m", "--llm-first-token-timeout", "90"])
    assert settings_from_args(args, env={}).first_token_s == 90.0
