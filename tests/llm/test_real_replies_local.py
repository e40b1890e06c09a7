"""Issue 22, measured: exchanges recorded between CRANE and Qwen2.5-Coder-0.5B-Instruct (Q4_K_M) served by
llama-cpp-python 0.3.36 on this machine's CPU (benchmarks/llm_local_bench.py, docs/llm.md "Local models"),
replayed through the fake OpenAI-compatible server on 127.0.0.1. Each test pins a defect those real replies
showed and fails on the code before its fix. The fixtures are `replies/*.jsonl` (benchmarks/llm_record_proxy.py's
format; local paths replaced by <path>/NAME)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crane.llm import local_server
from crane.llm.cost import CostLedger
from crane.llm.predictor import predict_with_llm
from crane.llm.prompt import Prompt
from crane.llm.schema import ANSWER_JSON_SCHEMA
from crane.llm.settings import LLMSettings

from .fake_llm_server import Reply

FIXTURES = Path(__file__).resolve().parent / "replies"
QWEN = FIXTURES / "qwen2.5-coder-0.5b-llama-cpp-python.jsonl"
MODEL = "openai/qwen2.5-coder-0.5b"
LLAMA_CPP_PYTHON_OPENAPI = {"openapi": "3.1.0", "info": {"title": "🦙 llama.cpp Python API", "version": "0.3.36"}}


def recorded(index: int, path: Path = QWEN) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8").splitlines()[index])


def replay(index: int, path: Path = QWEN) -> Reply:
    rec = recorded(index, path)
    u = rec["response"].get("usage") or {}
    return Reply(content=rec["response"]["choices"][0]["message"]["content"],
                 usage={"prompt_tokens": u.get("prompt_tokens", 0), "completion_tokens": u.get("completion_tokens", 0)})


def recorded_prompt(index: int, path: Path = QWEN) -> Prompt:
    messages = recorded(index, path)["request"]["messages"]
    chars = sum(len(m["content"]) for m in messages)
    return Prompt(messages=messages, chars=chars, user_chars=len(messages[-1]["content"]), sections={})


def local(server, **kw) -> LLMSettings:
    base: dict[str, Any] = {"retries": 0, "cache": False}
    base.update(kw)
    return LLMSettings(model=MODEL, api_base=server.api_base, **base)



def test_llama_cpp_python_is_detected_and_gets_the_schema_in_its_own_dialect(llm_server):
    """llama-cpp-python enforces a schema only as {"type": "json_object", "schema": ...} (a grammar); before, it
    was an unknown server and got a bare json_object, which no grammar holds to the verdict's fields."""
    llm_server.reset(replay(0))
    llm_server.get_routes["/openapi.json"] = LLAMA_CPP_PYTHON_OPENAPI
    v = predict_with_llm(recorded_prompt(0), local(llm_server), ledger=CostLedger())
    assert v.answer.crash is True and v.answer.line == 3
    assert llm_server.requests[0]["body"]["response_format"] == {"type": "json_object", "schema": ANSWER_JSON_SCHEMA}
    assert local_server.detect_server(llm_server.api_base) == "llama-cpp-python"
    # the recorded request is what CRANE sends today
    assert recorded(0)["request"]["response_format"] == llm_server.requests[0]["body"]["response_format"]


def test_another_fastapi_server_is_not_taken_for_llama_cpp_python(llm_server):
    llm_server.reset(replay(0))
    llm_server.get_routes["/openapi.json"] = {"openapi": "3.1.0", "info": {"title": "My proxy", "version": "1"}}
    predict_with_llm(recorded_prompt(0), local(llm_server), ledger=CostLedger())
    assert llm_server.requests[0]["body"]["response_format"] == {"type": "json_object"}
    assert local_server.detect_server(llm_server.api_base) is None


def test_an_exception_copied_from_the_prompts_example_gives_way_to_the_one_the_explanation_names(llm_server):
    """Qwen explained the probe-verified NameError and wrote the system prompt example's "KeyError" as the
    exception: `crane diagnose` said "will crash: KeyError at line 3"."""
    llm_server.reset(replay(0))
    v = predict_with_llm(recorded_prompt(0), local(llm_server), ledger=CostLedger())
    assert json.loads(recorded(0)["response"]["choices"][0]["message"]["content"])["exception"] == "KeyError"
    assert v.answer.exception == "NameError" and v.answer.line == 3


def test_a_reply_that_repeats_the_prompts_example_is_no_verdict(llm_server):
    """For NBspecific_13's clean variant Qwen returned the system prompt's example word for word (df['Age'],
    KeyError, line 2): a false alarm on a cell that runs clean. It is now an invalid reply: the repair request
    says why, and a second copy is an LLMBadAnswer (the rules decide), never a crash verdict."""
    from crane.llm.errors import LLMBadAnswer

    llm_server.reset(replay(1), replay(1))
    with pytest.raises(LLMBadAnswer):
        predict_with_llm(recorded_prompt(1), local(llm_server), ledger=CostLedger())
    repair = llm_server.requests[1]["body"]["messages"][-1]["content"]
    assert "repeats the example" in repair
    # a genuine answer about df['Age'] elsewhere is still an answer
    llm_server.reset(Reply.answer(explanation="df has no column 'Age' (columns: age, name): df['Age'] raises KeyError"))
    assert predict_with_llm(recorded_prompt(1), local(llm_server), ledger=CostLedger()).answer.exception == "KeyError"


@pytest.mark.parametrize("index, name", [(2, "edit_cell"), (3, "edit_cell"), (4, "finish")])
def test_every_recorded_agent_turn_yields_its_tool_call(index, name):
    from crane.agent.model_call import parse_text_tool_calls

    (call,) = parse_text_tool_calls(recorded(index)["response"]["choices"][0]["message"]["content"])
    assert call.name == name and json.loads(call.arguments)


def test_a_finish_call_with_its_arguments_beside_the_name_keeps_its_explanation(llm_server):
    """Qwen's last turn: ```json {"name": "finish", "explanation": "..."}``` (no "arguments" key): the explanation
    was dropped and the finish ran with empty arguments."""
    from crane.agent.model_call import request_turn
    from crane.agent.tools import Finish, decode_args

    llm_server.reset(replay(4))
    turn = request_turn(local(llm_server), recorded(4)["request"]["messages"], CostLedger())
    (call,) = turn.tool_calls
    args = decode_args(call)
    assert turn.text_calls and isinstance(args, Finish)
    assert args.explanation.startswith("The target cell 3 edited.")


def test_where_the_server_enforces_the_schema_the_example_is_left_out(llm_server):
    """With the example, Qwen sent it back for 3 of 7 verdict requests (NBspecific_13's clean variant twice:
    a false alarm, then no verdict); the same 6 prompts without it (replies 5-10, the schema grammar on) gave 6
    valid verdicts and no copy. Without a schema the example stays: it is what taught the format."""
    from crane.llm.prompt import SYSTEM_PROMPT, SYSTEM_PROMPT_SPEC
    from crane.llm.schema import EXAMPLE_ANSWER

    assert recorded(1)["request"]["messages"][0]["content"] == SYSTEM_PROMPT  # the prompt as CRANE builds it
    llm_server.reset(replay(6))
    llm_server.get_routes["/openapi.json"] = LLAMA_CPP_PYTHON_OPENAPI
    v = predict_with_llm(recorded_prompt(1), local(llm_server), ledger=CostLedger())
    sent = llm_server.requests[0]["body"]["messages"]
    assert sent[0]["content"] == SYSTEM_PROMPT_SPEC == recorded(6)["request"]["messages"][0]["content"]
    assert EXAMPLE_ANSWER["explanation"] not in sent[0]["content"] and sent[1:] == recorded(1)["request"]["messages"][1:]
    assert v.answer.crash is False
    for i in range(5, 11):  # every reply without the example is a verdict of its own
        llm_server.reset(replay(i))
        predict_with_llm(recorded_prompt(i), local(llm_server), ledger=CostLedger())
    llm_server.reset(replay(6))
    predict_with_llm(recorded_prompt(1), local(llm_server, structured="object"), ledger=CostLedger())
    assert llm_server.requests[0]["body"]["messages"][0]["content"] == SYSTEM_PROMPT
