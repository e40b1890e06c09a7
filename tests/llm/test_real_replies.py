"""Issue 22: what real small local models (SmolLM2-135M, Qwen2.5-Coder-0.5B on llama.cpp servers) said, replayed
through the fake OpenAI-compatible server on 127.0.0.1 (../shared/llm-replies/replies.jsonl), one test (or
more) per defect of the issue."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from crane.agent import model_call
from crane.agent.loop import NUDGE
from crane.finding import Finding
from crane.llm import client, settings
from crane.llm.client import LLMTimeout, LLMUnavailable, call_model
from crane.llm.cost import CostLedger
from crane.llm.predictor import diagnose, predict_with_llm
from crane.llm.prompt import SYSTEM_PROMPT, Prompt
from crane.llm.schema import AnswerError, LLMAnswer, decode_answer
from crane.llm.settings import LLMSettings
from crane.notebook.model import Cell
from crane.policy import ModelAnswer, decide

from .fake_llm_server import Reply

# What issue 22 added, looked up at use (so that each test, not the module, fails on the code before it).


def parse_text_tool_calls(text: str):
    return model_call.parse_text_tool_calls(text)  # type: ignore[attr-defined,unused-ignore]


def request_turn(*args, **kwargs):
    return model_call.request_turn(*args, **kwargs)

REPLIES = Path(__file__).resolve().parents[3] / "shared" / "llm-replies" / "replies.jsonl"
UNPRICED = "openai/qwen2.5-coder-0.5b"


def recorded(index: int) -> dict[str, Any]:
    if not REPLIES.exists():
        pytest.skip(f"the recorded replies are not here: {REPLIES}")
    return json.loads(REPLIES.read_text().splitlines()[index])


def replay(index: int) -> Reply:
    """The recorded exchange's response, as the fake server's reply."""
    rec = recorded(index)
    resp = rec["response"]
    if rec["status"] != 200:
        return Reply(status=rec["status"], body=resp)
    u = resp.get("usage") or {}
    return Reply(content=resp["choices"][0]["message"]["content"],
                 usage={"prompt_tokens": u.get("prompt_tokens", 0), "completion_tokens": u.get("completion_tokens", 0)})


def content(index: int) -> str:
    return recorded(index)["response"]["choices"][0]["message"]["content"]


def local(server, model: str = UNPRICED, **kw) -> LLMSettings:
    base: dict[str, Any] = {"retries": 2, "retry_backoff_s": 0.01, "cache": False}
    base.update(kw)
    return LLMSettings(model=model, api_base=server.api_base, **base)


def prompt() -> Prompt:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "## Target cell\n1| print(X)"}]
    return Prompt(messages=messages, chars=100, user_chars=30, sections={})



def name_error(confidence: float = 0.95) -> Finding:
    return Finding(rule="undefined-name", ename="NameError", message="name 'X' is not defined", line=3,
                   confidence=confidence, evidence=["the kernel has no variable 'X' (probe)"])


# -- defect 1: a model's "no crash" never clears a certain finding ---------------------------------------------

def test_defect1_llm_mode_keeps_a_probe_verified_name_error_over_a_model_no_crash():
    d = decide("llm", [name_error()], None, ModelAnswer(crash=False))
    assert d.prediction == "crash" and d.findings == [name_error()] and d.decided_by == "rules"
    # issue 32: a model only adds; even an unverified guess (no kernel: notebook order, 0.8) stays
    assert decide("llm", [name_error(0.8)], None, ModelAnswer(crash=False)).prediction == "crash"


def test_defect1_a_rule_that_judged_from_the_kernels_facts_is_not_cleared_either():
    """Qwen 0.5B's "no crash" cleared pandas_10's astype finding (the probe had read the column's text): mode
    llm scored under static on the real run. A finding made from kernel facts at high confidence stays."""
    from crane.rulekit.registry import load_rules
    load_rules()
    astype = Finding(rule="pandas-astype-numeric", ename="ValueError", line=2, confidence=0.95,
                     message="could not convert string to float: 'n/a'", evidence=["df['price'] holds 'n/a' (probe)"])
    d = decide("llm", [astype], None, ModelAnswer(crash=False))
    assert d.prediction == "crash" and d.findings == [astype] and d.decided_by == "rules"
    low = Finding(rule="pandas-astype-numeric", ename="ValueError", line=2, confidence=0.7, message="maybe")
    assert decide("llm", [low], None, ModelAnswer(crash=False)).prediction == "crash"  # issue 32: kept too


def test_defect1_diagnose_with_the_recorded_qwen_no_crash_still_predicts_the_name_error(llm_server):
    # Qwen: "no crash (0.95)", explanation "1-3 sentences grounded in the facts," (issue 32: a placeholder, re-asked)
    llm_server.reset(replay(45), Reply.answer(crash=False, exception=None, line=None, root_cause=None,
                                              explanation="X and y are defined, so fit runs without error."))
    target = Cell(number=3, cell_type="code", source="from sklearn.tree import DecisionTreeClassifier\nmodel = DecisionTreeClassifier()\n"
                  "model.fit(X, y)")
    d = diagnose([], target, None, [name_error()], local(llm_server), ledger=CostLedger())
    assert d.answer is not None and d.answer.crash is False  # what the model said is shown as it said it
    assert d.prediction == "crash" and d.kept == [name_error()]
    assert "does not clear the rules' findings" in d.markdown


# -- defect 2: answer specs a small model cannot copy as values ------------------------------------------------

def test_defect2_the_answer_spec_quotes_its_placeholders_and_gives_a_filled_in_example():
    assert not re.search(r'"explanation": 1-3', SYSTEM_PROMPT)  # v1's spec was copied as `"explanation": 1`
    assert '"explanation": "<' in SYSTEM_PROMPT
    example = SYSTEM_PROMPT.split("Example of a complete reply", 1)[1].split("\n", 1)[1]
    answer = msgspec.convert(json.loads(example), LLMAnswer)  # a complete, valid answer ...
    assert answer.crash is True and answer.exception == "KeyError" and answer.root_cause == "data confusion"
    with pytest.raises(AnswerError, match="repeats the example"):  # ... that is no answer when sent back
        decode_answer(example)


def test_defect2_a_detected_llama_server_gets_json_schema_for_an_alias_litellm_does_not_know(llm_server):
    llm_server.reset(replay(44))
    llm_server.get_routes["/props"] = {"default_generation_settings": {"n_ctx": 4096}}
    v = predict_with_llm(prompt(), local(llm_server), ledger=CostLedger())
    assert v.answer.crash is True and v.answer.exception == "KeyError"
    assert llm_server.requests[0]["body"]["response_format"]["type"] == "json_schema"
    assert "/props" in llm_server.gets


def test_defect2_an_unknown_local_server_gets_json_object_and_the_setting_forces_a_schema(llm_server):
    call_model(local(llm_server), prompt().messages, CostLedger())
    assert llm_server.requests[-1]["body"]["response_format"] == {"type": "json_object"}
    call_model(local(llm_server, structured="schema"), prompt().messages, CostLedger())
    assert llm_server.requests[-1]["body"]["response_format"]["type"] == "json_schema"
    call_model(local(llm_server, structured="none"), prompt().messages, CostLedger())
    assert "response_format" not in llm_server.requests[-1]["body"]


# -- defect 7: response_format fallback on any 4xx/5xx naming it (llama-cpp-python answers HTTP 500) -------------

def test_defect7_http_500_naming_response_format_falls_back_to_json_object(llm_server):
    llm_server.reset(replay(39), replay(44))  # llama-cpp-python's 500 on json_schema, then Qwen's valid verdict
    v = predict_with_llm(prompt(), local(llm_server, model="openai/gpt-4o-mini"), ledger=CostLedger())
    assert v.answer.crash is True
    first, second = (r["body"]["response_format"]["type"] for r in llm_server.requests)
    assert (first, second) == ("json_schema", "json_object")


# -- defect 9 (decoding): free-text exception names, root causes outside the taxonomy ----------------------------

def test_defect9_free_text_exception_is_normalised_to_the_class_name():
    answer = decode_answer(content(74))  # "KeyError: 'Age' — df has no column 'Age' (did you mean 'age'?)"
    assert answer.exception == "KeyError" and answer.crash is True


def test_defect9_a_root_cause_outside_the_taxonomy_keeps_the_verdict_as_unknown():
    answer = decode_answer(content(9))  # SmolLM2: root_cause "The target cell is a non-existent column ..."
    assert answer.crash is True and answer.root_cause == "unknown" and answer.exception == "Exception"


# -- defect 4: local servers: no retry on timeout, a CPU-fit default timeout -----------------------------------

def test_defect4_local_api_base_is_detected():
    is_local_server = settings.is_local_server  # type: ignore[attr-defined,unused-ignore]
    assert is_local_server("http://127.0.0.1:8080/v1") and is_local_server("http://192.168.1.20:11434")
    assert is_local_server("http://localhost:1234/v1") and is_local_server(None, "ollama/qwen2.5-coder")
    assert not is_local_server("https://api.openai.com/v1") and not is_local_server(None, "openai/gpt-4o-mini")
    assert LLMSettings(model="m", api_base="http://127.0.0.1:8080/v1").request_timeout_s == settings.LOCAL_TIMEOUT_S
    assert LLMSettings(model="openai/gpt-4o-mini").request_timeout_s == 60.0
    assert LLMSettings(model="m", api_base="http://127.0.0.1:1", timeout_s=7.0).request_timeout_s == 7.0


def test_defect4_a_timed_out_request_to_a_local_server_is_not_sent_again(llm_server):
    llm_server.reset(Reply(delay_s=1.5), Reply(delay_s=1.5), Reply(delay_s=1.5))
    ledger = CostLedger()
    with pytest.raises(LLMTimeout):
        call_model(local(llm_server, timeout_s=0.3), prompt().messages, ledger)
    assert len(llm_server.requests) == 1  # the single-slot server would still be computing the abandoned one
    assert ledger.totals().failed_requests == 1


# -- defect 5: the agent's time budget holds during a request ---------------------------------------------------

def test_defect5_a_deadline_abandons_the_request_in_flight(llm_server):
    from crane.llm.litellm_import import load_litellm

    load_litellm()  # imported before the clock starts: the budget is spent in the request, not in the import
    # a runaway CPU reply: never answered while the test runs; the request's timeout would be 600 s
    llm_server.reset(Reply(content="thinking", stream="silent"))
    # abandoned at the deadline (DeadlinePassed, "during the request"), not at the request's timeout (LLMTimeout):
    # the error tells which, no wall-clock bound. The deadline leaves the request time to be sent on a loaded
    # machine (2 s could pass before it was: "before the request", none sent)
    with pytest.raises(client.DeadlinePassed, match="during the request"):  # type: ignore[attr-defined,unused-ignore]
        request_turn(local(llm_server, timeout_s=600.0), prompt().messages, CostLedger(),
                     deadline=time.monotonic() + 10.0)
    assert len(llm_server.requests) == 1  # and not sent again


# -- defect 6: tool calls written as text by models without native tool calling --------------------------------

@pytest.mark.parametrize("index, name", [(56, "edit_cell"), (60, "edit_cell"), (64, "edit_cell"), (67, "add_cell"),
                                         (75, "add_cell"), (76, "edit_cell")])
def test_defect6_recorded_fenced_json_tool_calls_are_parsed(index, name):
    calls = parse_text_tool_calls(content(index))
    assert [c.name for c in calls] == [name]
    assert "reflection" in json.loads(calls[0].arguments)


def test_defect6_hermes_tool_call_tags_and_bare_objects_are_parsed_and_bare_names_are_not():
    text = ('<tool_call>\n{"name": "execute_cell", "arguments": {"reflection": "run it", "cell": 3}}\n</tool_call>')
    (call,) = parse_text_tool_calls(text)
    assert call.name == "execute_cell" and json.loads(call.arguments) == {"reflection": "run it", "cell": 3}
    (bare,) = parse_text_tool_calls('I will finish. {"name": "finish", "arguments": {"reflection": "done"}}')
    assert bare.name == "finish"
    assert parse_text_tool_calls(content(57)) == []  # after v1's nudge: the bare word "edit_cell"
    assert parse_text_tool_calls('{"name": "rm_rf", "arguments": {}}') == []


def test_defect6_a_turn_with_a_fenced_tool_call_in_its_content_yields_the_call(llm_server):
    llm_server.reset(replay(60))
    turn = request_turn(local(llm_server), prompt().messages, CostLedger())
    assert turn.text_calls and [c.name for c in turn.tool_calls] == ["edit_cell"]
    assert turn.as_message()["tool_calls"][0]["function"]["name"] == "edit_cell"


def test_defect6_the_nudge_states_the_exact_text_format_and_it_parses():
    example = NUDGE[NUDGE.index("{"): NUDGE.rindex("}") + 1]
    (call,) = parse_text_tool_calls(example)
    assert call.name == "edit_cell"


# -- defect 8: usage counts only real requests, failed ones too; an unpriced model says so -----------------------

def test_defect8_failed_requests_are_counted_and_unpriced_says_unpriced(llm_server):
    ledger = CostLedger()
    llm_server.reset(Reply.error(503), Reply.error(503), Reply.error(503))
    with pytest.raises(LLMUnavailable):
        call_model(local(llm_server, retries=2), prompt().messages, ledger)
    t = ledger.totals()
    assert (t.requests, t.failed_requests) == (0, 3)
    assert "3 request(s) (3 failed)" in t.describe()
    llm_server.reset(replay(44))
    call_model(local(llm_server), prompt().messages, ledger)
    t = ledger.totals()
    assert t.cost_text() == "unpriced" and "$0.00000" not in t.describe()


def test_defect8_a_cache_hit_is_not_a_request(llm_server, tmp_path):
    s = local(llm_server, cache=True, cache_dir=str(tmp_path / "c"))
    ledger = CostLedger()
    llm_server.reset(replay(44))
    predict_with_llm(prompt(), s, ledger=ledger)
    v = predict_with_llm(prompt(), s, ledger=ledger)
    assert v.cached and len(llm_server.requests) == 1
    t = ledger.totals()
    assert (t.requests, t.cache_hits) == (1, 1)
    assert "1 answer(s) from CRANE's cache (no request)" in t.describe()
    from crane.commands.check_text import render_text
    from crane.commands.output import CheckReport

    report = CheckReport(schema="crane.check/1", mode="llm", notebooks=[], predicted_crashes=0, errors=0,
                         elapsed_s=0.0)
    assert "LLM: 1 request(s)" in render_text(report, t)
